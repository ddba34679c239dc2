"""The package's import graph: no cycles, and every import points down the layer order.

The graph is read from the source (``ast``), both module-level imports and imports inside
functions, so a dependency hidden in a function body counts like any other. A failure prints
the offending edges (``importer -> imported  (file:line)``); docs/architecture.md explains the
layers and draws the graph this test reads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "arlgym"

#: The layer order, lowest first. A module may import modules of its own layer or of a lower
#: one, never of a higher one. A module belongs to the layer of the longest prefix that names
#: it; ``arlgym`` alone is the package's ``__init__`` (its public API, which re-exports core).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors", ("arlgym.errors", "arlgym.version")),
    ("core", ("arlgym.core", "arlgym.clikit", "arlgym.clirun", "arlgym.rundir")),
    ("api", ("arlgym",)),
    ("envs", ("arlgym.envs", "arlgym.serve")),  # serve sits beside envs
    ("models/policies", ("arlgym.models", "arlgym.assets", "arlgym.policies")),
    ("rollout", ("arlgym.rollout",)),
    ("sft/evaluation", ("arlgym.sft", "arlgym.evaluation")),
    ("rl", ("arlgym.rl",)),
    ("arena", ("arlgym.arena",)),
    ("quickstart", ("arlgym.quickstart",)),
    ("cli", ("arlgym.cli",)),
)

#: Known edges against the order, each to be removed by the change that names it. An entry
#: here is a debt, not a rule: delete it together with the import.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_names(node: ast.AST, module: str, is_package: bool,
                    modules: dict[str, Path]) -> Iterator[str]:
    """The arlgym modules one import statement names (``from pkg import sub`` names the
    submodule ``pkg.sub`` where there is one, else ``pkg``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            yield sub if sub in modules else source


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the package that ``name`` (a module or an attribute path) resolves to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """``(importer, imported) -> ["file:line", ...]`` for every import of one arlgym module by
    another, at module level or inside a function."""
    modules = module_files(root)
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported_names(node, module, path.name == "__init__.py", modules):
                if not name.startswith("arlgym"):
                    continue
                target = _owner(name, modules)
                if target and target != module:
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    found = edges.setdefault((module, target), [])
                    if where not in found:
                        found.append(where)
    return edges


def layer_of(module: str) -> int:
    """Index into :data:`LAYERS` of the layer that holds ``module``."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise KeyError(f"{module} is in no layer; add its package to LAYERS")
    return best


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the package's module count
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_edges(edges: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    """The edges from a lower layer's module to a higher layer's, less the allowed ones."""
    return {(a, b): where for (a, b), where in edges.items()
            if layer_of(a) < layer_of(b) and (a, b) not in ALLOWED_UPWARD}


def _describe(edges: dict[tuple[str, str], list[str]]) -> str:
    return "\n".join(f"  {a} [{LAYERS[layer_of(a)][0]}] -> {b} [{LAYERS[layer_of(b)][0]}]  "
                     f"({', '.join(where)})" for (a, b), where in sorted(edges.items()))


def package_of(module: str) -> str:
    """The node a module is drawn as: its subpackage or top-level module (``arlgym`` alone is
    the package's ``__init__``)."""
    parts = module.split(".")
    return "arlgym" if len(parts) == 1 else parts[1]


def _implied(edge: tuple[str, str], edges: set[tuple[str, str]]) -> bool:
    """Whether ``edges`` lead from ``edge``'s source to its target through another node (the
    drawing leaves such an edge out: the path already shows the dependency)."""
    start, goal = edge
    seen, todo = set(), [b for a, b in edges if a == start and b != goal]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo += [b for a, b in edges if a == node]
    return False


def package_graph(edges: dict[tuple[str, str], list[str]]) -> str:
    """The import graph between subpackages as a mermaid flowchart, drawn top (the commands)
    to bottom (errors), one subgraph per layer, an edge implied by a longer path left out;
    docs/architecture.md shows its output (``python tests/unit/test_layers.py`` prints it)."""
    nodes: dict[str, int] = {}
    for module in module_files():
        nodes[package_of(module)] = layer_of(module)
    pairs = sorted({(package_of(a), package_of(b)) for a, b in edges
                    if package_of(a) != package_of(b)},
                   key=lambda e: (-nodes[e[0]], e[0], -nodes[e[1]], e[1]))
    lines = ["flowchart TD"]
    for index in reversed(range(len(LAYERS))):
        members = sorted(n for n, layer in nodes.items() if layer == index)
        label = LAYERS[index][0]
        lines.append(f'  subgraph L{index}["{label}"]')
        lines += [f"    {n.replace('arlgym', 'api')}[{n}]" for n in members]
        lines.append("  end")
    debts = {(package_of(a), package_of(b)) for a, b in ALLOWED_UPWARD}
    pairs = [e for e in pairs if e in debts or not _implied(e, set(pairs) - debts)]
    for a, b in pairs:
        arrow = "-. allowed, to be removed .->" if (a, b) in debts else "-->"
        lines.append(f"  {a.replace('arlgym', 'api')} {arrow} {b.replace('arlgym', 'api')}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], list[str]]:
    return import_edges()


def test_the_graph_is_read_from_real_imports(edges):
    # guards the reader itself: known imports of the tree must be among the edges it finds
    assert ("arlgym.core.vector", "arlgym.core.validation") in edges
    assert ("arlgym", "arlgym.core") in edges               # `from arlgym.core import (...)`
    assert ("arlgym.sft.train", "arlgym.sft.prefix_sft") in edges  # imported inside a function
    assert len(edges) > 300


def test_every_module_is_in_a_layer(edges):
    for module in module_files():
        layer_of(module)  # raises KeyError naming a module outside every layer


def test_no_import_cycles(edges):
    found = cycles(edges)
    detail = "\n".join(
        " <-> ".join(c) + "\n" + _describe({e: w for e, w in edges.items()
                                            if e[0] in c and e[1] in c})
        for c in found)
    assert not found, f"{len(found)} import cycle(s):\n{detail}"


def test_imports_point_down_the_layers(edges):
    bad = upward_edges(edges)
    order = " -> ".join(name for name, _ in LAYERS)
    assert not bad, (f"{len(bad)} import(s) against the layer order ({order}; a module may "
                     f"import its own layer or a lower one):\n{_describe(bad)}")


def test_allowed_upward_edges_still_exist(edges):
    # an allow-list entry whose import is gone must go too, or it would hide a new one
    stale = sorted(ALLOWED_UPWARD - set(edges))
    assert not stale, f"remove from ALLOWED_UPWARD (the import is gone): {stale}"


def test_the_checks_catch_a_cycle_and_an_upward_import():
    fake = {("arlgym.core.a", "arlgym.rl.b"): ["x:1"], ("arlgym.rl.b", "arlgym.core.a"): ["y:2"]}
    assert cycles(fake) == [["arlgym.core.a", "arlgym.rl.b"]]
    assert list(upward_edges(fake)) == [("arlgym.core.a", "arlgym.rl.b")]


if __name__ == "__main__":
    print(package_graph(import_edges()))
