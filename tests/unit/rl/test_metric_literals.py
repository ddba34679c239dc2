"""Metric keys are spelt once, in arlgym/rl/metrics.py: no other module of the package writes
a registered key (or a key of a registered family) as a string literal.

A producer imports the key's constant (``M.CLIP_LOW``) or builds a family key with the schema's
helper (``M.is_group_key(g, "kl")``), so a rename is one edit and a reader never drifts from the
writer. The scan covers namespaced keys (``is/ratio_mean``, ``adv/…``, ``filter/…``): bare keys
such as ``loss``, ``step`` or ``entropy`` double as config values, method names and record
fields, so a literal scan cannot tell them apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

from arlgym.rl import metrics as M

PACKAGE = Path(__file__).resolve().parents[3] / "arlgym"
SCHEMA = PACKAGE / "rl" / "metrics.py"

#: Files that still spell keys, each with the reason; an entry goes when its file is converted.
ALLOWED: dict[str, str] = {
    # the rollout layer sits below rl/ and must not import it (torch); its two counters are
    # registered in metrics.py under the same spelling, and test_metrics checks they are defined
    "rollout.py": "layer below rl/",
}


def _namespaced_keys() -> tuple[set[str], tuple[str, ...]]:
    keys = {k for k in M.METRICS if "/" in k}
    families = tuple(M.FAMILIES)
    return keys, families


def _is_metric_key(text: str, keys: set[str], families: tuple[str, ...]) -> bool:
    return text in keys or text in families or (text.startswith(families) and " " not in text)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def metric_literals(root: Path = PACKAGE) -> list[str]:
    """``file:line: 'key'`` for every metric-key string literal outside the schema (f-string
    parts included), less the :data:`ALLOWED` files."""
    keys, families = _namespaced_keys()
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if path == SCHEMA or rel in ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs and _is_metric_key(node.value, keys, families)):
                found.append(f"arlgym/{rel}:{node.lineno}: {node.value!r}")
    return found


def test_no_metric_key_literal_outside_the_schema():
    found = metric_literals()
    assert not found, ("metric keys spelt outside arlgym/rl/metrics.py; import the constant "
                       "(or add one there, with its meaning and reduction):\n  "
                       + "\n  ".join(found))


def test_allowed_files_exist_and_still_spell_keys():
    # an entry whose file is gone or clean must be removed, or it would hide a new literal
    keys, families = _namespaced_keys()
    for rel in ALLOWED:
        text = (PACKAGE / rel).read_text(encoding="utf-8")
        tree = ast.parse(text)
        assert any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and _is_metric_key(n.value, keys, families) for n in ast.walk(tree)), rel


def test_the_scan_finds_a_literal(tmp_path):
    (tmp_path / "producer.py").write_text('"""Uses is/ratio_mean in prose."""\n'
                                          'def f(x):\n    return {"is/ratio_mean": x, '
                                          'f"adv/{x}": x, "plain text": x}\n')
    found = metric_literals(tmp_path)
    assert found == ["arlgym/producer.py:3: 'is/ratio_mean'", "arlgym/producer.py:3: 'adv/'"]


def test_eval_summary_and_eval_metrics_translate_both_ways():
    overall = {"success_rate": 0.5, "success_se": 0.1, "mean_score": 0.7,
               "format_valid_ratio": 0.9, "episodes": 10}
    logged = M.eval_metrics(overall)
    assert logged == {M.EVAL_SUCCESS: 0.5, M.EVAL_SUCCESS_SE: 0.1, M.EVAL_SCORE: 0.7,
                      M.EVAL_FORMAT_VALID: 0.9}
    assert M.summary_of_eval_row({M.STEP: 3, **logged}) == {
        k: v for k, v in overall.items() if k != "episodes"}
    back = M.summary_of_eval_row({M.EVAL_SUCCESS: 0.25})
    assert back[M.SUMMARY_SUCCESS_RATE] == 0.25 and back[M.SUMMARY_MEAN_SCORE] != back[M.SUMMARY_MEAN_SCORE]
