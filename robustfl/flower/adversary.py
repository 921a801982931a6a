"""The simulation-side adversary: attacks that need the other clients' rows, run on the server.

ALIE, Min-Max, Fang's attacks, FLTrust's adaptive attack and every attack that does not declare
``per_client`` need what one client cannot see (the colluders' rows, the honest rows, the server's
reference, the defense itself). In a simulation, the server plays the adversary: its clients train
honestly, and before the defense runs their rows are replaced by the attack's -- given exactly the
:class:`~robustfl.types.AttackContext` robustfl's engine gives (the same stage,
:func:`robustfl.simulation.round.attack_stage`): ``own`` the Byzantine clients' honest rows in row
order, ``round`` t (0-based), ``num_clients`` K (the rows received), the global model, the attack's
own random stream (``named_generator(seed, "attack")``, as in the engine), and, as
``knowledge`` grants, the honest rows, the server's reference update and an oracle that runs a copy
of the defense.

Which rows are its clients': node ids given here (``nodes``), or replies marked by
:func:`robustfl.flower.mods.mark_byzantine_mod` (a ClientApp mod placed on the chosen clients: in
Flower's simulation engine the node ids are not known in advance). This is a simulation device:
a deployed federation has no server-side adversary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from torch import Tensor

from ..capabilities import AttackBase
from ..simulation import components as C
from ..simulation.round import Round, attack_stage, dry_run, oracle_for
from ..types import Aggregate, DefenseContext, Knowledge
from . import _checks as check

MARK = "robustfl-byzantine"  # the ConfigRecord key mark_byzantine_mod sets in a reply
LEVELS = ("own", "honest", "full")


class ServerAdversary:
    """Replaces the rows of its clients with ``attack``'s (any robustfl attack spec): ``nodes`` node
    ids (integers >= 0; may be empty when a mod marks the replies), ``knowledge`` one of
    :data:`LEVELS`, ``seed`` a seed."""

    def __init__(
        self,
        attack: C.Spec,
        *,
        nodes: Collection[int] = (),
        knowledge: str = "full",
        seed: int = 0,
    ) -> None:
        check.spec("ServerAdversary", "attack", attack)
        node_ids = check.ids("ServerAdversary", "nodes", nodes)
        check.choice("ServerAdversary", "knowledge", knowledge, LEVELS)
        seed = check.seed("ServerAdversary", seed)
        self.spec, self.label = attack, C.attack_label(attack)
        self.attack: AttackBase = C.build_attack(attack)
        C.check_knowledge(self.attack, self.label, knowledge)
        self.granted = Knowledge.grant(knowledge)
        self.nodes = node_ids
        self.seed = seed
        self.last_stats: dict[str, float] = {}
        self.reset()

    @property
    def needs_reference(self) -> bool:
        return bool(self.attack.knowledge & Knowledge.REFERENCE) and Knowledge.REFERENCE in self.granted

    def owns(self, node_id: int) -> bool:
        return node_id in self.nodes

    def reset(self) -> None:
        self._g_attack = C.named_generator(self.seed, "attack")

    def replace_rows(
        self,
        rows: Tensor,
        byz: Tensor,
        ctx: DefenseContext,
        defense: Callable[[Tensor, DefenseContext], Aggregate],
    ) -> Tensor:
        """``rows`` with the Byzantine ones (``byz``, bool (K,)) replaced; ``ctx`` is the round's
        DefenseContext (its ``round``, global model and reference are the attack's too)."""
        if int(byz.sum()) == 0:
            return rows
        assert ctx.global_model is not None
        r = Round(t=ctx.round, w=ctx.global_model, rows=rows.clone(), byz=byz, reference=ctx.reference)
        oracle = oracle_for(r, dry_run(defense, ctx)) if Knowledge.ORACLE in self.granted else None
        attack_stage(
            self.attack, self.label, r, granted=self.granted, generator=self._g_attack,
            global_model=ctx.global_model, reference=ctx.reference, oracle=oracle,
        )
        self.last_stats = dict(r.attack_stats)
        assert r.rows is not None
        return r.rows
