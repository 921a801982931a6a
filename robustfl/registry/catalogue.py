"""The catalogue behind ``robustfl list`` / ``robustfl show``: a component's description, paper
and formula from its module docstring, and its parameters with defaults and constraints."""

from __future__ import annotations

import inspect
import sys
from typing import Any


def doc_parts(obj: Any) -> dict[str, str]:
    """``description``, ``paper``, ``formula`` and ``details`` of a component, from one source: the
    docstring of the module that defines it (the class's own docstring for a module holding
    several components, or when the module has none). Its first paragraph is the description; a
    paragraph starting ``Paper:`` is the paper; the next paragraph is the formula; ``details`` is
    everything after the description and paper."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    doc = inspect.getdoc(module) if module is not None else None
    own = inspect.getdoc(obj) if inspect.isclass(obj) or inspect.isfunction(obj) else None
    if not doc or (own and _module_holds_several(module)):
        doc = own or doc or ""
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in doc.split("\n\n") if p.strip()]
    raw = [p.strip() for p in doc.split("\n\n") if p.strip()]
    description = paragraphs[0] if paragraphs else ""
    paper, rest, rest_raw = "", [], []
    for text, block in zip(paragraphs[1:], raw[1:], strict=True):
        if not paper and text.lower().startswith("paper:"):
            paper = text.split(":", 1)[1].strip()
        else:
            rest.append(text)
            rest_raw.append(block)
    return {
        "description": description,
        "paper": paper,
        "formula": rest[0] if rest else "",
        "details": "\n\n".join(rest_raw),
    }


def _module_holds_several(module: Any) -> bool:
    """True for a module defining more than one public class (federation/base.py: FedAvg's
    algorithm and full sharing), whose docstring describes none of them alone."""
    classes = [
        v for k, v in vars(module).items()
        if inspect.isclass(v) and v.__module__ == module.__name__ and not k.startswith("_")
    ]
    return len(classes) > 1


def _parameter_names(factory: Any) -> list[str] | None:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    ps = sig.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in ps):
        return None
    return [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


class _Probe:
    """A value no parameter accepts: building a component with it makes the component's own
    validation say what the parameter must be ("parameter p must be <constraint>, got ...")."""

    def __repr__(self) -> str:
        return "<probe>"


def _constraint(factory: Any, name: str, annotation: Any) -> str:
    import re

    try:
        factory(**{name: _Probe()})
    except Exception as exc:  # the component's validation: "... must be X, got <probe>"
        found = re.search(r"must be (.+?),? got <probe>", str(exc))
        if found:
            return found.group(1).strip()
    if annotation is inspect.Parameter.empty:
        return "any"
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def parameter_table(factory: Any, kind: str = "component") -> list[dict[str, Any]]:
    """``[{"name", "default", "constraint"}]`` for every keyword parameter of ``factory``; a
    parameter without a default is ``"required": true``. The constraint is what the component's
    validation says when given a value it cannot take, else the parameter's annotation."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    rows = []
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        row: dict[str, Any] = {"name": p.name}
        if p.default is p.empty:
            row["default"], row["required"] = None, True
        else:
            row["default"] = _jsonable(p.default)
        row["constraint"] = _constraint(factory, p.name, p.annotation)
        rows.append(row)
    return rows


# -- validation on load ------------------------------------------------------------------------


