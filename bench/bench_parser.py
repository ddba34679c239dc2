"""Parser throughput, and linear time on adversarial input.

    python bench/bench_parser.py            # throughput + adversarial families 1k..1M chars
    python bench/bench_parser.py --quick    # adversarial families up to 100k chars

Part 1: responses per second for typical, malformed and 100 kB inputs.

Part 2: every parser of ``arlgym.core.parsing`` (``parse_response`` strict and lenient,
``parse_tir_response``, ``extract_boxed``) on families a collapsing policy can emit — a ``<`` or
a code fence followed by a long whitespace run, thousands of nested or unclosed tags, fences
without a closing one, nested ``\\boxed{`` — from 1k to 1M characters. A linear parser's time
grows ~10x per 10x of input; the table prints the growth ratio per decade of CPU time (before the fix,
``"<" + 32k spaces`` took 15 s, quadratic: ratio 100).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from arlgym import parse_response
from arlgym.core.parsing import extract_boxed, parse_tir_response

CASES = {
    "well-formed (strict)": "<think>The box is left of the target, push right.</think><action>right</action>",
    "text outside tags": "Sure! <think>plan</think><action>up</action> Hope that helps.",
    "no tags": "I think I should go up and then left.",
    "100 kB noise": "<think x" * 12_500,
}


def _fill(unit: str, n: int, head: str = "", tail: str = "") -> str:
    body = n - len(head) - len(tail)
    return head + (unit * (body // len(unit) + 1))[:max(0, body)] + tail


#: name -> n -> text of about n characters.
FAMILIES: dict[str, Callable[[int], str]] = {
    "'<' + spaces": lambda n: _fill(" ", n, "<", "x"),
    "'< /' + spaces": lambda n: _fill(" ", n, "< /", "x"),
    "'<think' + spaces": lambda n: _fill(" ", n, "<think", "x"),
    "many '<   '": lambda n: _fill("<     ", n),
    "nested <think>": lambda n: _fill("<think>", n),
    "unclosed <action>": lambda n: _fill("<action>a", n, "<think>t</think>"),
    "alternating tags": lambda n: _fill("<think></action>", n),
    "fence + spaces": lambda n: _fill(" ", n, "```", "x"),
    "fence + tabs": lambda n: _fill("\t", n, "```python", "x"),
    "unclosed fences": lambda n: _fill("```\n", n, "", ""),
    "fence, no close": lambda n: _fill("x = 1\n", n, "```python\n"),
    "nested \\boxed{": lambda n: _fill("\\boxed{", n),
    "\\boxed + spaces": lambda n: _fill(" ", n, "\\boxed", "x"),
}

PARSERS: dict[str, Callable[[str], object]] = {
    "strict": parse_response,
    "lenient": lambda t: parse_response(t, strict=False),
    "tir": parse_tir_response,
    "boxed": extract_boxed,
}


def seconds(parser: Callable[[str], object], text: str, budget: float = 0.05) -> float:
    """Best-of CPU time of one call (repeats small inputs so that the clock resolves them).
    CPU time of this thread, not wall time: on a loaded machine a long call is preempted more
    often than a short one, which would make a linear parser look superlinear."""
    best = float("inf")
    spent = 0.0
    while spent < budget or best == float("inf"):
        t = time.thread_time()
        parser(text)
        dt = time.thread_time() - t
        best = min(best, dt)
        spent += dt
        if dt > budget:
            break
    return best


def adversarial(sizes: tuple[int, ...]) -> float:
    """Print the table; return the worst growth ratio per 10x of input."""
    worst = 0.0
    print(f"\n{'family':20s} {'parser':8s} " + " ".join(f"{n:>10,}" for n in sizes) + "   max ratio/10x")
    for fname, make in FAMILIES.items():
        texts = [make(n) for n in sizes]
        for pname, parser in PARSERS.items():
            times = [seconds(parser, t) for t in texts]
            ratios = [b / max(a, 1e-6) for a, b in zip(times, times[1:], strict=False)]
            worst = max(worst, *ratios)
            cells = " ".join(f"{1e3 * t:8.2f}ms" for t in times)
            print(f"{fname:20s} {pname:8s} {cells}   {max(ratios):6.1f}")
    return worst


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for name, text in CASES.items():
        n = 20 if len(text) > 10_000 else (10_000 if quick else 100_000)
        t = time.perf_counter()
        for _ in range(n):
            parse_response(text)
        dt = time.perf_counter() - t
        print(f"{name:24s} {n / dt:12,.0f} responses/s  ({1e6 * dt / n:9.1f} µs each)")
    sizes = (1_000, 10_000, 100_000) if quick else (1_000, 10_000, 100_000, 1_000_000)
    worst = adversarial(sizes)
    print(f"\nworst growth per 10x of input: {worst:.1f} (linear: ~10, quadratic: ~100)")
