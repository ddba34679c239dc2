"""Parser throughput: responses per second for typical, malformed and 100 kB inputs.

    python bench/bench_parser.py
"""

from __future__ import annotations

import time

from arlgym import parse_response

CASES = {
    "well-formed (strict)": "<think>The box is left of the target, push right.</think><action>right</action>",
    "text outside tags": "Sure! <think>plan</think><action>up</action> Hope that helps.",
    "no tags": "I think I should go up and then left.",
    "100 kB noise": "<think x" * 12_500,
}

if __name__ == "__main__":
    for name, text in CASES.items():
        n = 20 if len(text) > 10_000 else 100_000
        t = time.perf_counter()
        for _ in range(n):
            parse_response(text)
        dt = time.perf_counter() - t
        print(f"{name:24s} {n / dt:12,.0f} responses/s  ({1e6 * dt / n:9.1f} µs each)")
