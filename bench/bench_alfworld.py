"""Step latency of arl/ALFWorld-v0's engine vs the unmodified TextWorld PddlEnv, same games.

Both engines play the same generated games with the same random admissible commands; the
script also checks that every feedback text and admissible list is identical (the full
differential test is ``tests/unit/envs/test_alfworld_engine.py``). It prints mean/median step
latency of each, the ratio (goal: ours <= 0.2x raw), and the latency of a full
``ALFWorldEnv.step`` (parser + prompt + anchor included).

    python bench/bench_alfworld.py --games 6 --steps 40
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=6, help="games to play (default 6)")
    parser.add_argument("--steps", type=int, default=40, help="random steps per game (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import gymnasium as gym

    import arlgym  # noqa: F401
    from arlgym.envs.alfworld.engine import AlfredGame, ReferenceGame
    from arlgym.envs.alfworld.generator import generate_game

    rng = random.Random(args.seed)
    fast, ref = AlfredGame(), ReferenceGame()
    t_fast: list[float] = []
    t_ref: list[float] = []
    t_reset_fast: list[float] = []
    t_reset_ref: list[float] = []
    n_adm: list[int] = []
    for g in range(args.games):
        game = generate_game("train", 2000 + g).game_json()
        fast.load(game)
        ref.load(game)
        fast.reset()
        ref.reset()
        for _ in range(args.steps):
            assert fast.admissible_commands == ref.admissible_commands
            n_adm.append(len(fast.admissible_commands))
            command = rng.choice(fast.admissible_commands)
            t0 = time.perf_counter()
            a = fast.step(command)
            t1 = time.perf_counter()
            b = ref.step(command)
            t2 = time.perf_counter()
            assert a == b, (command, a, b)
            t_fast.append(t1 - t0)
            t_ref.append(t2 - t1)
        t0 = time.perf_counter()
        fast.reset()
        t1 = time.perf_counter()
        ref.reset()
        t2 = time.perf_counter()
        t_reset_fast.append(t1 - t0)
        t_reset_ref.append(t2 - t1)

    env = gym.make("arl/ALFWorld-v0", data_source="generated")
    _, info = env.reset(seed=args.seed)
    t_env: list[float] = []
    for _ in range(args.steps * 2):
        action = rng.choice(info["admissible_actions"])
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(f"<think>bench</think><action>{action}</action>")
        t_env.append(time.perf_counter() - t0)
        if term or trunc:
            _, info = env.reset(seed=rng.randrange(10**6))
    env.close()

    def ms(xs: list[float]) -> str:
        return f"mean {1e3 * statistics.mean(xs):7.2f} ms  median {1e3 * statistics.median(xs):7.2f} ms"

    print(f"games={args.games} steps={len(t_fast)} admissible/step={statistics.mean(n_adm):.1f}")
    print(f"raw TextWorld PddlEnv+Demangler step : {ms(t_ref)}")
    print(f"arlgym AlfredGame step              : {ms(t_fast)}")
    print(f"ratio (ours/raw, mean)              : {statistics.mean(t_fast) / statistics.mean(t_ref):.3f}"
          "  (goal <= 0.2)")
    print(f"reset (same game again) raw / ours  : {1e3 * statistics.mean(t_reset_ref):.1f} ms / "
          f"{1e3 * statistics.mean(t_reset_fast):.1f} ms")
    print(f"full ALFWorldEnv.step (parse+prompt+anchor): {ms(t_env)}")
    print("text identical on every step: yes")


if __name__ == "__main__":
    main()
