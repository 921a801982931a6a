"""Turn scenario specs (a name, or a table with name/label/params) into labelled components."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .. import attacks, defenses
from ..capabilities import AttackBase, DefenseBase
from ..errors import ConfigError, GuaranteeError, KnowledgeError, UnknownNameError
from ..registry.adapters import as_attack, as_defense
from ..types import Knowledge, TaskInfo

Spec = str | Mapping[str, Any]


def spec_name(spec: Spec) -> str:
    return spec if isinstance(spec, str) else str(spec["name"])


def attack_label(spec: Spec) -> str:
    if isinstance(spec, str):
        return spec
    return str(spec.get("label") or spec["name"])


def defense_label(spec: Spec) -> str:
    if isinstance(spec, str):
        return spec
    if spec.get("label"):
        return str(spec["label"])
    pre = [p if isinstance(p, str) else str(p["name"]) for p in spec.get("pre", []) or []]
    return "+".join([*pre, str(spec["name"])])


# --- choosing an attack or defense: scenario entries by label, --set attack.* / defense.* -------
def _registry(section: str) -> Any:
    return attacks.registry if section == "attack" else defenses.registry


def _label(section: str, spec: Spec) -> str:
    return attack_label(spec) if section == "attack" else defense_label(spec)


def section_settings(settings: Mapping[str, Any], section: str) -> dict[str, Any]:
    """The ``--set section.key=value`` overrides of one section, as {key: value}."""
    out = {}
    for key, value in settings.items():
        sec, _, name = key.partition(".")
        if sec == section and name:
            out[name] = value
    return out


def _simplest(spec: Mapping[str, Any]) -> Spec:
    """A spec holding nothing but a name is the name (the same cell key as before)."""
    return str(spec["name"]) if set(spec) == {"name"} else dict(spec)


def _takes(section: str, spec: Spec, param: str) -> bool:
    if section == "defense" and param == "pre":  # every rule can be composed
        return True
    known = _registry(section).parameters(spec_name(spec))
    return known is None or param in known


def _refuse_unknown(section: str, spec: Spec, params: Mapping[str, Any]) -> None:
    """``--set section.p`` that the chosen component does not take: exit 2 naming the key."""
    import difflib

    name = spec_name(spec)
    known = _registry(section).parameters(name)
    if known is None:
        return
    for p in params:
        if p in ("name", "label") or (section == "defense" and p == "pre") or p in known:
            continue
        close = difflib.get_close_matches(p, known, n=1, cutoff=0.5)
        hint = f"; did you mean {section}.{close[0]}?" if close else ""
        listed = ", ".join(known) if known else "none"
        raise ConfigError(
            f"--set {section}.{p}: {section} {name!r} has no parameter {p!r}{hint} (its parameters: {listed})"
        )


def check_spec(section: str, spec: Any) -> None:
    """``spec`` names an attack or defense: a non-empty name, or a table with a string ``name`` (a
    string ``label``, a defense's ``pre`` list of names or such tables); else one ConfigError line.
    A cell is named and hashed by its specification, so an object cannot stand for one."""
    ok = isinstance(spec, str) and bool(spec)
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        ok = isinstance(spec.get("label", ""), str)
        pre = spec.get("pre", [])
        if section == "defense" and not (isinstance(pre, list) and all(
            isinstance(p, str) or (isinstance(p, Mapping) and isinstance(p.get("name"), str)) for p in pre
        )):
            raise ConfigError(f"defense.pre must be a list of names or tables with a string 'name', "
                              f"got {pre!r}")
    if not ok:
        raise ConfigError(
            f"{section} must be a name or a table like {{'name': ..., 'label': ...}}, got {spec!r}: to "
            f"run your own class, register it (robustfl.{section}s.register(name, cls) or a plugin file)"
        )


def pick_entries(requested: Sequence[Spec], entries: Sequence[Spec], section: str) -> list[Spec]:
    """``--attacks`` / ``--defenses``: a name given there is first the label of one of the
    scenario's ``matrix.attacks`` / ``matrix.defenses`` entries (that entry, with its parameters),
    else a registered name (the component with its defaults)."""
    if isinstance(requested, str | bytes | Mapping) or not isinstance(requested, Sequence):
        raise ConfigError(f"{section}s must be a list of names or tables, got {requested!r}")
    for r in requested:
        check_spec(section, r)
    by_label = {_label(section, e): e for e in entries}
    registry = _registry(section)
    for r in requested:  # unknown: suggest among the labels too (--attacks ipm-10 -> 'ipm-100')
        if isinstance(r, str) and r not in by_label and "+" not in r and r not in registry:
            raise UnknownNameError(section, r, [*by_label, *registry.names()])
    return [by_label.get(r, r) if isinstance(r, str) else r for r in requested]


def apply_settings(specs: Sequence[Spec], section: str, settings: Mapping[str, Any]) -> list[Spec]:
    """A matrix's entries with the ``--set section.p=V`` overrides applied: ``p = V`` is set on
    every entry whose component has a parameter ``p`` (over the entry's own value: the command
    line wins), ``defense.pre`` on every defense. A ``p`` no entry takes is refused naming the
    key (exit 2). ``name`` and ``label`` choose the run command's component, not a matrix entry's
    parameter: they are left to the [attack] / [defense] section (the matrix command refuses
    them, see :func:`refuse_choice_settings`)."""
    params = {k: v for k, v in section_settings(settings, section).items() if k not in ("name", "label")}
    if not params:
        return list(specs)
    plural = f"{section}s"
    out = list(specs)
    for p, value in params.items():
        takers = [i for i, s in enumerate(out) if _takes(section, s, p)]
        if not takers:
            labels = ", ".join(_label(section, s) for s in out)
            raise ConfigError(
                f"--set {section}.{p}={value!r}: no {section} in this matrix has a parameter {p!r} "
                f"({plural}: {labels})"
            )
        for i in takers:
            spec = out[i]
            base: dict[str, Any] = {"name": spec} if isinstance(spec, str) else dict(spec)
            out[i] = {**base, p: value}
    return out


def refuse_choice_settings(settings: Mapping[str, Any]) -> None:
    """``--set attack.name`` / ``attack.label`` (or the defense's) on the matrix command: it runs
    matrix.attacks / matrix.defenses, so these would change nothing; exit 2 naming the key."""
    for section in ("attack", "defense"):
        for p in ("name", "label"):
            if p in section_settings(settings, section):
                raise ConfigError(
                    f"--set {section}.{p} does not apply to a matrix, which runs matrix.{section}s: "
                    f"choose them with --{section}s ({section}.{p} is for the run command)"
                )


def chosen_spec(sc: Any, section: str, chosen: Spec | None) -> Spec:
    """The attack or defense of one run (the run command, ``robustfl.run``).

    Without ``chosen``: the scenario's [attack] / [defense] section (which holds the ``--set``
    values). With a name: the section when it names that component (with the section's
    parameters), else the ``matrix.attacks`` / ``matrix.defenses`` entry with that label, else
    the registered component; the ``--set section.p`` overrides apply to it in every case, and
    one it does not take is refused naming the key. A table is used as given; anything else (an
    object, a number) is refused: a cell is named and hashed by its specification."""
    sec = dict(sc.section(section))
    params = section_settings(getattr(sc, "settings", {}), section)
    if chosen is None:
        spec = _simplest(sec)
        _refuse_unknown(section, spec, params)
        return spec
    check_spec(section, chosen)
    if not isinstance(chosen, str):
        return chosen
    if "name" in params and params["name"] != chosen:
        raise ConfigError(
            f"--set {section}.name={params['name']!r} conflicts with --{section} {chosen}; give one of them"
        )
    params.pop("name", None)
    if sec.get("name") == chosen:
        base: dict[str, Any] = sec
    else:
        entries = sc.section("matrix")[f"{section}s"]
        picked = pick_entries([chosen], entries, section)[0]
        base = {"name": picked} if isinstance(picked, str) else dict(picked)
    _refuse_unknown(section, base, params)
    return _simplest({**base, **params})


def build_attack(spec: Spec) -> AttackBase:
    """The attack a spec names, with its optional behaviour declared (a plugin's adapted)."""
    if isinstance(spec, str):
        return as_attack(attacks.create(spec), spec)
    params = {k: v for k, v in spec.items() if k not in ("name", "label")}
    return as_attack(attacks.create(str(spec["name"]), **params), attack_label(spec))


def build_defense(spec: Spec) -> DefenseBase:
    """The defense a spec names (composed with its ``pre`` stages), its optional behaviour declared."""
    if isinstance(spec, str):
        return as_defense(defenses.create(spec))
    if spec.get("pre"):
        from ..defenses.compose import build_defense as compose_build

        return as_defense(compose_build(dict(spec))[1])
    params = {k: v for k, v in spec.items() if k not in ("name", "label", "pre")}
    return as_defense(defenses.create(str(spec["name"]), **params))


def check_knowledge(attack: AttackBase, label: str, granted_level: str) -> None:
    need = attack.knowledge
    granted = Knowledge.grant(granted_level)
    missing = need & ~granted
    if missing:
        raise KnowledgeError(
            f"attack {label!r} needs {missing.describe()} knowledge, which threat.knowledge = "
            f"{granted_level!r} does not grant (it grants {granted.describe()})"
        )


def check_guarantee(defense: DefenseBase, label: str, k: int, f_hat: int, allow_outside: bool) -> bool:
    """True when the cell runs outside the rule's guarantee (allowed); raises when refused."""
    if defense.admits(k, f_hat):
        return False
    if allow_outside:
        return True
    need = defense.min_clients(f_hat)
    raise GuaranteeError(
        f"defense {label!r} needs at least {need if need > k else f'more than {k}'} clients per round for "
        f"assumed_byzantine = {f_hat}, got {k}; pass --allow-outside-guarantee to run it anyway "
        "(flagged in the table)"
    )


def setup_attack(attack: AttackBase, label: str, info: TaskInfo) -> None:
    attack.setup(info)


def named_generator(seed: int, name: str) -> torch.Generator:
    """A torch.Generator for one named stream of one cell seed (never the global RNG)."""
    digest = hashlib.sha256(f"robustfl:{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
