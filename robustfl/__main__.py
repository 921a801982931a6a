"""``python -m robustfl``: the command line."""

from .cli.main import entry

if __name__ == "__main__":
    entry()
