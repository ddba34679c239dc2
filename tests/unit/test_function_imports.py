"""An arlgym module imports another arlgym module inside a function only when importing it at
the top would pull in an optional package that the importer does not already need.

Optional means neither the standard library nor a base dependency of pyproject.toml (gymnasium,
numpy, pillow, tqdm): torch, transformers, uvicorn, selenium, ... An import at module level
counts unless it sits under ``if TYPE_CHECKING:`` or in a ``try`` that catches ImportError (the
module then runs without the package). A module's needs include those of every arlgym module
it imports at module level, and of its parent packages (importing ``a.b.c`` runs ``a`` and
``a.b`` first). docs/architecture.md ("Layers") states the rule; a failure names each import
to move with its file and line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from test_layers import ROOT, _imported_names, _owner, module_files

PYPROJECT = ROOT.parent / "pyproject.toml"

#: Distribution names of pyproject's base dependencies whose import name differs.
IMPORT_NAME = {"pillow": "PIL"}

#: Modules that ``arlgym --help`` imports (to build its parsers and show defaults). One of them
#: may also defer an import that would load more arlgym modules at start-up, so the command
#: starts no slower; an import that loads nothing new still belongs at the top.
START_PATH: dict[str, str] = {
    "arlgym.cli": "each subcommand's modules load when that subcommand runs",
    "arlgym.arena.cli": "the grid and the report load when `arlgym arena` runs",
    "arlgym.rl.cli": "the trainer and run folders load when training starts",
    "arlgym.rl.config": "the settings' checkers load when a config is built",
    "arlgym.quickstart": "`--help` reads QuickstartConfig's defaults; the stages load when they run",
    "arlgym.policies.spec": "a model policy's module loads when that kind of policy is made",
}

#: Function-level imports kept for another reason than an optional package, one line each.
ALLOWED: dict[tuple[str, str], str] = {
    ("arlgym.serve", "arlgym.serve.server"):
        "the package's lazy attributes (PEP 562): `import arlgym.serve.client` must not load the server",
    ("arlgym.serve", "arlgym.serve.client"):
        "the package's lazy attributes (PEP 562): `import arlgym.serve.server` must not load the client",
}


def base_packages(pyproject: Path = PYPROJECT) -> frozenset[str]:
    """Import names of the base dependencies (``[project] dependencies``)."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    names = set()
    for dep in deps:
        name = dep.split(";")[0]
        for sep in "<>=!~[ ":
            name = name.split(sep)[0]
        names.add(IMPORT_NAME.get(name.lower(), name.replace("-", "_")))
    return frozenset(names)


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(t is None or (isinstance(t, ast.Name) and t.id in
                             ("ImportError", "ModuleNotFoundError", "Exception")) for t in types):
            return True
    return False


def module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (class bodies and ``if`` branches
    included; ``if TYPE_CHECKING`` and ImportError-guarded ``try`` bodies left out)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _type_checking(node.test):
                yield from module_level_imports(node.body)
            yield from module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            if not _catches_import_error(node):
                yield from module_level_imports(node.body)
            yield from module_level_imports(node.finalbody)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from module_level_imports(node.body)


def function_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports inside function bodies (at any depth)."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield node


def _third_party(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.ImportFrom):
        if not node.level and not (node.module or "").startswith(package):
            yield (node.module or "").split(".")[0]
    else:
        yield from (a.name.split(".")[0] for a in node.names if not a.name.startswith(package))


class ImportNeeds:
    """For each module of a package: the optional packages importing it pulls in."""

    def __init__(self, root: Path = ROOT, base: frozenset[str] | None = None) -> None:
        self.root, self.package = root, root.name
        self.modules = module_files(root)
        light = set(sys.stdlib_module_names) | {"__future__"} | set(base or base_packages())
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
                      for m, p in self.modules.items()}
        self.direct: dict[str, set[str]] = {}
        self.edges: dict[str, set[str]] = {}
        for module, tree in self.trees.items():
            found = set()
            needs = set()
            for node in module_level_imports(tree.body):
                needs.update(n for n in _third_party(node, self.package) if n not in light)
                found.update(self.targets(module, node))
            parts = module.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
            self.direct[module], self.edges[module] = needs, found - {module}
        self._needs: dict[str, frozenset[str]] = {}
        self._loads: dict[str, frozenset[str]] = {}

    def targets(self, module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
        """The package's modules one import statement of ``module`` names."""
        is_package = self.modules[module].name == "__init__.py"
        out = set()
        for name in _imported_names(node, module, is_package, self.modules):
            if name == self.package or name.startswith(self.package + "."):
                owner = _owner(name, self.modules)
                if owner and owner != module:
                    out.add(owner)
        return out

    def needs(self, module: str) -> frozenset[str]:
        """The optional packages ``import module`` imports (through the package's modules it
        imports at module level, transitively)."""
        if module not in self._needs:
            seen, todo, out = set(), [module], set()
            while todo:
                m = todo.pop()
                if m not in seen:
                    seen.add(m)
                    out |= self.direct.get(m, set())
                    todo += self.edges.get(m, ())
            self._needs[module] = frozenset(out)
        return self._needs[module]

    def loads(self, module: str) -> frozenset[str]:
        """The package's modules ``import module`` runs (itself included)."""
        if module not in self._loads:
            seen, todo = set(), [module]
            while todo:
                m = todo.pop()
                if m not in seen:
                    seen.add(m)
                    todo += self.edges.get(m, ())
            self._loads[module] = frozenset(seen)
        return self._loads[module]

    def needless_lazy_imports(self, allowed: dict[tuple[str, str], str] | None = None,
                              start_path: dict[str, str] | None = None
                              ) -> dict[tuple[str, str], list[str]]:
        """``(importer, imported) -> ["file:line", ...]`` for each function-level import that
        would pull in no new optional package at the importer's top (nor, in a module of
        ``start_path``, any module the importer does not load already), and is not allowed."""
        allowed = ALLOWED if allowed is None else allowed
        start_path = START_PATH if start_path is None else start_path
        out: dict[tuple[str, str], list[str]] = {}
        for module, tree in self.trees.items():
            for node in function_level_imports(tree):
                for target in sorted(self.targets(module, node)):
                    if (module, target) in allowed or self.needs(target) - self.needs(module):
                        continue
                    if module in start_path and self.loads(target) - self.loads(module):
                        continue
                    where = f"{self.modules[module].relative_to(self.root.parent)}:{node.lineno}"
                    out.setdefault((module, target), []).append(where)
        return out

    def lazy_edges(self) -> set[tuple[str, str]]:
        """Every ``(importer, imported)`` pair imported inside some function."""
        return {(m, t) for m, tree in self.trees.items()
                for node in function_level_imports(tree) for t in self.targets(m, node)}


def test_base_packages_are_read_from_pyproject():
    assert base_packages() == {"gymnasium", "numpy", "PIL", "tqdm"}


def test_function_level_imports_are_there_for_an_optional_package():
    needs = ImportNeeds()
    bad = needs.needless_lazy_imports()
    detail = "\n".join(f"  {a} -> {b}  ({', '.join(w)})" for (a, b), w in sorted(bad.items()))
    assert not bad, (f"{len(bad)} function-level import(s) of arlgym modules that need no "
                     "optional package the importer lacks; move them to the module's top (or "
                     f"allow one in ALLOWED with its reason):\n{detail}")


def test_the_kept_lazy_imports_are_the_optional_ones():
    # guards the reader: known lazy imports are found and justified by the package they avoid
    needs = ImportNeeds()
    lazy = needs.lazy_edges()
    assert ("arlgym.sft.train", "arlgym.sft.prefix_sft") in lazy
    assert "torch" in needs.needs("arlgym.sft.prefix_sft") - needs.needs("arlgym.sft.train")
    assert ("arlgym.cli", "arlgym.quickstart") in lazy
    assert "torch" in needs.needs("arlgym.quickstart") and not needs.needs("arlgym.cli")
    assert not needs.needs("arlgym")  # `import arlgym` needs only the base dependencies


def test_allowed_entries_are_still_function_level_imports():
    needs = ImportNeeds()
    lazy = needs.lazy_edges()
    stale = sorted(set(ALLOWED) - lazy) + sorted(set(START_PATH) - {a for a, _ in lazy})
    assert not stale, f"remove from ALLOWED/START_PATH (the imports are gone or moved): {stale}"


def test_start_path_is_what_the_help_imports():
    # the modules `arlgym --help` imports, read from a real run of it
    code = ("import sys\nimport arlgym.cli\ntry:\n    arlgym.cli.main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(' '.join(m for m in sys.modules if m.startswith('arlgym')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT.parent).stdout.strip().splitlines()[-1].split()
    assert set(START_PATH) <= set(out)
    assert "arlgym.rl.trainer" not in out and "arlgym.sft.train" not in out


def test_the_check_flags_a_light_lazy_import_and_keeps_a_heavy_one(tmp_path):
    pkg = tmp_path / "arlgym"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("import numpy\n")
    (pkg / "light.py").write_text("import json\nimport gymnasium\n")
    (pkg / "sub" / "heavy.py").write_text("from __future__ import annotations\n"
                                          "try:\n    import orjson\nexcept ImportError:\n"
                                          "    orjson = None\nimport torch\n")
    (pkg / "sub" / "typed.py").write_text("from typing import TYPE_CHECKING\n"
                                          "if TYPE_CHECKING:\n    import torch\n")
    (pkg / "user.py").write_text(
        "def f():\n    from arlgym.light import x\n    from arlgym.sub import heavy\n"
        "    from arlgym.sub.typed import y\n    return x, heavy, y\n")
    (pkg / "torchy.py").write_text("import torch\n\ndef g():\n    from arlgym.sub import heavy\n")
    needs = ImportNeeds(pkg, base=frozenset({"gymnasium", "numpy"}))
    assert needs.needs("arlgym.sub.heavy") == {"torch"}
    assert needs.needs("arlgym.sub.typed") == set()
    assert set(needs.needless_lazy_imports(allowed={})) == {
        ("arlgym.user", "arlgym.light"), ("arlgym.user", "arlgym.sub.typed"),
        ("arlgym.torchy", "arlgym.sub.heavy")}
    assert set(needs.needless_lazy_imports(allowed={("arlgym.user", "arlgym.light"): "why"})) == {
        ("arlgym.user", "arlgym.sub.typed"), ("arlgym.torchy", "arlgym.sub.heavy")}
    # on the start path, an import that loads a module the importer does not is kept
    (pkg / "starter.py").write_text("from arlgym import light\n\ndef h():\n"
                                    "    from arlgym import light, user\n")
    found = ImportNeeds(pkg, base=frozenset({"gymnasium", "numpy"}))
    kept = found.needless_lazy_imports(allowed={}, start_path={"arlgym.starter": "why"})
    assert ("arlgym.starter", "arlgym.light") in kept and ("arlgym.starter", "arlgym.user") not in kept
