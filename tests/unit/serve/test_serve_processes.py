"""``arlgym serve --processes 2``: two server processes share one port (SO_REUSEPORT); the
WebSocket sessions of many connections are served by both (their ``state`` names the process),
every episode equals the in-process one, and an HTTP session reached through another process
is refused with HTTP 421 naming the fix, while one keep-alive connection keeps reaching it."""

from __future__ import annotations

import http.client
import json
import os
import random
import urllib.error
import urllib.request
from contextlib import ExitStack

import gymnasium as gym
import pytest
from websockets.sync.client import connect

import arlgym  # noqa: F401
from arlgym.errors import ConfigError
from arlgym.serve.server import EnvServer

ENV = "arl/Sokoban-v0"
MOVES = ["up", "down", "left", "right"]


@pytest.fixture(scope="module")
def server():
    with EnvServer({ENV: {}}, processes=2, max_sessions=64) as srv:
        yield srv


def _ws(kind: str, data: dict, ws) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    reply = json.loads(ws.recv(timeout=30))
    assert reply["type"] != "error", reply
    return reply["data"]


def test_sessions_spread_over_both_processes_and_equal_in_process(server):
    pids = server.pids()
    assert len(pids) == 2 and pids[0] == os.getpid() and pids[1] != pids[0]
    ws_url = server.url.replace("http://", "ws://") + "/ws"
    seen = []
    with ExitStack() as stack:  # 16 connections open at once: 16 source ports
        socks = [stack.enter_context(connect(ws_url, compression=None)) for _ in range(16)]
        for seed, ws in enumerate(socks):
            env = gym.make(ENV)
            obs, info = env.reset(seed=seed)
            r = _ws("reset", {"seed": seed}, ws)
            assert r["observation"]["prompt"] == obs and r["done"] is False
            assert r["observation"]["metadata"]["anchor"] == info["anchor"]
            rng = random.Random(seed)
            for _ in range(6):
                text = f"<think>t</think><action>{rng.choice(MOVES)}</action>"
                obs, reward, term, trunc, info = env.step(text)
                r = _ws("step", {"response": text}, ws)
                assert r["observation"]["prompt"] == obs and r["reward"] == reward
                assert r["done"] == (term or trunc)
                assert r["observation"]["metadata"]["anchor"] == info["anchor"]
                if term or trunc:
                    break
            env.close()
            state = _ws("state", {}, ws)
            assert state["seed"] == seed and state["session_id"].endswith((".0", ".1"))
            seen.append(state["server_pid"])
    # 16 connections each land on one of two processes: all on one has chance 2 ** -15
    assert set(seen) == set(pids)


def _post(url: str, path: str, body: dict) -> tuple[int, dict]:
    """One request on a new connection (the kernel picks the process anew)."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_session_is_refused_in_the_other_process_and_kept_on_its_connection(server):
    status, body = _post(server.url, "/reset", {"seed": 3})
    assert status == 200
    sid = body["observation"]["session_id"]
    statuses = set()
    for _ in range(24):  # new connections: both processes answer (all one: chance 2 ** -23)
        status, body = _post(server.url, "/step", {"session_id": sid, "action": {
            "response": "<think>t</think><action>up</action>"}})
        statuses.add(status)
        if status == 421:
            assert body["code"] == "MISDIRECTED_SESSION"
            assert "--processes 1" in body["detail"] and "keep-alive" in body["detail"]
        else:
            assert status in (200, 409), body  # 409: the episode ended
    assert 421 in statuses and statuses & {200, 409}
    # one keep-alive connection stays with its process: every request reaches the session
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/reset", body=json.dumps({"seed": 5}),
                     headers={"Content-Type": "application/json"})
        sid = json.loads(conn.getresponse().read())["observation"]["session_id"]
        for _ in range(5):
            conn.request("GET", f"/state?session_id={sid}")
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["seed"] == 5
    finally:
        conn.close()


def test_health_names_the_process(server):
    with urllib.request.urlopen(server.url + "/health", timeout=30) as resp:
        health = json.loads(resp.read())
    assert health["processes"] == 2 and health["pid"] in server.pids()
    assert health["process"] == server.pids().index(health["pid"])


def test_processes_must_be_positive():
    with pytest.raises(ConfigError, match="processes"):
        EnvServer({ENV: {}}, processes=0)
