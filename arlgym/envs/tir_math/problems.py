"""TIR Math tasks: a built-in generator (offline default) and loaders for official datasets.

**Generated problems.** Ten families of number-theory / counting / algebra questions that are
tedious by hand and easy with a few lines of Python (divisor sums, modular powers, inclusion–
exclusion counts, digit sums of factorials, …) — the regime where tool use pays off. Problem
``tir-<seed>`` is drawn from ``numpy.random.default_rng(seed)``: the family, its parameters, the
exact reference answer (computed here, in integers or fractions) and a reference solution script
(used by the expert policy).

**Splits are disjoint by content, not only by seed.** The families' parameter spaces are small
enough (68 factorial questions, ~500 committee questions) that disjoint seed ranges alone put most
test questions in train too (159 of the first 500 test problems recur among the first 100,000
train seeds). So every problem has a content key (:func:`problem_content_key`: family + its
numbers, order ignored) and the key's hash picks its one split (:func:`content_split`: 10 % test,
10 % val, 80 % train); seed ``s`` of a split's seed range draws until it gets a problem of that
split. A task id ``tir-<seed>`` keeps naming the same split, and no seed of any split can produce
a question another split holds. A held-out panel (``list_tasks``) takes each question once
(:func:`panel_seeds`).

**Official data.** ``load_problems(path)`` reads ``.jsonl``, ``.json`` (a list) or ``.parquet``
records — SimpleRL's math level 3–5 (ARLArena's training set), AIME24/25, MATH, DAPO-Math — taking
the question from ``problem``/``question``/``prompt`` (a chat list counts: its last user message)
and the answer from ``answer``/``gt_answer``/``ground_truth``/``final_answer``/
``reward_model.ground_truth``, or the last ``\\boxed{}`` of ``solution``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from arlgym.envs.tir_math.answers import extract_boxed
from arlgym.errors import ConfigError

__all__ = ["MathProblem", "FAMILIES", "generate_problem", "load_problems", "SPLIT_SEED_RANGES",
           "CONTENT_SPLIT_FRACTIONS", "problem_content_key", "content_split", "split_of_seed",
           "without_held_out", "panel_seeds"]

#: Problem-seed ranges per split. A seed names its split; what keeps the splits' *questions*
#: apart is :func:`content_split`, which :func:`generate_problem` enforces.
SPLIT_SEED_RANGES: dict[str, tuple[int, int]] = {
    "train": (0, 2**30),
    "test": (2**30, 2**31),
    "val": (2**31, 2**31 + 2**30),
}
#: Share of the content-key space each split owns (held-out splits small, as usual).
CONTENT_SPLIT_FRACTIONS: dict[str, float] = {"test": 0.1, "val": 0.1, "train": 0.8}
#: Draws one seed may make before its split is declared empty for the chosen families.
_MAX_DRAWS = 2000
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class MathProblem:
    """One question with its reference answer (and, for generated ones, a solution script)."""

    problem_id: str
    question: str
    answer: str
    family: str = "dataset"
    solution_code: str | None = None


def _fraction_text(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"
    for p in range(2, int(n**0.5) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, n, p)))
    return [i for i in range(n) if sieve[i]]


# Each family: rng -> (question, exact answer text, solution script). Scripts end in
# final_answer(...) so that the expert finishes in one code cell.
def _divisor_sum(rng: np.random.Generator) -> tuple[str, str, str]:
    n = int(rng.integers(200, 20000))
    ans = sum(d for d in range(1, n + 1) if n % d == 0)
    code = f"n = {n}\nfinal_answer(sum(d for d in range(1, n + 1) if n % d == 0))"
    return f"What is the sum of all positive divisors of {n}?", str(ans), code


def _mod_power(rng: np.random.Generator) -> tuple[str, str, str]:
    a, b, m = int(rng.integers(2, 100)), int(rng.integers(50, 5000)), int(rng.integers(7, 1000))
    return (f"What is the remainder when {a}^{{{b}}} is divided by {m}?", str(pow(a, b, m)),
            f"final_answer(pow({a}, {b}, {m}))")


def _inclusion_exclusion(rng: np.random.Generator) -> tuple[str, str, str]:
    n = int(rng.integers(500, 10000))
    a, b, c = (int(x) for x in rng.choice(np.arange(2, 20), size=3, replace=False))
    ans = sum(1 for k in range(1, n + 1) if (k % a == 0 or k % b == 0) and k % c != 0)
    code = (f"count = sum(1 for k in range(1, {n} + 1) if (k % {a} == 0 or k % {b} == 0) "
            f"and k % {c} != 0)\nfinal_answer(count)")
    return (f"How many integers from 1 to {n} inclusive are divisible by {a} or by {b}, "
            f"but not by {c}?", str(ans), code)


def _factorial_digit_sum(rng: np.random.Generator) -> tuple[str, str, str]:
    n = int(rng.integers(12, 80))
    ans = sum(int(ch) for ch in str(math.factorial(n)))
    code = f"import math\nfinal_answer(sum(int(ch) for ch in str(math.factorial({n}))))"
    return f"What is the sum of the digits of {n}!?", str(ans), code


def _linear_system(rng: np.random.Generator) -> tuple[str, str, str]:
    while True:
        a, b, c, d = (int(x) for x in rng.integers(-9, 10, size=4))
        if a * d - b * c != 0:
            break
    e, f = int(rng.integers(-50, 51)), int(rng.integers(-50, 51))
    det = Fraction(a * d - b * c)
    x, y = (e * d - b * f) / det, (a * f - e * c) / det
    code = ("from sympy import symbols, Eq, solve\nx, y = symbols('x y')\n"
            f"s = solve([Eq({a}*x + {b}*y, {e}), Eq({c}*x + {d}*y, {f})], [x, y])\n"
            "final_answer(s[x] + s[y])")
    return (f"Real numbers x and y satisfy {a}x + {b}y = {e} and {c}x + {d}y = {f}. "
            "What is x + y? Give an exact answer.", _fraction_text(x + y), code)


def _binomial(rng: np.random.Generator) -> tuple[str, str, str]:
    n = int(rng.integers(20, 60))
    k = int(rng.integers(3, n // 2))
    return (f"In how many ways can a committee of {k} people be chosen from {n} people?",
            str(math.comb(n, k)), f"import math\nfinal_answer(math.comb({n}, {k}))")


def _fibonacci_mod(rng: np.random.Generator) -> tuple[str, str, str]:
    n, m = int(rng.integers(50, 3000)), int(rng.integers(10, 1000))
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    code = (f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nfinal_answer(a % {m})")
    return (f"The Fibonacci numbers are F_0 = 0, F_1 = 1 and F_(k+2) = F_(k+1) + F_k. "
            f"What is the remainder when F_{{{n}}} is divided by {m}?", str(a % m), code)


def _prime_sum(rng: np.random.Generator) -> tuple[str, str, str]:
    n = int(rng.integers(100, 20000))
    code = (f"n = {n}\nprimes = [p for p in range(2, n) if all(p % q for q in range(2, int(p**0.5) + 1))]"
            "\nfinal_answer(sum(primes))")
    return f"What is the sum of all prime numbers less than {n}?", str(sum(_primes_below(n))), code


def _root_power_sum(rng: np.random.Generator) -> tuple[str, str, str]:
    p, q = int(rng.integers(-20, 21)), int(rng.integers(-50, 51))
    k = int(rng.integers(2, 6))
    # Newton's identities: s_k = p*s_(k-1) - q*s_(k-2) with s_0 = 2, s_1 = p
    s = [2, p]
    for _ in range(2, k + 1):
        s.append(p * s[-1] - q * s[-2])
    # roots() keeps multiplicities (solve() would list a double root once)
    code = ("from sympy import symbols, roots, expand, simplify\nx = symbols('x')\n"
            f"r = roots(x**2 - ({p})*x + ({q}), x)\n"
            f"final_answer(simplify(expand(sum(m * root**{k} for root, m in r.items()))))")
    return (f"Let r and s be the roots of x^2 - ({p})x + ({q}) = 0. What is r^{k} + s^{k}?",
            str(s[k]), code)


def _gcd_lcm(rng: np.random.Generator) -> tuple[str, str, str]:
    g = int(rng.integers(2, 60))
    a, b = g * int(rng.integers(2, 300)), g * int(rng.integers(2, 300))
    ans = math.gcd(a, b) + math.lcm(a, b)
    return (f"What is gcd({a}, {b}) + lcm({a}, {b})?", str(ans),
            f"import math\nfinal_answer(math.gcd({a}, {b}) + math.lcm({a}, {b}))")


FAMILIES: dict[str, Callable[[np.random.Generator], tuple[str, str, str]]] = {
    "divisor_sum": _divisor_sum,
    "mod_power": _mod_power,
    "inclusion_exclusion": _inclusion_exclusion,
    "factorial_digit_sum": _factorial_digit_sum,
    "linear_system": _linear_system,
    "binomial": _binomial,
    "fibonacci_mod": _fibonacci_mod,
    "prime_sum": _prime_sum,
    "root_power_sum": _root_power_sum,
    "gcd_lcm": _gcd_lcm,
}


def _number_text(match: re.Match[str]) -> str:
    """``1,000`` -> ``1000``, ``2.50`` -> ``2.5``, ``3.0`` -> ``3``: one spelling per number."""
    text = match.group(0).replace(",", "")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def problem_content_key(question: str, family: str = "dataset") -> str:
    """What makes two problems the same problem, for keeping splits apart.

    Generated families: the family and the multiset of numbers in the question, so a question
    whose parameters are a permutation of another's (``divisible by 3 or by 5`` vs ``by 5 or by
    3``, two equations swapped) shares its key; deliberately coarse, since a coarser key can only
    make the splits more disjoint. Dataset problems: the text lower-cased, whitespace collapsed
    and numbers spelled one way (``1,000`` = ``1000``, ``2.50`` = ``2.5``).
    """
    if family in FAMILIES:
        numbers = sorted(int(_number_text(m)) for m in _NUMBER.finditer(question))
        return f"{family}:{','.join(map(str, numbers))}"
    return " ".join(_NUMBER.sub(_number_text, question.lower()).split())


def content_split(key: str) -> str:
    """The one split that owns content ``key``: a hash of the key against
    :data:`CONTENT_SPLIT_FRACTIONS`, the same on every machine."""
    u = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
    edge = 0.0
    for split, fraction in CONTENT_SPLIT_FRACTIONS.items():
        edge += fraction
        if u < edge:
            return split
    return "train"


def split_of_seed(seed: int) -> str | None:
    """The split whose seed range holds ``seed`` (``None`` outside every range)."""
    return next((s for s, (lo, hi) in SPLIT_SEED_RANGES.items() if lo <= seed < hi), None)


def generate_problem(seed: int, families: tuple[str, ...] | None = None) -> MathProblem:
    """Problem ``tir-<seed>``: the same question and answer for a seed, on every machine.

    Draws from ``default_rng(seed)`` until the problem's content belongs to the seed's split
    (:func:`content_split`); a seed outside every split range takes its first draw.

    Raises:
        ConfigError: ``families`` has no problem owned by the seed's split.
    """
    names = tuple(FAMILIES) if families is None else families
    rng = np.random.default_rng(seed)
    split = split_of_seed(int(seed))
    for _ in range(_MAX_DRAWS):
        family = names[int(rng.integers(len(names)))]
        question, answer, code = FAMILIES[family](rng)
        if split is None or content_split(problem_content_key(question, family)) == split:
            return MathProblem(f"tir-{seed}", question, answer, family, code)
    raise ConfigError(f"families={list(names)} drew no {split} problem in {_MAX_DRAWS} tries for "
                      f"seed {seed}; add families (see FAMILIES) so the {split} split is not empty")


#: (split, families) -> [seeds of the panel so far, [next seed to look at, repeats in a row],
#: content keys seen]
_PANELS: dict[tuple[str, tuple[str, ...] | None], tuple[list[int], list[int], set[str]]] = {}
#: Seeds in a row that only repeat questions before a panel counts its split as exhausted.
_PANEL_MAX_REPEATS = 500


def panel_seeds(split: str, limit: int, families: tuple[str, ...] | None = None) -> list[int]:
    """The first ``limit`` seeds of ``split``'s range whose problems are pairwise different
    (by :func:`problem_content_key`): a panel weighs each question once, although small
    families repeat their few questions (a split owns ~7 of the 68 factorial questions).
    Fewer than ``limit`` when the families run out of new questions (``_PANEL_MAX_REPEATS``
    seeds in a row without one). Grown on demand and kept for the process."""
    seeds, state, seen = _PANELS.setdefault((split, families),
                                            ([], [SPLIT_SEED_RANGES[split][0], 0], set()))
    high = SPLIT_SEED_RANGES[split][1]
    while len(seeds) < limit and state[0] < high and state[1] < _PANEL_MAX_REPEATS:
        problem = generate_problem(state[0], families)
        key = problem_content_key(problem.question, problem.family)
        if key in seen:
            state[1] += 1
        else:
            seen.add(key)
            seeds.append(state[0])
            state[1] = 0
        state[0] += 1
    return seeds[:limit]


def without_held_out(train: list[MathProblem], held_out: list[MathProblem]) -> list[MathProblem]:
    """``train`` less every problem whose content key (:func:`problem_content_key`) a held-out
    problem has: a dataset's own train file may repeat its test questions."""
    seen = {problem_content_key(p.question, p.family) for p in held_out}
    return [p for p in train if problem_content_key(p.question, p.family) not in seen]


# ---------------------------------------------------------------------------- official data
_QUESTION_KEYS = ("problem", "question", "prompt", "query", "input")
_ANSWER_KEYS = ("answer", "gt_answer", "ground_truth", "final_answer", "target", "expected_answer")
_ID_KEYS = ("id", "unique_id", "problem_id", "idx", "index")


def _question_of(record: dict[str, Any]) -> str | None:
    for key in _QUESTION_KEYS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and not isinstance(value, str)):
            messages = value.tolist() if hasattr(value, "tolist") else value
            users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            if users and isinstance(users[-1], str):
                return users[-1].strip()
    return None


def _answer_of(record: dict[str, Any]) -> str | None:
    for key in _ANSWER_KEYS:
        value = record.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    reward_model = record.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
        return str(reward_model["ground_truth"]).strip()
    solution = record.get("solution")
    if isinstance(solution, str):
        return extract_boxed(solution)
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"math data file {str(path)!r} is not UTF-8 text (byte {e.start}: "
                          f"{e.reason}); re-encode it as UTF-8") from e
    except OSError as e:
        raise ConfigError(f"math data file {str(path)!r} cannot be read: {e.strerror or e}") from e


def _read_records(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = []
        for n, line in enumerate(_read_text(path).splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}:{n}: not a JSON line ({e.msg})") from e
        return records
    if suffix == ".json":
        try:
            data = json.loads(_read_text(path))
        except json.JSONDecodeError as e:
            raise ConfigError(f"math data file {str(path)!r} is not valid JSON (line {e.lineno}, "
                              f"column {e.colno}: {e.msg})") from e
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), None)
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a JSON list of problems")
        return data
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ConfigError("reading .parquet needs pyarrow: pip install pyarrow "
                              "(or convert the file to .jsonl)") from e
        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow's ArrowInvalid, OSError, ... for a corrupt file
            raise ConfigError(f"math data file {str(path)!r} is not a readable parquet file "
                              f"({type(e).__name__}: {str(e)[:200]})") from e
    raise ConfigError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")


def load_problems(path: str | Path) -> list[MathProblem]:
    """Every usable problem of a dataset file (records without a question or answer are
    skipped; a file with none at all is an error)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"math data file {str(path)!r} does not exist")
    problems = []
    skipped = 0
    for index, record in enumerate(_read_records(path)):
        if not isinstance(record, dict):
            skipped += 1
            continue
        question, answer = _question_of(record), _answer_of(record)
        if question is None or answer is None:
            skipped += 1
            continue
        ident = next((record[k] for k in _ID_KEYS if record.get(k) is not None), index)
        problems.append(MathProblem(f"{path.stem}-{ident}", question, answer))
    if not problems:
        raise ConfigError(f"{path}: no record has both a question ({'/'.join(_QUESTION_KEYS)}) "
                          f"and an answer ({'/'.join(_ANSWER_KEYS)}, reward_model.ground_truth "
                          f"or a \\boxed{{}} solution); {skipped} record(s) skipped")
    return problems
