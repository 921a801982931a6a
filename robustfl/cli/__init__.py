"""The command line: ``robustfl.cli.main(argv) -> int``."""

from .main import main

__all__ = ["main"]
