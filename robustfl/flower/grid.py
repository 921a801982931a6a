"""A Flower Grid that runs its ClientApps in this process: Flower's ServerApp/ClientApp machinery,
without Ray, a SuperLink or a network.

:class:`InProcessGrid` implements Flower's ``Grid``: ``send_and_receive`` hands each message (a deep
copy: a client never shares arrays with the server) to the ClientApp of its node, with that node's
``Context`` (kept across rounds, ``node_config`` holding ``partition-id`` and ``num-partitions`` as
Flower's simulation engine sets them, ``run_config`` the run's config), in increasing node id; a
ClientApp that raises answers with an error reply carrying the exception, as a SuperNode does.
Node ids are ``1 + partition id``: deterministic, unlike the simulation engine's random ids.

:func:`run_in_process` runs a ``ServerApp`` against such a grid: ``server_app(grid, context)``, the
call Flower's own runtime makes, with the process's task identity set for the run and restored
after.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run, RunStatus
from flwr.supercore.task_identity import TaskIdentity

from . import _checks as check
from ._flwr import require

require()

SERVER_NODE_ID = 1  # Flower's SUPERLINK_NODE_ID: the node id of the server's messages
CLIENT_ERROR = 1  # the error code of a reply whose ClientApp raised (Flower's ClientApp exception)


def _checked(
    owner: str, client_app: Any, num_nodes: Any, run_id: Any, run_config: Any
) -> tuple[int, int]:
    """(num_nodes, run_id) as ints; ConfigError naming the first bad argument."""
    if not callable(client_app):
        check.fail(owner, "client_app", client_app, "a ClientApp")
    num_nodes = check.count(owner, "num_nodes", num_nodes, least=1)
    run_id = check.count(owner, "run_id", run_id)
    if run_config is not None and not isinstance(run_config, Mapping):
        check.fail(owner, "run_config", run_config, "a mapping (Flower's run config) or None")
    return num_nodes, run_id


def _run(run_id: int) -> Run:
    return Run(
        run_id=run_id,
        fab_id="robustfl/in-process",
        fab_version="0",
        fab_hash="",
        override_config={},
        pending_at="",
        starting_at="",
        running_at="",
        finished_at="",
        status=RunStatus(status="running", sub_status="", details=""),
        flwr_aid="",
        federation_id="",
        primary_task_id=1,
        bytes_sent=0,
        bytes_recv=0,
        clientapp_runtime=0.0,
    )


class InProcessGrid(Grid):  # type: ignore[misc]
    """``num_nodes`` virtual nodes, each running ``client_app`` in this process."""

    def __init__(
        self,
        client_app: ClientApp,
        num_nodes: int,
        *,
        run_id: int = 1,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        num_nodes, run_id = _checked("InProcessGrid", client_app, num_nodes, run_id, run_config)
        self.client_app = client_app
        self._run_info = _run(run_id)
        self.contexts = {
            i + 1: Context(
                run_id=run_id,
                node_id=i + 1,
                node_config={"partition-id": i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
            for i in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self._next_id = 0

    def set_run(self, run: Run) -> None:
        self._run_info = run

    @property
    def run(self) -> Run:
        return self._run_info

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids: list[str] = []
        for msg in sorted(messages, key=lambda m: m.metadata.dst_node_id):
            node = int(msg.metadata.dst_node_id)
            if node not in self.contexts:
                raise ValueError(f"message for node {node}, which this grid does not have")
            self._next_id += 1
            msg_id = f"m{self._next_id}"
            msg.metadata.__dict__["_message_id"] = msg_id
            delivered = copy.deepcopy(msg)
            try:
                reply = self.client_app(delivered, self.contexts[node])
            except Exception as exc:  # a ClientApp that raises answers with an error reply
                error = Error(code=CLIENT_ERROR, reason=f"{type(exc).__name__}: {exc}")
                reply = Message(error, reply_to=delivered)
            self._replies[msg_id] = copy.deepcopy(reply)
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


@contextmanager
def task_identity(run_id: int) -> Iterator[None]:
    """The server's identity for messages created in this process (Flower's runtime sets it)."""
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SERVER_NODE_ID
    try:
        yield
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def run_in_process(
    server_app: ServerApp,
    client_app: ClientApp,
    num_nodes: int,
    *,
    run_config: dict[str, Any] | None = None,
    run_id: int = 1,
) -> InProcessGrid:
    """Run ``server_app`` with ``num_nodes`` in-process ClientApps; returns the grid (its nodes'
    contexts hold what the clients kept)."""
    if not callable(server_app):
        check.fail("run_in_process", "server_app", server_app, "a ServerApp")
    num_nodes, run_id = _checked("run_in_process", client_app, num_nodes, run_id, run_config)
    config = dict(run_config or {})
    grid = InProcessGrid(client_app, num_nodes, run_id=run_id, run_config=config)
    context = Context(
        run_id=run_id, node_id=SERVER_NODE_ID, node_config={}, state=RecordDict(), run_config=config
    )
    with task_identity(run_id):
        server_app(grid, context)
    return grid
