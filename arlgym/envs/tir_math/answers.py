"""Final answers of TIR Math: where they are in a text, and when two of them are equal.

The paper's TIR setup (a SimpleTIR port) takes the **last** ``\\boxed{...}`` of the response or of
the code's output as the answer and scores 1 when it is mathematically equal to the reference.
Equality is decided by ``math-verify`` (the ``[math]`` extra, as in ARLArena) when it is
asked for (the default; not installed is then an error, never a silent change of reward); a
small exact checker, tried first and used alone with ``use_math_verify=False``, compares
numbers (integers, decimals, fractions, ``\\frac``, ``\\sqrt`` free forms left as text) and
otherwise normalised strings. Both never raise on model output.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction

from arlgym.core.parsing import extract_boxed
from arlgym.envs.requirements import pip_install
from arlgym.errors import MissingDependency

__all__ = ["extract_boxed", "answers_match", "normalise_answer"]

_LATEX_NOISE = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ |\$|\\displaystyle|\\text\{\s*\}")
_FRAC = re.compile(r"\\[dt]?frac\s*+\{([^{}]++)\}\s*+\{([^{}]++)\}")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*+\{([^{}]*+)\}")


def normalise_answer(answer: str) -> str:
    """A canonical text form: LaTeX spacing/sizing removed, ``\\frac{a}{b}`` → ``a/b``, no
    trailing period, no thousands separators in numbers, lower case."""
    s = str(answer).strip()
    s = _TEXT.sub(r"\1", s)
    s = _LATEX_NOISE.sub("", s)
    s = _FRAC.sub(r"(\1)/(\2)", s)
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)
    s = re.sub(r"\s+", "", s).rstrip(".").lower()
    s = re.sub(r"^\((-?\d+)\)/\((\d+)\)$", r"\1/\2", s)
    return s


def _as_number(s: str) -> Fraction | None:
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            return Fraction(num.strip("()")) / Fraction(den.strip("()"))
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _exact_match(pred: str, gold: str) -> bool:
    p, g = normalise_answer(pred), normalise_answer(gold)
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is None or gn is None:
        return False
    if pn == gn:
        return True
    # a float printed by the sandbox vs an exact reference: equal to 6 significant places
    # (math-verify's float_rounding is 6 as well)
    return abs(float(pn) - float(gn)) <= 1e-6 * max(1.0, abs(float(gn)))


def _math_verify_match(pred: str, gold: str) -> bool | None:
    """math-verify's verdict, or ``None`` when it cannot parse an answer. Not installed is an
    error: a reward must not depend on what happens to be installed."""
    try:
        from math_verify import parse, verify
    except ImportError as e:
        raise MissingDependency("judging answers with math-verify needs it installed. Fix: "
                                f"{pip_install('math')} (or pass use_math_verify=False to judge "
                                "with the exact checker only)") from e
    # math-verify bounds its sympy work with SIGALRM, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"${gold}$", parsing_timeout=timeout)
        pred_parsed = parse(f"${pred}$", parsing_timeout=timeout)
        if not gold_parsed or not pred_parsed:
            return None
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - model output must never crash a rollout
        return None


def answers_match(pred: str | None, gold: str, *, use_math_verify: bool = True) -> bool:
    """Whether the predicted final answer equals the reference (``False`` for ``None``)."""
    if pred is None or not str(pred).strip():
        return False
    if _exact_match(pred, gold):
        return True
    if use_math_verify:
        verdict = _math_verify_match(pred, gold)
        if verdict is not None:
            return verdict
    return False
