"""No function of the package is over 150 lines and no class over 300 (``end_lineno - lineno
+ 1`` of its ``ast`` node, docstring and comments included), data tables apart: a longer one is
split along its parts (a module function, a mixin of one concern). docs/architecture.md
("Conventions") states the limits."""

from __future__ import annotations

import ast
from pathlib import Path

from test_layers import ROOT

FUNCTION_LINES = 150
CLASS_LINES = 300

#: Data tables (a definition that is a table of values, not logic), one line each on why.
DATA_TABLES: dict[str, str] = {}


def sizes(root: Path = ROOT) -> dict[str, tuple[str, int]]:
    """``"file:line name" -> (kind, lines)`` of every function and class under ``root``
    (methods and nested ones included)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                out[where] = (kind, node.end_lineno - node.lineno + 1)
    return out


def too_long(found: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    limit = {"function": FUNCTION_LINES, "class": CLASS_LINES}
    return {where: (kind, n) for where, (kind, n) in found.items()
            if n > limit[kind] and where.split(" ", 1)[1] not in DATA_TABLES}


def test_no_function_or_class_is_too_long():
    found = sizes()
    bad = too_long(found)
    detail = "\n".join(f"  {where}: {kind} of {n} lines" for where, (kind, n) in sorted(bad.items()))
    assert not bad, (f"{len(bad)} definition(s) over {FUNCTION_LINES} lines (functions) or "
                     f"{CLASS_LINES} (classes); split them:\n{detail}")


def test_the_trainer_stays_a_loop_under_the_class_limit():
    [(kind, n)] = [v for k, v in sizes().items() if k.endswith(" Trainer")]
    assert kind == "class" and 200 < n <= CLASS_LINES  # the reader finds the real class


def test_the_check_counts_lines_of_nested_definitions(tmp_path):
    pkg = tmp_path / "arlgym"
    pkg.mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LINES))
    (pkg / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\n    def g(self):\n"
                              "        return 1\n")
    found = sizes(pkg)
    assert found["arlgym/m.py:2 f"] == ("function", FUNCTION_LINES + 1)
    assert found["arlgym/m.py:1 C"] == ("class", FUNCTION_LINES + 5)
    assert list(too_long(found)) == ["arlgym/m.py:2 f"]
