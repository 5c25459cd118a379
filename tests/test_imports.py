"""The import graph of eqsat's modules has no cycle: lower layers never import higher ones.

Every import counts, those inside functions too (a deferred import hides a cycle; it does not remove
it), and importing ``a.b.c`` from outside ``a.b`` imports the package ``a.b`` first (its ``__init__``
runs; from inside, it is already running). The root package ``eqsat`` is the public facade and is left
out: importing anything runs it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where each package's files are (setuptools' package-dir in pyproject.toml).
PACKAGES = {
    "eqsat": ROOT / "eqsat",
    "eqsat.rules": ROOT / "rules",
    "eqsat.lowering": ROOT / "lowering",
    "bench": ROOT / "bench",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of eqsat that ``name`` imports, with the packages they are in."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            for alias in node.names:  # a submodule, or a name defined by the module itself
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in known else module)
    closed = set()
    for target in targets:
        parts = target.split(".")
        closed.add(target)
        closed.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if not _inside(name, p))
    return {t for t in closed if t in known and t != name}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_the_modules():
    graph = _graph()
    assert {"eqsat.ir", "eqsat.ops.base", "eqsat.rules.base", "eqsat.frontend.paddle.nn"} <= set(graph)
    assert "eqsat.ops" in graph["eqsat.ir"] and "eqsat.types" in graph["eqsat.ops.base"]
    assert "eqsat.rules" in graph["eqsat.user_rules"]  # importing eqsat.rules.traced runs rules/__init__
    assert "eqsat.rules" not in graph["eqsat.rules.softmax"]  # from inside, it is already running


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = _graph()
    graph = {k: {t for t in v if t != "eqsat"} for k, v in graph.items() if k != "eqsat"}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen - {"eqsat"}:
            seen.add(nxt)
            todo.append(nxt)
    return seen


LAYERS = (
    ("ops", ("eqsat.ops",)),
    ("rules", ("eqsat.rules",)),
    ("egraph", ("eqsat.egraph",)),
    ("extract", ("eqsat.extract",)),
    ("pipeline", ("eqsat.pipeline", "eqsat.accept", "eqsat.report", "eqsat.options")),
    ("api", ("eqsat.api", "eqsat.jit", "eqsat.cli")),
)
"""Lowest first: no module of a layer imports, even through others, a module of a layer above it."""


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(_inside(module, p) for p in prefixes)


def test_lower_layers_never_import_higher_ones():
    graph = _graph()
    wrong = []
    for i, (layer, prefixes) in enumerate(LAYERS):
        above = [p for _, higher in LAYERS[i + 1 :] for p in higher]
        for module in (m for m in graph if _in(m, prefixes)):
            wrong += [f"{module} ({layer}) -> {t}" for t in sorted(_reach(graph, module)) if _in(t, above)]
    assert not wrong, "\n".join(wrong)


def test_frontends_never_import_a_lowering():
    graph = _graph()
    wrong = [
        f"{module} -> {t}"
        for module in graph
        if _in(module, ("eqsat.frontend",))
        for t in sorted(_reach(graph, module))
        if _in(t, ("eqsat.lowering",))
    ]
    assert not wrong, "\n".join(wrong)
