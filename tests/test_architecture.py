"""The package's import graph obeys its layering (read with ``ast``; nothing is imported).

Every ``import`` / ``from ... import`` under ``robustfl/`` is collected -- at module level, in
functions, and ``importlib.import_module("robustfl....")`` with a literal name -- relative
imports resolved, ``from pkg import mod`` resolved to the module ``pkg.mod`` where that is one.
Imports under ``if TYPE_CHECKING:`` count as type-only: they obey the rules but never run, so
they make no import cycle. The rules:

* nothing outside ``robustfl/cli`` imports ``robustfl.cli`` (``robustfl/__main__.py``, the
  ``python -m robustfl`` entry, excepted), and only ``robustfl/cli`` imports rich;
* no module imports a private module (a dotted component starting with ``_``) of another package
  (a folder: ``robustfl.defenses._select`` may be imported from ``robustfl/defenses/`` and its
  subfolders only), and nothing imports the deprecated shim ``robustfl.defenses._util``;
* no cycle among the modules' module-level imports; counting function-level imports as well, no
  cycle between top-level units (a folder under ``robustfl/`` or a top-level module).

Each failure lists the offending imports as ``file:line importer -> imported``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "robustfl"
CLI = "robustfl.cli"
ENTRY_POINTS = frozenset({"robustfl.__main__"})  # above the CLI: may import it
SHIMS = frozenset({"robustfl.defenses._util"})  # deprecated re-exports nobody may import
GUI_LIBRARIES = ("rich",)  # terminal-output libraries: robustfl/cli only


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``importer`` (a module) names ``target`` at ``path:line``."""

    importer: str
    target: str
    path: str
    line: int
    function_level: bool = False  # inside a function body: runs when called, not on import
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs

    def __str__(self) -> str:
        where = " (in a function)" if self.function_level else ""
        return f"{self.path}:{self.line} {self.importer} -> {self.target}{where}"


# -- reading the package -----------------------------------------------------------------------
def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (a folder under ``root``), dotted name -> file."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _base_of(module: str, is_package: bool, level: int) -> str:
    """The package a relative import of ``level`` dots starts from."""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    return ".".join(parts[: len(parts) - (level - 1)] if level > 1 else parts)


def _imports_in(tree: ast.Module, module: str, is_package: bool, modules: Mapping[str, Path],
                rel: str) -> list[Import]:
    found: list[Import] = []

    def add(target: str, node: ast.AST, in_function: bool, type_only: bool) -> None:
        found.append(Import(module, target, rel, getattr(node, "lineno", 0), in_function, type_only))

    def resolve_from(node: ast.ImportFrom) -> list[str]:
        if node.level:
            base = _base_of(module, is_package, node.level)
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        targets = []
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            targets.append(sub if sub in modules else source)
        return list(dict.fromkeys(targets))

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, in_function, type_only)
        elif isinstance(node, ast.ImportFrom):
            for target in resolve_from(node):
                add(target, node, in_function, type_only)
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            arg = node.args[0] if node.args else None
            if name == "import_module" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value, node, in_function, type_only)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, in_function, True)
            for child in node.orelse:
                visit(child, in_function, type_only)
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner, type_only)

    visit(tree, False, False)
    return found


def collect_imports(root: Path, package: str = PACKAGE) -> tuple[dict[str, Path], list[Import]]:
    """The package's modules and every import they make (module- and function-level)."""
    modules = module_names(root, package)
    edges: list[Import] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(root).as_posix()
        edges += _imports_in(tree, name, path.name == "__init__.py", modules, rel)
    return modules, edges


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# -- the rules -------------------------------------------------------------------------------------
def cli_imports(edges: Iterable[Import], cli: str = CLI, entry_points: frozenset[str] = ENTRY_POINTS,
                libraries: Sequence[str] = GUI_LIBRARIES) -> list[Import]:
    """Imports of the CLI (or of a terminal-output library) from outside it."""
    out = []
    for e in edges:
        if _within(e.importer, cli) or e.importer in entry_points:
            continue
        if _within(e.target, cli) or any(_within(e.target, lib) for lib in libraries):
            out.append(e)
    return out


def private_imports(edges: Iterable[Import], package: str = PACKAGE,
                    shims: frozenset[str] = SHIMS) -> list[Import]:
    """Imports of another package's private module, and any import of a deprecated shim."""
    out = []
    for e in edges:
        if not _within(e.target, package) or e.target == e.importer:
            continue
        if any(_within(e.target, s) for s in shims):
            out.append(e)
            continue
        parts = e.target.split(".")
        private = [i for i, p in enumerate(parts) if p.startswith("_") and p not in ("__init__", "__main__")]
        if private and not _within(e.importer, ".".join(parts[: private[0]])):
            out.append(e)
    return out


def _sccs(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def _one_cycle(comp: Sequence[str], graph: Mapping[str, Iterable[str]], start: str) -> list[str]:
    """A shortest cycle through ``start`` within the component (breadth-first): a -> ... -> a."""
    inside = set(comp)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt not in inside:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in parent:
                    parent[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start]


def _cycle_report(graph: Mapping[str, set[str]], why: Mapping[tuple[str, str], list[Import]]) -> list[str]:
    lines = []
    for comp in _sccs(graph):
        seen: set[tuple[str, ...]] = set()
        for start in comp:  # a shortest cycle through each node: every node's part is shown
            cycle = _one_cycle(comp, graph, start)
            first = cycle.index(min(cycle[:-1]))
            canonical = tuple(cycle[first:-1] + cycle[:first])
            if canonical in seen:
                continue
            seen.add(canonical)
            lines.append(f"cycle {' -> '.join(cycle)} (component: {', '.join(comp)})")
            for a, b in zip(cycle, cycle[1:], strict=False):
                lines += [f"    {e}" for e in why[(a, b)]]
    return lines


def module_cycles(modules: Mapping[str, Path], edges: Iterable[Import]) -> list[str]:
    """Cycles among the package's modules through imports that run at import time."""
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for e in edges:
        if e.function_level or e.type_only or e.target not in modules or e.target == e.importer:
            continue
        graph[e.importer].add(e.target)
        why[(e.importer, e.target)].append(e)
    return _cycle_report(graph, why)


def unit_of(module: str, package: str = PACKAGE) -> str:
    """The top-level unit: ``robustfl.<folder or module>`` (the root package is its own unit)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == package else parts[0]


def unit_cycles(modules: Mapping[str, Path], edges: Iterable[Import], package: str = PACKAGE) -> list[str]:
    """Cycles between top-level units, counting function-level imports too."""
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for e in edges:
        if e.type_only or not _within(e.target, package):
            continue
        a, b = unit_of(e.importer, package), unit_of(e.target, package)
        if a in (b, package):  # the root package re-exports the API: it is above every unit
            continue
        graph[a].add(b)
        why[(a, b)].append(e)
    return _cycle_report(graph, why)


# -- the package -----------------------------------------------------------------------------------
MODULES, EDGES = collect_imports(ROOT)


def test_the_walk_sees_the_package() -> None:
    assert "robustfl.cli.main" in MODULES and "robustfl.kernels" in MODULES
    assert any(e.function_level for e in EDGES) and any(not e.function_level for e in EDGES)


MAX_LINES = 400


def test_no_module_over_400_lines() -> None:
    """One idea per module: a module that outgrows 400 lines holds several (CONTRIBUTING)."""
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / PACKAGE).rglob("*.py")}
    assert len(sizes) > 100
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_exactly_one_function_body_runs_rounds() -> None:
    """The round loop is written once (robustfl.simulation.round.run_rounds): no other function in
    the package loops over a range of rounds or calls a stage in sequence itself."""
    import ast

    loops = []
    for path in (ROOT / PACKAGE).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
                text = ast.unparse(node.iter)
                if text.startswith("range(") and "round" in text:
                    loops.append((path.relative_to(ROOT).as_posix(), node.lineno, text))
    assert [p for p, _, _ in loops] == ["robustfl/simulation/round.py"], loops


def test_nothing_outside_cli_imports_cli_or_rich() -> None:
    bad = cli_imports(EDGES)
    assert not bad, "imports of robustfl.cli / rich from outside robustfl/cli:\n" + "\n".join(map(str, bad))


def test_flower_is_imported_by_robustfl_flower_alone() -> None:
    """Flower is an optional extra: only ``robustfl/flower`` imports ``flwr``, and nothing outside it
    imports ``robustfl.flower`` -- so ``import robustfl`` (and every command) never needs Flower."""
    bad = [
        e for e in EDGES
        if not _within(e.importer, "robustfl.flower")
        and (_within(e.target, "flwr") or _within(e.target, "robustfl.flower"))
    ]
    assert any(_within(e.target, "flwr") for e in EDGES), "the walk sees no import of flwr at all"
    listed = "\n".join(map(str, bad))
    assert not bad, "imports of flwr / robustfl.flower from outside robustfl/flower:\n" + listed


def test_no_private_module_of_another_package_is_imported() -> None:
    bad = private_imports(EDGES)
    assert not bad, "imports of another package's private module (or of a shim):\n" + "\n".join(map(str, bad))


def test_no_import_cycle_among_modules() -> None:
    lines = module_cycles(MODULES, EDGES)
    assert not lines, "module-level import cycles:\n" + "\n".join(lines)


def test_no_import_cycle_between_top_level_packages() -> None:
    lines = unit_cycles(MODULES, EDGES)
    head = "cycles between top-level packages (function-level imports counted):\n"
    assert not lines, head + "\n".join(lines)


# -- the checker catches what it should ------------------------------------------------------------
def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_catches_each_violation(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/cli/__init__.py": "from .main import main\n",
        "pkg/cli/main.py": "from ..core import a\nimport rich\n\ndef main() -> None: ...\n",
        "pkg/core/__init__.py": "",
        "pkg/core/a.py": "from . import b\n",
        "pkg/core/b.py": "from .c import x\n",
        "pkg/core/c.py": (
            "from .a import y\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..cli import main\n"
        ),
        "pkg/core/_hidden.py": "",
        "pkg/core/sub/__init__.py": "",
        "pkg/core/sub/ok.py": "from .. import _hidden\n",  # inside core: allowed
        "pkg/other/__init__.py": "",
        "pkg/other/d.py": (
            "import rich.table\nfrom ..core._hidden import z\n\n"
            "def late():\n    from ..cli.main import main\n    import importlib\n"
            "    importlib.import_module('pkg.core._hidden')\n"
        ),
        "pkg/core/e.py": "def late():\n    from ..other import d\n",
    })
    modules, edges = collect_imports(tmp_path, "pkg")
    assert set(modules) >= {"pkg", "pkg.cli", "pkg.cli.main", "pkg.core.a", "pkg.core.sub.ok", "pkg.other.d"}

    cli = sorted(str(e) for e in cli_imports(edges, cli="pkg.cli", entry_points=frozenset()))
    assert cli == [
        "pkg/core/c.py:4 pkg.core.c -> pkg.cli.main",
        "pkg/other/d.py:1 pkg.other.d -> rich.table",
        "pkg/other/d.py:5 pkg.other.d -> pkg.cli.main (in a function)",
    ]
    private = sorted(str(e) for e in private_imports(edges, "pkg", shims=frozenset({"pkg.core.sub.ok"})))
    assert private == [
        "pkg/other/d.py:2 pkg.other.d -> pkg.core._hidden",
        "pkg/other/d.py:7 pkg.other.d -> pkg.core._hidden (in a function)",
    ]
    cycles = module_cycles(modules, edges)  # the TYPE_CHECKING import of cli makes no cycle
    assert cycles[0] == "cycle pkg.core.a -> pkg.core.b -> pkg.core.c -> pkg.core.a " \
        "(component: pkg.core.a, pkg.core.b, pkg.core.c)"
    assert cycles[1:] == [
        "    pkg/core/a.py:1 pkg.core.a -> pkg.core.b",
        "    pkg/core/b.py:1 pkg.core.b -> pkg.core.c",
        "    pkg/core/c.py:1 pkg.core.c -> pkg.core.a",
    ]
    units = unit_cycles(modules, edges, "pkg")  # core -> other (function) -> cli -> core
    assert units[0].startswith("cycle pkg.cli -> pkg.core -> pkg.other -> pkg.cli")
    assert "    pkg/core/e.py:2 pkg.core.e -> pkg.other.d (in a function)" in units
    assert "    pkg/other/d.py:5 pkg.other.d -> pkg.cli.main (in a function)" in units


def test_a_clean_package_passes(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from .core import a\n",
        "pkg/cli/__init__.py": "import rich\nfrom ..core import a\n",
        "pkg/core/__init__.py": "",
        "pkg/core/a.py": "from ._b import x\n",
        "pkg/core/_b.py": "",
    })
    modules, edges = collect_imports(tmp_path, "pkg")
    assert not cli_imports(edges, cli="pkg.cli", entry_points=frozenset())
    assert not private_imports(edges, "pkg", shims=frozenset())
    assert not module_cycles(modules, edges) and not unit_cycles(modules, edges, "pkg")
