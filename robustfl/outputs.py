"""Where a command writes: output paths checked before any work (:func:`check_outputs`) and
written with one-line errors (:func:`write_text`). Used by the command line and by the Flower
demo; it imports the standard library and ``robustfl.errors`` only."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from .errors import ConfigError


def check_outputs(
    outputs: Mapping[str, str | None], inputs: Mapping[str, str | Path | None] | None = None
) -> None:
    """Before any work: every output path (option -> path; None: not given) can be written, and
    none names the same file as another output or as a file the command reads or keeps (``inputs``:
    the scenario, the store). Otherwise one line, exit 2: nothing computed is lost to a path that
    cannot take it, and no output overwrites a store or a scenario. The probe makes the missing
    folders and a file, and removes what it made (the writers make the folders when they write):
    a command refused later leaves nothing behind."""
    seen: dict[Path, str] = {}
    for what, path in (inputs or {}).items():
        if path is not None and str(path) != ":memory:":
            seen[Path(path).resolve()] = what
    for option, path in outputs.items():
        if not path:
            continue
        resolved = Path(path).resolve()
        if resolved in seen:
            raise ConfigError(
                f"{option} {path!r} is the same file as {seen[resolved]}: give it a path of its own"
            )
        seen[resolved] = option
        writable(option, path)


def writable(option: str, path: str | Path) -> None:
    """Refuse (one line, exit 2) a path ``option`` names that cannot be written: a folder, a place
    where no file can be made, no permission. An existing file is opened for appending only."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"cannot write {option} {str(path)!r}: it is a folder (expected a file path)")
    above = next((a for a in p.parents if a.exists()), None)  # the nearest existing folder above it
    if above is not None and not above.is_dir():
        raise ConfigError(f"cannot write {option} {str(path)!r}: {str(above)!r} is a file, not a folder")
    existed = p.exists()
    made = [a for a in p.parents if not a.exists()]  # deepest first: removed again after the probe
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {option} {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        if not existed:
            p.unlink(missing_ok=True)
        for folder in made:
            with contextlib.suppress(OSError):  # another process may have put something there
                folder.rmdir()


def write_text(option: str, path: str | Path, text: str) -> None:
    """``text`` at ``path`` (its folder made); a failure is one line naming the option, exit 2."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {option} {str(path)!r}: {exc.strerror or exc}") from None
