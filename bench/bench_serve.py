"""The env server's costs, measured in one run (docs/serving.md quotes the figures).

1. Step round trip over WebSocket (:class:`arlgym.serve.RemoteEnv`, one client, one step at a
   time) vs the in-process step, per env: the p50 the network path adds.
2. Memory per open session: the server's RSS before and after ``--sessions`` Sokoban sessions
   are opened and reset.
3. Saturation throughput: ``--clients`` closed-loop WebSocket sessions stepping Sokoban as fast
   as the server answers (steps/s), then the latency (p50/p99) at half that load, paced. The
   rate is also given as a ratio to one core stepping the same envs and resets in process,
   measured in the same run: hosts of one type differ in speed by more than the load explains.
5. CPU per Sokoban step (``--parts cpu``): the server process's CPU time (user + system, from
   ``/proc``) and the load generator's (``time.process_time``) per step under closed-loop
   load, on two servers started side by side, one stepping Sokoban on its event loop (the
   default) and one with ``--no-inline-steps`` (every step on a pool thread, the earlier path),
   in alternating rounds; and the CPU of the same steps and resets in process. CPU time per
   step is robust to other jobs on the machine where a wall-clock rate is not, so the
   figure of two quiet cores is computed from it: the smaller of 1 core / server CPU per step
   (the server's Python holds one core at a time) and 2 cores / (server + client CPU per step).
6. MCP (``--parts mcp``): the same Sokoban steps over ``/ws`` (OpenEnv's step message), as the ``act`` tool over ``WebSocket /mcp`` and over
   ``POST /mcp`` (one keep-alive HTTP connection), interleaved; the p50 each path takes and
   what MCP adds over the ``/ws`` step. Then a burst: ``--burst`` new sessions at once, each
   connecting to ``/ws``, resetting and stepping once (p50/p99 from connect to the step's
   answer; best of 3 bursts, each on a fresh server).
7. Burst over processes (``--parts burst``): ``--burst`` new Sokoban sessions at once against
   ``arlgym serve --processes p`` for each of ``--burst-processes`` (default 1 and 2), in
   alternating rounds on fresh servers; p50/p99 per round, and the CPU milliseconds the server
   processes (all of them) and the load generator spent per session.
4. ALFWorld rollouts of the expert policy through the rollout collector: a remote vector env on
   two servers (``--vec-workers`` env processes each) vs local worker processes (twice
   ``--vec-workers``, so both sides step the same number of env processes); both collectors
   are built and warmed up first, then their batches alternate, so both see the same machine
   load; the figure is their throughput ratio (and the trajectories are checked equal).

The server runs in its own process (``arlgym serve``); the load generator is one asyncio
process. Both share the machine, so on a small machine the client's own CPU is part of the
figure: the throughput is a lower bound of the server's.

    python bench/bench_serve.py                      # all parts
    python bench/bench_serve.py --sessions 200 --seconds 3   # quicker
    python bench/bench_serve.py --parts vector       # only part 4
    python bench/bench_serve.py --parts cpu          # only part 5
    python bench/bench_serve.py --parts mcp          # only part 6
    python bench/bench_serve.py --parts burst --burst 200   # only part 7
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym

import arlgym  # noqa: F401
from arlgym.serve.client import RemoteEnv
from arlgym.serve.codec import dumps, loads

ROOT = Path(__file__).resolve().parents[1]
MOVES = ["up", "down", "left", "right"]


def response(rng: random.Random) -> str:
    return f"<think>t</think><action>{rng.choice(MOVES)}</action>"


def start_server(envs: list[str], max_sessions: int, workers: int = 1,
                 extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """``arlgym serve`` on a free port; ``extra`` flags, e.g. ``("--processes", "2")``."""
    cmd = [sys.executable, "-m", "arlgym.cli", "serve", "--port", "0", "--workers", str(workers),
           "--max-sessions", str(max_sessions), *extra]
    for env_id in envs:
        cmd += ["--env", env_id]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"on (http://[\d.]+:\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the server did not start: {line}{proc.stdout.read()}")
    pids = re.search(r"pids ([\d ]+)", line)  # --processes > 1: every server process
    proc.server_pids = [int(p) for p in pids.group(1).split()] if pids else [proc.pid]  # type: ignore[attr-defined]
    return proc, match.group(1)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of the processes ``pids`` and their live children (env worker processes)."""
    every = set(pids)  # a sibling server process is also the first one's child: count it once
    for pid in pids:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as fh:
                every.update(int(c) for c in fh.read().split())
        except OSError:
            pass
    return sum(cpu_seconds(pid) for pid in every)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def round_trip(url: str, env_id: str, steps: int, seed: int = 0) -> dict[str, float]:
    """p50/p99 of the in-process step and of the same steps over WebSocket (interleaved, so
    both see the same machine load)."""
    local, remote = gym.make(env_id), RemoteEnv(url, env_id, {})
    rng = random.Random(seed)
    t_local, t_remote, episode = [], [], seed
    local.reset(seed=episode)
    remote.reset(seed=episode)
    for _ in range(steps):
        text = response(rng) if env_id != "arl/ALFWorld-v0" else \
            "<think>t</think><action>look</action>"
        t0 = time.perf_counter()
        *_, term, trunc, _ = local.step(text)
        t1 = time.perf_counter()
        remote.step(text)
        t2 = time.perf_counter()
        t_local.append(t1 - t0)
        t_remote.append(t2 - t1)
        if term or trunc:
            episode += 1
            local.reset(seed=episode)
            remote.reset(seed=episode)
    remote.close()
    ms = 1e3
    return {"local_p50_ms": statistics.median(t_local) * ms,
            "remote_p50_ms": statistics.median(t_remote) * ms,
            "added_p50_ms": (statistics.median(t_remote) - statistics.median(t_local)) * ms,
            "remote_p99_ms": pct(t_remote, 0.99) * ms, "steps": steps}


def mcp_round_trip(url: str, steps: int, seed: int = 0) -> dict[str, float]:
    """p50 of one Sokoban step over ``/ws``, ``WebSocket /mcp`` and ``POST /mcp`` (the same
    responses, interleaved, so all three see the same machine load; one raw client for all,
    so the figures are the server's and the wire's, not a client library's)."""
    import http.client
    from contextlib import ExitStack

    from websockets.sync.client import connect

    stack = ExitStack()
    ws = stack.enter_context(connect(url.replace("http://", "ws://") + "/ws", compression=None))
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    ids = iter(range(1, 1 << 30))

    def post(method: str, params: dict) -> dict:
        body = dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": next(ids)})
        conn.request("POST", "/mcp", body=body.encode(),
                     headers={"Content-Type": "application/json"})
        return loads(conn.getresponse().read())

    sid = post("openenv/session/create", {})["result"]["session_id"]
    mcp_ws = stack.enter_context(connect(url.replace("http://", "ws://") + "/mcp",
                                         compression=None))

    def over_ws_mcp(name: str, arguments: dict) -> dict:
        mcp_ws.send(dumps({"jsonrpc": "2.0", "method": "tools/call", "id": next(ids),
                           "params": {"name": name, "arguments": arguments}}))
        return loads(mcp_ws.recv(timeout=30))

    def over_ws(kind: str, data: dict) -> dict:
        ws.send(dumps({"type": kind, "data": data}))
        return loads(ws.recv(timeout=30))["data"]

    def start(episode: int) -> None:
        over_ws("reset", {"seed": episode})
        over_ws_mcp("start_episode", {"seed": episode})
        post("tools/call", {"name": "start_episode", "arguments": {"seed": episode},
                            "session_id": sid})

    rng, episode = random.Random(seed), seed
    times: dict[str, list[float]] = {"ws": [], "ws_mcp": [], "http_mcp": []}
    start(episode)
    for _ in range(steps):
        text = response(rng)
        t0 = time.perf_counter()
        step = over_ws("step", {"response": text})
        t1 = time.perf_counter()
        a = over_ws_mcp("act", {"response": text})["result"]["data"]
        t2 = time.perf_counter()
        b = post("tools/call", {"name": "act", "arguments": {"response": text},
                                "session_id": sid})["result"]["data"]
        t3 = time.perf_counter()
        assert a["done"] == b["done"] == step["done"] and a["reward"] == b["reward"]
        for key, dt in (("ws", t1 - t0), ("ws_mcp", t2 - t1), ("http_mcp", t3 - t2)):
            times[key].append(dt)
        if step["done"]:
            episode += 1
            start(episode)
    stack.close()
    conn.close()
    p50 = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"ws_p50_ms": p50["ws"], "ws_mcp_p50_ms": p50["ws_mcp"],
            "http_mcp_p50_ms": p50["http_mcp"],
            "ws_mcp_added_p50_ms": p50["ws_mcp"] - p50["ws"],
            "http_mcp_added_p50_ms": p50["http_mcp"] - p50["ws"], "steps": steps}


async def _open(url: str, n: int) -> list:
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    socks = []
    for i in range(n):
        ws = await connect(ws_url, max_size=None)
        await ws.send(dumps({"type": "reset", "data": {"seed": i}}))
        loads(await ws.recv())
        socks.append(ws)
    return socks


async def burst(url: str, sessions: int) -> dict[str, float]:
    """``sessions`` new sessions at once, each: connect to ``/ws``, reset (its own seed), one
    step; the latency of each from its start to its step's answer."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"

    async def one(i: int) -> float:
        t0 = time.perf_counter()
        async with connect(ws_url, max_size=None, compression=None) as ws:
            await ws.send(dumps({"type": "reset", "data": {"seed": i}}))
            loads(await ws.recv())
            await ws.send(dumps({"type": "step", "data": {"response": response(
                random.Random(i))}}))
            loads(await ws.recv())
            return time.perf_counter() - t0

    lat = await asyncio.gather(*(one(i) for i in range(sessions)))
    return {"sessions": sessions, "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "max_ms": max(lat) * 1e3}


def burst_processes(sessions: int, rounds: int, processes: list[int]) -> dict[str, object]:
    """Part 7: a burst of ``sessions`` new Sokoban sessions (connect + reset + step at once)
    against ``arlgym serve --processes p`` for each ``p``, in alternating rounds on fresh
    servers (so every setting sees the same machine load); the p50/p99 of each round, and the
    CPU seconds the server processes and this client spent per session (from ``/proc`` and
    ``time.process_time``: robust to other jobs where the latency is not)."""
    runs: dict[int, list[dict[str, float]]] = {p: [] for p in processes}
    for _ in range(rounds):
        for p in processes:
            proc, url = start_server(["arl/Sokoban-v0"], sessions + 8,
                                     extra=("--processes", str(p)))
            try:
                pids = proc.server_pids  # type: ignore[attr-defined]
                s0, c0 = cpu_of(pids), time.process_time()
                r = asyncio.run(burst(url, sessions))
                r["server_cpu_ms_per_session"] = (cpu_of(pids) - s0) * 1e3 / sessions
                r["client_cpu_ms_per_session"] = (time.process_time() - c0) * 1e3 / sessions
                r["server_pids"] = len(pids)
                runs[p].append(r)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    out: dict[str, object] = {"sessions": sessions, "rounds": rounds}
    for p, rs in runs.items():
        out[f"processes_{p}"] = {
            **{k: statistics.median(r[k] for r in rs) for k in (
                "p50_ms", "p99_ms", "server_cpu_ms_per_session", "client_cpu_ms_per_session")},
            "best_p99_ms": min(r["p99_ms"] for r in rs), "runs": rs}
    return out


async def _client(ws, rng: random.Random, stop: float, lat: list[float],
                  period: float | None) -> int:
    n, t_next = 0, time.perf_counter()
    while time.perf_counter() < stop:
        if period is not None:  # paced: one request every `period` seconds
            t_next += period
            delay = t_next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        t0 = time.perf_counter()
        await ws.send(dumps({"type": "step", "data": {"response": response(rng)}}))
        reply = loads(await ws.recv())
        lat.append(time.perf_counter() - t0)
        n += 1
        if reply["type"] == "error" or reply["data"]["done"]:
            await ws.send(dumps({"type": "reset", "data": {"seed": rng.randrange(10**6)}}))
            await ws.recv()
    return n


async def load(url: str, clients: int, seconds: float, rate: float | None,
               pid: int | None = None) -> dict[str, float]:
    """Closed-loop (``rate`` None) or paced load; with the server's ``pid``, also the server's
    and this client's CPU microseconds per step (episode resets included)."""
    socks = await _open(url, clients)
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    period = None if rate is None else clients / rate
    t0, c0 = time.perf_counter(), time.process_time()
    s0 = cpu_seconds(pid) if pid is not None else 0.0
    counts = await asyncio.gather(*(_client(ws, random.Random(i), stop, lat, period)
                                    for i, ws in enumerate(socks)))
    wall, steps = time.perf_counter() - t0, sum(counts)
    out = {"steps_per_s": steps / wall, "p50_ms": pct(lat, 0.5) * 1e3,
           "p99_ms": pct(lat, 0.99) * 1e3, "clients": clients,
           "client_cpu_us_per_step": (time.process_time() - c0) * 1e6 / steps}
    if pid is not None:
        out["server_cpu_us_per_step"] = (cpu_seconds(pid) - s0) * 1e6 / steps
    for ws in socks:
        await ws.close()
    return out


def in_process_cpu(clients: int, steps: int) -> float:
    """CPU microseconds per Sokoban step in this process for the load generator's workload:
    ``clients`` envs stepped with the same random moves, reset when an episode ends."""
    envs = [gym.make("arl/Sokoban-v0") for _ in range(clients)]
    rngs = [random.Random(i) for i in range(clients)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    n, c0 = 0, time.process_time()
    while n < steps:
        for env, rng in zip(envs, rngs, strict=True):
            *_, term, trunc, _ = env.step(response(rng))
            n += 1
            if term or trunc:
                env.reset(seed=rng.randrange(10**6))
    return (time.process_time() - c0) * 1e6 / n


def cpu_per_step(clients: int, seconds: float, rounds: int) -> dict[str, object]:
    """Part 5: server and client CPU per Sokoban step, event-loop steps vs pool-thread steps."""
    env_id = "arl/Sokoban-v0"
    servers = {"event loop": start_server([env_id], clients + 8),
               "thread pool": start_server([env_id], clients + 8,
                                           extra=("--no-inline-steps",))}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in servers}
    try:
        for _ in range(rounds):  # alternate, so both see the same machine load
            for name, (proc, url) in servers.items():
                runs[name].append(asyncio.run(load(url, clients, seconds, None, proc.pid)))
    finally:
        for proc, _ in servers.values():
            proc.kill()
            proc.wait(timeout=10)
    out: dict[str, object] = {"clients": clients, "rounds": rounds, "seconds": seconds}
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in
               ("server_cpu_us_per_step", "client_cpu_us_per_step", "steps_per_s")}
        # the server's Python runs on one core at a time (the GIL), so it is bounded by one
        # core as well as by both cores' sum
        med["computed_2_cores_steps_per_s"] = min(
            1e6 / med["server_cpu_us_per_step"],
            2e6 / (med["server_cpu_us_per_step"] + med["client_cpu_us_per_step"]))
        out[name] = {**med, "runs": rs}
    out["in_process_cpu_us_per_step"] = in_process_cpu(clients, 4000)
    return out


async def hold_sessions(url: str, pid: int, n: int) -> dict[str, float]:
    before = rss_mib(pid)
    socks = await _open(url, n)
    after = rss_mib(pid)
    for ws in socks:
        await ws.close()
    return {"sessions": n, "rss_before_mib": before, "rss_after_mib": after,
            "kib_per_session": (after - before) * 1024 / n}


def _episodes(trajs: list) -> list:
    """What must agree between the two sides: task, responses, rewards, outcome."""
    return [(t.task_id, [(s.response, s.step_reward) for s in t.steps], t.won) for t in trajs]


def vector_rollouts(tasks: int, group: int, batches: int, workers: int,
                    seed: int = 0) -> dict[str, object]:
    """Part 4: expert ALFWorld rollouts, local worker processes vs a two-server remote vector."""
    from arlgym.policies import make_policy
    from arlgym.rollout import RolloutCollector

    env_id = "arl/ALFWorld-v0"
    procs = [start_server([env_id], 4 * tasks * group, workers) for _ in range(2)]
    urls = [url for _, url in procs]
    common = {"num_tasks": tasks, "group_size": group, "seed": seed, "progress": False}
    local = RolloutCollector(env_id, make_policy("expert"), mode="async",
                             num_workers=2 * workers, **common)
    remote = RolloutCollector(env_id, make_policy("expert"), servers=urls, **common)
    sides = {"local": local, "remote": remote}
    timed: dict[str, dict[str, float]] = {k: {"s": 0.0, "steps": 0, "episodes": 0} for k in sides}
    equal = True
    try:
        for c in sides.values():  # warm-up batch: worker start-up, ALFWorld's first load
            c.collect()
        for _ in range(batches):
            got = {}
            for name, c in sides.items():
                t0 = time.perf_counter()
                trajs = c.collect()
                timed[name]["s"] += time.perf_counter() - t0
                timed[name]["steps"] += sum(t.length for t in trajs)
                timed[name]["episodes"] += len(trajs)
                got[name] = _episodes(trajs)
            equal = equal and got["local"] == got["remote"]
    finally:
        for c in sides.values():
            c.close()
        for proc, _ in procs:
            proc.kill()
            proc.wait(timeout=10)
    out: dict[str, object] = {"envs": tasks * group, "batches": batches,
                              "env_processes_per_side": 2 * workers, "trajectories_equal": equal}
    for name, t in timed.items():
        out[name] = {**t, "steps_per_s": t["steps"] / t["s"], "episodes_per_s": t["episodes"] / t["s"]}
    out["remote_over_local"] = out["remote"]["steps_per_s"] / out["local"]["steps_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="round-trip steps per env")
    ap.add_argument("--envs", nargs="+", default=["arl/Sokoban-v0", "arl/WebShop-v0",
                                                   "arl/ALFWorld-v0"])
    ap.add_argument("--sessions", type=int, default=1000, help="sessions held for memory")
    ap.add_argument("--clients", type=int, default=32, help="closed-loop clients")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per load phase")
    ap.add_argument("--vec-tasks", type=int, default=4, help="part 4: task groups per batch")
    ap.add_argument("--vec-group", type=int, default=2, help="part 4: episodes per task group")
    ap.add_argument("--vec-batches", type=int, default=3, help="part 4: timed batches per side")
    ap.add_argument("--vec-workers", type=int, default=1,
                    help="part 4: env processes per server (the local side gets twice this)")
    ap.add_argument("--cpu-rounds", type=int, default=3,
                    help="part 5: alternating load rounds per server (median reported)")
    ap.add_argument("--parts", nargs="+", default=["server", "vector", "cpu", "mcp", "burst"],
                    choices=["server", "vector", "cpu", "mcp", "burst"],
                    help="server: parts 1-3 (one server); vector: part 4; cpu: part 5; mcp: "
                         "part 6; burst: part 7 (default: all)")
    ap.add_argument("--burst-processes", type=int, nargs="+", default=[1, 2],
                    help="part 7: the --processes settings compared (default: 1 2)")
    ap.add_argument("--burst-rounds", type=int, default=3,
                    help="part 7: alternating rounds per setting, each on a fresh server")
    ap.add_argument("--burst", type=int, default=200,
                    help="part 6: new sessions opened at once in the burst")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    out: dict[str, object] = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    if "server" in args.parts:
        server_parts(args, out)
    if "vector" in args.parts:
        vec = vector_rollouts(args.vec_tasks, args.vec_group, args.vec_batches, args.vec_workers)
        out["vector"] = vec
        for side in ("local", "remote"):
            r = vec[side]
            print(f"ALFWorld expert rollouts, {side:6s}: {r['steps']} env steps, {r['episodes']} "
                  f"episodes in {r['s']:.1f} s = {r['steps_per_s']:.1f} steps/s", flush=True)
        print(f"two servers / local processes ({vec['env_processes_per_side']} env processes "
              f"each side, {vec['envs']} envs): {vec['remote_over_local']:.2f}x steps/s; "
              f"trajectories equal: {vec['trajectories_equal']}", flush=True)
    if "cpu" in args.parts:
        cpu = cpu_per_step(args.clients, args.seconds, args.cpu_rounds)
        out["cpu"] = cpu
        for name in ("event loop", "thread pool"):
            r = cpu[name]
            print(f"Sokoban steps on the server's {name:11s}: server {r['server_cpu_us_per_step']:.0f}"
                  f" + client {r['client_cpu_us_per_step']:.0f} CPU-us/step (median of "
                  f"{cpu['rounds']} rounds, {cpu['clients']} closed-loop clients; measured "
                  f"{r['steps_per_s']:.0f} steps/s here); computed for 2 quiet cores: "
                  f"{r['computed_2_cores_steps_per_s']:.0f} steps/s", flush=True)
        print(f"the same steps and resets in process: {cpu['in_process_cpu_us_per_step']:.0f} "
              "CPU-us/step", flush=True)
    if "mcp" in args.parts:
        proc, url = start_server(["arl/Sokoban-v0"], 16)
        try:
            r = out["mcp"] = mcp_round_trip(url, args.steps)
        finally:
            proc.kill()
            proc.wait(timeout=10)
        bursts = []
        for _ in range(3):
            proc, url = start_server(["arl/Sokoban-v0"], args.burst + 8)
            try:
                bursts.append(asyncio.run(burst(url, args.burst)))
            finally:
                proc.kill()
                proc.wait(timeout=10)
        out["burst"] = b = min(bursts, key=lambda x: x["p99_ms"])
        p99s = ", ".join(f"{x['p99_ms']:.0f}" for x in bursts)
        print(f"burst of {b['sessions']} new Sokoban sessions (connect + reset + step at once), "
              f"best of 3: p50 {b['p50_ms']:.0f} ms, p99 {b['p99_ms']:.0f} ms (all p99s: "
              f"{p99s} ms)", flush=True)
        print(f"Sokoban step p50 over {r['steps']} steps: /ws {r['ws_p50_ms']:.3f} ms | act "
              f"tool on WebSocket /mcp {r['ws_mcp_p50_ms']:.3f} ms "
              f"(+{r['ws_mcp_added_p50_ms']:.3f}) | on POST /mcp {r['http_mcp_p50_ms']:.3f} ms "
              f"(+{r['http_mcp_added_p50_ms']:.3f})", flush=True)
    if "burst" in args.parts:
        b = out["burst_processes"] = burst_processes(args.burst, args.burst_rounds,
                                                     args.burst_processes)
        for p in args.burst_processes:
            r = b[f"processes_{p}"]
            p99s = ", ".join(f"{x['p99_ms']:.0f}" for x in r["runs"])
            print(f"burst of {args.burst} new Sokoban sessions, --processes {p}: p50 "
                  f"{r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms (median of {args.burst_rounds}"
                  f" rounds; p99s {p99s} ms); CPU per session: server "
                  f"{r['server_cpu_ms_per_session']:.2f} ms, client "
                  f"{r['client_cpu_ms_per_session']:.2f} ms", flush=True)
    out["load_avg_at_end"] = os.getloadavg()
    print(f"machine: {out['cpus']} CPUs, load average {out['load_avg_at_start'][0]:.2f} at start, "
          f"{out['load_avg_at_end'][0]:.2f} at end (server and clients share it)")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))


def server_parts(args: argparse.Namespace, out: dict[str, object]) -> None:
    """Parts 1-3 on one server."""
    proc, url = start_server(args.envs, max(args.sessions, args.clients) + 8)
    try:
        out["round_trip"] = {e: round_trip(url, e, args.steps if e != "arl/ALFWorld-v0"
                                           else max(50, args.steps // 10)) for e in args.envs}
        for env_id, r in out["round_trip"].items():
            print(f"{env_id:18s} in-process p50 {r['local_p50_ms']:.3f} ms | WebSocket p50 "
                  f"{r['remote_p50_ms']:.3f} ms (+{r['added_p50_ms']:.3f}) p99 "
                  f"{r['remote_p99_ms']:.3f} ms over {r['steps']} steps", flush=True)
        mem = asyncio.run(hold_sessions(url, proc.pid, args.sessions))
        out["memory"] = mem
        print(f"{mem['sessions']} open Sokoban sessions: server RSS {mem['rss_before_mib']:.0f} "
              f"-> {mem['rss_after_mib']:.0f} MiB ({mem['kib_per_session']:.1f} KiB/session)",
              flush=True)
        sat = asyncio.run(load(url, args.clients, args.seconds, None, proc.pid))
        # the host's speed, measured in the same run: one core stepping the same workload in
        # process; the ratio carries across machines where the absolute rate does not
        ref = 1e6 / in_process_cpu(args.clients, 4000)
        sat["in_process_steps_per_s"] = ref
        sat["vs_in_process"] = sat["steps_per_s"] / ref
        out["saturation"] = sat
        print(f"saturation, {sat['clients']} closed-loop clients: {sat['steps_per_s']:.0f} "
              f"steps/s (p50 {sat['p50_ms']:.2f} ms, p99 {sat['p99_ms']:.2f} ms; server "
              f"{sat['server_cpu_us_per_step']:.0f}, client {sat['client_cpu_us_per_step']:.0f} "
              f"CPU-us/step) = {sat['vs_in_process']:.2f}x one core stepping the same envs in "
              f"process ({ref:.0f} steps/s on this host)", flush=True)
        half = asyncio.run(load(url, args.clients, args.seconds, sat["steps_per_s"] / 2))
        out["half_load"] = half
        print(f"half load, paced at {sat['steps_per_s'] / 2:.0f} steps/s: served "
              f"{half['steps_per_s']:.0f} steps/s, p50 {half['p50_ms']:.2f} ms, p99 "
              f"{half['p99_ms']:.2f} ms", flush=True)
    finally:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
