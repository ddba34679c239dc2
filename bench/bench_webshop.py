"""WebShop at scale: catalog + index build (cold, and cached: a fresh process memory-mapping the
disk cache), search p50/p99 against a plain in-memory BM25 baseline measured in the same run,
env step p50/p99 of expert episodes, peak RSS; and the HTTP site under load (200 shoppers at
once on loopback).

    python bench/bench_webshop.py                      # 1k and 100k, plus the load test
    python bench/bench_webshop.py --sizes 1000 100000 1181436   # WebShop's full size too
    python bench/bench_webshop.py --no-load            # skip the server load test
    python bench/bench_webshop.py --sizes --load-only --repeat 8  # only the load test (arlgym's server,
                                                       # then the former Flask one), 8 runs each

Every size runs in fresh worker processes with their own cache folder (cold = no cache; cached =
a second process that finds it). The baseline is the index arlgym had before (an inverted index
of Python dicts, no stemming), built in the same worker at 1k and 100k; at 1M it would need
several GB of Python objects, so it is not built there. Timings are wall clock and, for search,
also the thread's CPU time (the machine may be shared: CPU time is what a query costs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- baseline
class PlainBM25:
    """The baseline: arlgym's former index (Python dict postings, lower-case words, no stemming)."""

    def __init__(self, docs: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.lengths = []
        for i, text in enumerate(docs):
            counts = Counter(re.findall(r"[a-z0-9]+", text.lower()))
            self.lengths.append(sum(counts.values()))
            for t, tf in counts.items():
                self.postings[t].append((i, tf))
        n = len(docs)
        self.avg = sum(self.lengths) / max(1, n)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}

    def search(self, query: str, k: int = 50) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for t in re.findall(r"[a-z0-9]+", query.lower()):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for d, tf in self.postings[t]:
                scores[d] += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * self.lengths[d] / self.avg))
        return [d for d, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]]


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3),
            "mean_ms": round(float(a.mean()), 3)}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _queries(catalog, n: int) -> list[str]:
    goals = [catalog.goals[i] for i in range(min(n, len(catalog.goals)))]
    return ([re.split(r" with |, and price", g.instruction)[0] for g in goals]
            + [g.name.lower() for g in goals[: n // 4]])


# ----------------------------------------------------------------------------- workers
def worker(n: int, mode: str, baseline: bool, data_dir: str | None = None) -> dict:
    """Runs in a fresh process: ``mode`` 'cold' (build + store) or 'cached' (load)."""
    import gymnasium as gym

    import arlgym  # noqa: F401
    from arlgym.envs.webshop.env import load_shop

    out: dict = {"n": n, "mode": mode, "source": "official files" if data_dir else "synthetic"}
    t = time.perf_counter()
    catalog, index = load_shop(data_dir, n, 0)
    out["start_s"] = round(time.perf_counter() - t, 3)
    out["rss_after_start_mb"] = round(_rss_mb(), 1)
    out["memmapped"] = isinstance(index.bm25.docs.base, np.memmap)
    out["postings"] = int(len(index.bm25.docs))
    if mode == "cold":
        return out
    queries = _queries(catalog, 400)
    for q in queries[:20]:
        index.search(q)
    wall, cpu = [], []
    for q in queries:
        t, c = time.perf_counter(), time.thread_time()
        index.search(q)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
    out["search_wall"], out["search_cpu"] = _pct(wall), _pct(cpu)
    # env steps of expert episodes over test goals (search steps included)
    env = gym.make("arl/WebShop-v0", num_products=n, data_dir=data_dir).unwrapped
    steps, won, episodes = [], 0, 0
    for task_id in env.list_tasks("test", limit=200):
        env.reset(options={"task_id": task_id})
        for _ in range(env.max_steps):
            response = env.expert_response()
            t = time.perf_counter()
            _, _, term, trunc, info = env.step(response)
            steps.append(time.perf_counter() - t)
            if term or trunc:
                break
        won += bool(info["won"])
        episodes += 1
    out["step"] = _pct(steps)
    out["expert_won"] = f"{won}/{episodes}"
    top = [catalog.goals[i].asin in index.search(q)[:50] for i, q in enumerate(queries[:200])]
    out["request_top50"] = round(float(np.mean(top)), 3)
    out["rss_peak_mb"] = round(_rss_mb(), 1)
    if baseline:
        from arlgym.envs.webshop.search import product_document

        t = time.perf_counter()
        plain = PlainBM25([product_document(p) for p in catalog.iter_products()])
        out["baseline_build_s"] = round(time.perf_counter() - t, 2)
        wall, cpu = [], []
        for q in queries if n < 50_000 else queries[::5]:  # (a pure-Python query at 100k: ~0.4 s)
            t, c = time.perf_counter(), time.thread_time()
            plain.search(q)
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - t)
        out["baseline_search_wall"], out["baseline_search_cpu"] = _pct(wall), _pct(cpu)
        out["rss_with_baseline_mb"] = round(_rss_mb(), 1)
    return out


def write_official_files(n: int, folder: str) -> str:
    """The synthetic catalog of ``n`` products written as WebShop's items_shuffle.json and
    items_ins_v2.json (streamed out, product by product)."""
    from arlgym.envs.webshop.catalog import generate_catalog

    catalog = generate_catalog(n)
    with open(os.path.join(folder, "items_shuffle.json"), "w") as fp, \
            open(os.path.join(folder, "items_ins_v2.json"), "w") as fi:
        fp.write("[")
        fi.write("{")
        for i, p in enumerate(catalog.iter_products()):
            sep = ",\n" if i else "\n"
            fp.write(sep + json.dumps({
                "asin": p.asin, "name": p.name, "pricing": f"${p.price:.2f}", "category": p.category,
                "query": p.query, "product_category": p.product_category, "full_description": p.description,
                "small_description": list(p.bullets),
                "customization_options": {k: [{"value": v, "image": None} for v in vs] for k, vs in p.options.items()}}))
            fi.write(sep + json.dumps(p.asin) + ": " + json.dumps({
                "instruction": p.instruction, "instruction_attributes": list(p.attributes),
                "attributes": list(p.attributes)}))
        fp.write("\n]")
        fi.write("\n}")
    return folder


def run_worker(args: list[str], cache: str) -> dict:
    env = {**os.environ, "ARLGYM_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
                          env=env, timeout=3600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- load test
# The former server, for the same-run comparison: Flask's threaded development server (Werkzeug),
# redirecting after every action, over the same engine and pages (needs Flask installed).
_FORMER_SERVER = """
import logging, secrets, sys, threading
import numpy as np
from flask import Flask, abort, redirect, request
from werkzeug.serving import make_server
from arlgym.envs.webshop.engine import ShopSession
from arlgym.envs.webshop.env import load_shop, split_range
from arlgym.envs.webshop.server import render_page
logging.getLogger("werkzeug").setLevel(logging.ERROR)
catalog, index = load_shop(None, 1000, 0)
low, high = split_range("train", len(catalog.goals))
rng, sessions, lock = np.random.default_rng(0), {}, threading.Lock()
app = Flask("former")
@app.get("/")
def root():
    sid = secrets.token_hex(16)
    with lock:
        sessions[sid] = [ShopSession(catalog, index, catalog.goals[int(rng.integers(low, high))]), 0]
    return redirect(f"/s/{sid}")
@app.get("/s/<sid>")
def page(sid):
    with lock:
        if sid not in sessions: abort(404)
        s, step = sessions[sid]
        return render_page(sid, s, step)
def apply(sid, action):
    with lock:
        if sid not in sessions: abort(404)
        entry = sessions[sid]
        if not entry[0].purchased: entry[0].act(action)
        entry[1] += 1
    return redirect(f"/s/{sid}")
@app.get("/s/<sid>/search")
def search(sid): return apply(sid, "search[" + request.args.get("q", "") + "]")
@app.get("/s/<sid>/act")
def act(sid): return apply(sid, request.args.get("a", ""))
make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True).serve_forever()
"""


class _Shopper:
    """What one shopper checks on its pages, shared by both load clients: every page must be
    its own session's (its goal text; its query's results; its item; its purchase's score)."""

    def __init__(self, i: int, leaks: list[str]) -> None:
        self.i, self.leaks, self.goal = i, leaks, ""

    def start(self, page: str) -> str:
        """The first page: remembers the goal, returns the search path's query."""
        from urllib.parse import quote

        self.goal = re.search(r"Instruction: (.*?)</div>", page).group(1)
        return quote(re.split(r" with |, and price", self.goal)[0])

    def check(self, page: str, must: str, what: str) -> None:
        if f"Instruction: {self.goal}</div>" not in page or must not in page:
            self.leaks.append(f"shopper {self.i}: {what} is not its own")

    @staticmethod
    def first_result(page: str) -> str | None:
        from urllib.parse import quote

        first = re.search(r'data-click="(b0[0-9a-z]+)"', page)
        return quote(f"click[{first.group(1)}]") if first else None


def _threads_client(port: int, shoppers: int, latencies: list[float], leaks: list[str],
                    errors: list[str]) -> None:
    """The first client: one Python thread per shopper (http.client). Its latencies include the
    client's own GIL queue: 200 threads hand one interpreter lock around (5 ms switch interval)."""
    import http.client
    from urllib.parse import quote

    lock = threading.Lock()
    barrier = threading.Barrier(shoppers)

    def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, str, str]:
        t = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read().decode()
        with lock:
            latencies.append(time.perf_counter() - t)
        location = r.getheader("Location") or ""
        if r.status == 302 and path != "/":  # the former server redirects after an action
            return get(conn, location)
        return r.status, location, body

    def shopper(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        me = _Shopper(i, leaks)
        try:
            barrier.wait()
            _, location, _ = get(conn, "/")
            sid = location.rsplit("/", 1)[-1]
            _, _, page = get(conn, location)
            _, _, page = get(conn, f"/s/{sid}/search?q={me.start(page)}")
            me.check(page, "Total results", "results page")
            first = me.first_result(page)
            if first:
                _, _, page = get(conn, f"/s/{sid}/act?a={first}")
                me.check(page, "Buy Now", "item page")
                _, _, page = get(conn, f"/s/{sid}/act?a={quote('click[buy now]')}")
                me.check(page, "data-score", "purchase page")
        except Exception as e:  # noqa: BLE001 - counted and reported
            with lock:
                errors.append(f"shopper {i}: {type(e).__name__}: {e}")
        finally:
            conn.close()

    workers = [threading.Thread(target=shopper, args=(i,)) for i in range(shoppers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _asyncio_client(port: int, shoppers: int, latencies: list[float], leaks: list[str],
                    errors: list[str]) -> None:
    """The default client: every shopper a coroutine on one event loop (raw HTTP/1.1 keep-alive
    over asyncio streams), released together by one event. Like a load generator (wrk, locust on
    gevent) it costs the machine little, so on 2 shared cores the latencies are the server's,
    not the client's own queue for the GIL; its CPU time is reported beside the server's."""
    import asyncio
    from urllib.parse import quote

    async def exchange(stream: list, path: str) -> tuple[list[str], dict[str, str], bytes]:
        if not stream:  # connect on the first request (its latency includes it), as http.client does
            stream.extend(await asyncio.open_connection("127.0.0.1", port))
        reader, writer = stream
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:  # no length: the body ends when the server closes the connection
            body = await reader.read()
        if head[0].startswith("HTTP/1.0") or headers.get("connection", "").lower() == "close" \
                or "content-length" not in headers:
            writer.close()  # the server closes it: the next request opens a new one
            stream.clear()
        return head, headers, body

    async def get(stream: list, path: str) -> tuple[int, str, str]:
        t = time.perf_counter()
        head, headers, body = await asyncio.wait_for(exchange(stream, path), 60)  # as http.client's timeout
        latencies.append(time.perf_counter() - t)
        body = body.decode()
        status, location = int(head[0].split()[1]), headers.get("location", "")
        if status == 302 and path != "/":  # the former server redirects after an action
            return await get(stream, location)
        return status, location, body

    async def shopper(i: int, go: asyncio.Event) -> None:
        stream: list = []
        me = _Shopper(i, leaks)
        try:
            await go.wait()
            _, location, _ = await get(stream, "/")
            sid = location.rsplit("/", 1)[-1]
            _, _, page = await get(stream, location)
            _, _, page = await get(stream, f"/s/{sid}/search?q={me.start(page)}")
            me.check(page, "Total results", "results page")
            first = me.first_result(page)
            if first:
                _, _, page = await get(stream, f"/s/{sid}/act?a={first}")
                me.check(page, "Buy Now", "item page")
                _, _, page = await get(stream, f"/s/{sid}/act?a={quote('click[buy now]')}")
                me.check(page, "data-score", "purchase page")
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors.append(f"shopper {i}: {type(e).__name__}: {e}")
        finally:
            if stream:
                stream[1].close()

    async def all_shoppers() -> None:
        go = asyncio.Event()
        tasks = [asyncio.create_task(shopper(i, go)) for i in range(shoppers)]
        await asyncio.sleep(0)  # every shopper is waiting at the door
        go.set()
        await asyncio.gather(*tasks)

    asyncio.run(all_shoppers())


def load_test(shoppers: int = 200, former: bool = False, client: str = "asyncio") -> dict:
    """``shoppers`` clients start at once, each: visit / (a new goal), search its request, open
    the first result, buy (redirects followed). Every request's latency is recorded; every page is
    checked to belong to its own session (goal text and query). ``former``: against the former
    Flask development server instead of arlgym's (uvicorn); ``client``: 'asyncio' (default) or
    'threads' (the first client, one thread a shopper)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = tempfile.mkdtemp(prefix="arlgym-bench-")
    command = ([sys.executable, "-c", _FORMER_SERVER, str(port)] if former else
               [sys.executable, "-m", "arlgym.cli", "webshop", "serve", "--port", str(port),
                "--split", "train"])
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "ARLGYM_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"})
    try:
        for _ in range(600):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        latencies: list[float] = []
        leaks: list[str] = []
        errors: list[str] = []

        def server_cpu_s() -> float:  # the server's user + system CPU time, its children included
            total = 0.0
            pids = [server.pid] + [int(p) for p in open(f"/proc/{server.pid}/task/{server.pid}/children")
                                   .read().split()]
            for pid in pids:
                try:
                    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                except FileNotFoundError:
                    continue
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            return total

        run = {"asyncio": _asyncio_client, "threads": _threads_client}[client]
        cpu0, own0 = server_cpu_s(), time.process_time()
        t = time.perf_counter()
        run(port, shoppers, latencies, leaks, errors)
        total = time.perf_counter() - t
        server_cpu, client_cpu = server_cpu_s() - cpu0, time.process_time() - own0
        n = max(1, len(latencies))
        return {"server": "former Flask dev server" if former else "uvicorn",
                "client": client, "shoppers": shoppers, "requests": len(latencies),
                "request": _pct(latencies), "wall_s": round(total, 2),
                "server_cpu_ms_per_request": round(1000 * server_cpu / n, 3),
                "client_cpu_ms_per_request": round(1000 * client_cpu / n, 3),
                "cross_session_leaks": len(leaks),
                "errors": len(errors), "first_errors": errors[:3]}
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 100_000])
    parser.add_argument("--no-load", action="store_true", help="skip the server load test")
    parser.add_argument("--load-only", action="store_true", help="only the server load test")
    parser.add_argument("--official", type=int, nargs="*", default=[],
                        help="also load WebShop-format product files of these sizes (written from the "
                             "synthetic catalog): the streamed, on-disk official path")
    parser.add_argument("--shoppers", type=int, default=200)
    parser.add_argument("--no-former", action="store_true", help="do not measure the former Flask server")
    parser.add_argument("--repeat", type=int, default=1, help="load tests per server and client (each a "
                        "fresh server; the p99 of each run is printed)")
    parser.add_argument("--client", choices=["asyncio", "threads", "both"], default="asyncio",
                        help="load client: one event loop (default), one thread a shopper, or both")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        n, mode, baseline = int(args.worker[0]), args.worker[1], args.worker[2] == "1"
        print(json.dumps(worker(n, mode, baseline, args.worker[3] if len(args.worker) > 3 else None)))
        return
    print(f"# bench_webshop  cpus={os.cpu_count()}  load average={os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for n in [] if args.load_only else args.sizes:
        cache = tempfile.mkdtemp(prefix="arlgym-bench-")
        cold = run_worker([str(n), "cold", "0"], cache)
        cached = run_worker([str(n), "cached", "1" if n <= 100_000 else "0"], cache)
        row = {"n": n, "cold_start_s": cold["start_s"], "cold_rss_mb": cold["rss_after_start_mb"],
               "cached_start_s": cached["start_s"], **{k: v for k, v in cached.items() if k not in ("n", "mode")}}
        results.append(row)
        print(json.dumps(row), flush=True)
    for n in [] if args.load_only else args.official:
        cache = tempfile.mkdtemp(prefix="arlgym-bench-")
        folder = write_official_files(n, tempfile.mkdtemp(prefix="arlgym-bench-data-"))
        size_mb = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 2**20
        cold = run_worker([str(n), "cold", "0", folder], cache)
        cached = run_worker([str(n), "cached", "0", folder], cache)
        row = {"n": n, "files_mb": round(size_mb, 1), "cold_start_s": cold["start_s"],
               "cold_rss_mb": cold["rss_after_start_mb"], "cached_start_s": cached["start_s"],
               **{k: v for k, v in cached.items() if k not in ("n", "mode")}}
        print(json.dumps(row), flush=True)
    if not args.no_load:
        clients = ["asyncio", "threads"] if args.client == "both" else [args.client]
        servers = [False]
        try:
            import flask  # noqa: F401
            servers += [] if args.no_former else [True]
        except ImportError:
            print("# the former Flask server is not measured: Flask is not installed")
        for former in servers:
            for client in clients:
                runs = [load_test(args.shoppers, former=former, client=client) for _ in range(args.repeat)]
                for run in runs:
                    print(json.dumps({"load": run}), flush=True)
                p99 = sorted(run["request"]["p99_ms"] for run in runs)
                print(f"# {runs[0]['server']}, {client} client: p99 of {len(runs)} runs (ms) {p99}, "
                      f"median {float(np.median(p99)):.0f}", flush=True)
    print(f"# load average at the end={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
