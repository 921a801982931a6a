"""robustfl's command line (argparse). Exit codes: 0 done, 1 a run or cell failed, 2 bad input.

Every command works in-process as ``robustfl.cli.main(argv) -> int``. Bad usage or bad input
gets one line on stderr naming the bad value and what was expected, never a traceback. The
parser is in :mod:`.parser`; each command group in its own module: :mod:`.simulate` (run, matrix,
validate), :mod:`.catalogue` (list, show, plugin), :mod:`.results` (report, compare),
:mod:`.bound` (bound), :mod:`.kappa` (kappa).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from ..errors import RobustFLError
from .bound import cmd_bound
from .catalogue import cmd_list, cmd_plugin, cmd_show
from .common import print_error
from .kappa import cmd_kappa
from .parser import ArgError, build_parser
from .results import cmd_compare, cmd_report
from .simulate import cmd_matrix, cmd_run, cmd_validate

__all__ = ["build_parser", "entry", "main"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "matrix": cmd_matrix,
    "validate": cmd_validate,
    "list": cmd_list,
    "show": cmd_show,
    "report": cmd_report,
    "compare": cmd_compare,
    "bound": cmd_bound,
    "kappa": cmd_kappa,
    "plugin": cmd_plugin,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except ArgError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if getattr(args, "quiet", False):
        logging.getLogger("robustfl").setLevel(logging.ERROR)
    try:
        from ..plugins import load_plugin

        for spec in getattr(args, "plugin", []) or []:
            load_plugin(spec)
        _check_device(args)
        handler = _COMMANDS[args.command]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)
            return handler(args)
    except RobustFLError as exc:
        print_error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (a matrix says what its store holds), exit 130
        matrix = sys.modules.get("robustfl.sweep.interrupt")  # loaded if a matrix was running
        interrupted = getattr(matrix, "Interrupted", ())
        msg = str(exc) if interrupted and isinstance(exc, interrupted) and str(exc) else "interrupted"
        print(f"robustfl: {msg}", file=sys.stderr)
        return 130


def _check_device(args: argparse.Namespace) -> None:
    """``--device cuda`` where this process runs the cells and torch sees no GPU: one line, exit 2,
    before any work (a Ray cluster's workers may have GPUs the driver lacks: not checked there)."""
    if getattr(args, "device", None) != "cuda" or getattr(args, "executor", "local") == "ray":
        return
    from ..simulation.runner import check_device

    check_device("cuda", "--device")


def entry() -> None:
    """The console script."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `robustfl list | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
