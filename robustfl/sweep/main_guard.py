"""Scripts without a main guard: a matrix's worker processes (forkserver/spawn) import the calling
script again, so robustfl called at a script's top level would run again in every worker.

Before it starts workers the driver looks for such a call (:func:`unguarded_main_call`) and
raises :class:`MainGuardError`; a worker that finds itself re-importing an unguarded script
(:func:`importing_main`) stops at once with :data:`MAIN_REIMPORTED_EXIT`, which the pool turns
into the same one error.
"""

from __future__ import annotations

import ast
import multiprocessing as mp
import os
import sys
from pathlib import Path
from types import FrameType

from ..errors import RobustFLError

MAIN_REIMPORTED_EXIT = 87
"""A worker's exit status when it re-imported the user's script and found robustfl called at the
script's top level (no ``if __name__ == "__main__":``); the driver then raises one error."""

GUARD = 'if __name__ == "__main__":'


class MainGuardError(RobustFLError):
    """The script that called robustfl does so at its top level, which the matrix's worker
    processes (forkserver/spawn) import again: its code belongs under the main guard."""


def guard_message(where: str) -> str:
    return (
        f"{where} calls robustfl at its top level, and a matrix's worker processes import it again: "
        f"put the script's code under `{GUARD}` (as in the README's example)"
    )


def script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return f"the script {path}" if path else "the main module"


def importing_main() -> bool:
    """True in a child process while it imports the parent's main module again (the bootstrap
    of a spawn or forkserver process: ``multiprocessing`` marks the process as inheriting, and the
    module runs as ``__mp_main__``). robustfl called then comes from a script's top level."""
    if getattr(mp.current_process(), "_inheriting", False):
        return True
    if getattr(sys.modules.get("__main__"), "__name__", None) != "__mp_main__":
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:  # module-level code of the re-imported script is on the stack
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def leave_if_importing_main() -> None:
    """Called first by ``robustfl.run`` and ``run_matrix``: in a worker re-importing an unguarded
    script, stop the worker at once (before it runs a cell or starts processes of its own) with
    :data:`MAIN_REIMPORTED_EXIT`; the driver reports it once. A process that is not one of our
    workers (no preloaded fork server) says why on one line first."""
    if not importing_main():
        return
    if "robustfl.sweep._preload" not in sys.modules:
        print(f"robustfl: error: {guard_message(script_name())}", file=sys.stderr, flush=True)
    os._exit(MAIN_REIMPORTED_EXIT)


def _is_main_guard(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def unimportable_main() -> str | None:
    """The main script's path when worker processes could not import it again (Python read it
    from standard input: ``python - <<EOF``, ``__file__ == '<stdin>'``), else None."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path if isinstance(path, str) and path and not Path(path).is_file() else None


def unguarded_main_call() -> str | None:
    """Where the main script calls us from its top level outside ``if __name__ == "__main__":``
    ("the script PATH (line N)"), else None. Worker processes started by forkserver or spawn
    import the main script again, so such a call would run again in every worker. Interactive
    sessions and ``python -c`` have no script file: nothing is imported again."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or getattr(main, "__name__", None) != "__main__":
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test) and node.body:
            end = node.body[-1].end_lineno or node.body[-1].lineno
            if node.body[0].lineno <= line <= end:
                return None
    return f"the script {path} (line {line})"
