"""Experiment and benchmark scripts use arlgym's public names only: no ``from arlgym... import
_name`` and no ``arlgym._module``, so a private helper can change without breaking them."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT_DIRS = ("experiments", "bench")


def private_imports(source: str, filename: str = "<script>") -> list[str]:
    """``"line: what"`` for each import of a private arlgym name or module in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module != "arlgym" and not module.startswith("arlgym."):
                continue
            if any(part.startswith("_") for part in module.split(".")):
                out.append(f"{node.lineno}: from {module}")
                continue
            out += [f"{node.lineno}: from {module} import {a.name}" for a in node.names
                    if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            out += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith("arlgym.")
                    and any(part.startswith("_") for part in a.name.split("."))]
    return out


def test_scripts_import_no_private_arlgym_name():
    scripts = [p for d in SCRIPT_DIRS for p in sorted((REPO / d).rglob("*.py"))]
    assert len(scripts) > 10
    bad = {str(p.relative_to(REPO)): found for p in scripts
           if (found := private_imports(p.read_text(encoding="utf-8"), str(p)))}
    detail = "\n".join(f"  {path}:{line}" for path, lines in sorted(bad.items()) for line in lines)
    assert not bad, f"private arlgym names imported by scripts (use the public ones):\n{detail}"


def test_the_check_sees_private_names_and_modules_and_passes_public_ones():
    source = ("from arlgym.quickstart import _paired_on, recipe_config\n"
              "import arlgym._internal.x\nfrom arlgym._internal import y\n"
              "from arlgym.evaluation.decodings import paired_on_tasks\nfrom os import _exit\n"
              "def f():\n    from arlgym.rl.trainer import _micro_batches\n")
    assert private_imports(source) == [
        "1: from arlgym.quickstart import _paired_on", "2: import arlgym._internal.x",
        "3: from arlgym._internal", "7: from arlgym.rl.trainer import _micro_batches"]
