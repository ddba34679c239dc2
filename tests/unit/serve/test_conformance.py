"""OpenEnv 0.10 conformance of ``arlgym serve``, checked on real servers on loopback:
``/openapi.json`` true to the mode, production mode without HTTP reset/step/state, WebSocket
path routing, ``/ws?session_id=`` attaching to an HTTP session, top-level ``metadata``, and
``reset_observation`` in ``/schema``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import gymnasium as gym
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import arlgym
from arlgym.serve.server import EnvServer


def gone(srv: EnvServer, sid: str) -> bool:
    """Whether the server dropped session ``sid`` (within 10 s: it handles closes async)."""
    import time

    deadline = time.monotonic() + 10
    while sid in srv.app.sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    return sid not in srv.app.sessions


def http(url: str, path: str, body: Any = None, method: str | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def server():
    with EnvServer({"arl/Sokoban-v0": {}}, max_sessions=16) as srv:
        yield srv


@pytest.fixture(scope="module")
def production():
    with EnvServer({"arl/Sokoban-v0": {}}, mode="production") as srv:
        yield srv


def ws_url(srv: EnvServer, path: str = "/ws") -> str:
    return srv.url.replace("http://", "ws://") + path


def ask(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def test_openapi_lists_the_routes_of_each_mode(server, production):
    status, doc = http(server.url, "/openapi.json")
    assert status == 200 and doc["info"]["version"] == "1.0.0"
    assert doc["info"]["x-arlgym-version"] == arlgym.__version__
    assert {"/reset", "/step", "/state", "/mcp", "/health", "/schema"} <= set(doc["paths"])
    assert set(doc["paths"]["/reset"]) == {"post"} and set(doc["paths"]["/state"]) == {"get"}
    status, prod = http(production.url, "/openapi.json")
    assert status == 200 and "production" in prod["info"]["description"]
    assert not {"/reset", "/step", "/state"} & set(prod["paths"])
    assert set(doc["paths"]) - set(prod["paths"]) == {"/reset", "/step", "/state"}


def test_production_mode_drops_http_reset_step_state_but_plays_over_ws(production):
    for method, path, body in (("POST", "/reset", {}), ("POST", "/step", {}),
                               ("GET", "/state?session_id=x", None)):
        status, err = http(production.url, path, body, method=method)
        assert status == 404 and "production" in err["detail"], path
    env = gym.make("arl/Sokoban-v0")
    obs, _ = env.reset(seed=2)
    with connect(ws_url(production)) as ws:
        reply = ask(ws, {"type": "reset", "data": {"seed": 2}})
        assert reply["type"] == "observation" and reply["data"]["observation"]["prompt"] == obs


def test_mode_is_checked():
    from arlgym.errors import ConfigError

    with pytest.raises(ConfigError, match="--mode 'prod'.*simulation"):
        EnvServer({"arl/Sokoban-v0": {}}, mode="prod")


def test_unknown_websocket_paths_are_refused_with_404(server):
    for path in ("/", "/nope", "/ws/extra", "/reset"):
        with pytest.raises(InvalidStatus) as exc:
            connect(ws_url(server, path), open_timeout=10)
        assert exc.value.response.status_code == 404, path
        assert json.loads(exc.value.response.body)["code"] == "NOT_FOUND"
    assert not server.app.sessions


def test_top_level_metadata_and_reset_observation_schema(server):
    env = gym.make("arl/Sokoban-v0")
    _, info = env.reset(seed=5)
    _, reward, _, _, info2 = env.step("<think>t</think><action>up</action>")
    with connect(ws_url(server)) as ws:
        reset = ask(ws, {"type": "reset", "data": {"seed": 5}})["data"]
        step = ask(ws, {"type": "step",
                        "data": {"response": "<think>t</think><action>up</action>"}})["data"]
    for result, expected in ((reset, info), (step, info2)):
        assert result["metadata"] == result["observation"]["metadata"]
        assert result["metadata"]["anchor"] == expected["anchor"]
        assert result["metadata"]["admissible_actions"] == expected["admissible_actions"]
    assert step["reward"] == reward
    status, schema = http(server.url, "/schema")
    assert status == 200 and schema["reset_observation"] == schema["observation"]
    assert {"action", "observation", "state"} <= set(schema)


def test_ws_session_id_attaches_to_an_http_session(server):
    """OpenEnv's ``/ws?session_id=``: the socket drives the HTTP session (its env, its step
    count); when the socket goes, the session stays for HTTP; one socket at a time."""
    env = gym.make("arl/Sokoban-v0")
    env.reset(seed=7)
    status, body = http(server.url, "/reset", {"seed": 7})
    sid = body["observation"]["session_id"]
    text = "<think>t</think><action>left</action>"
    obs, reward, *_ = env.step(text)
    with connect(ws_url(server) + f"?session_id={sid}") as ws:
        step = ask(ws, {"type": "step", "data": {"response": text}})["data"]
        assert step["observation"]["prompt"] == obs and step["reward"] == reward
        assert step["observation"]["session_id"] == sid
        state = ask(ws, {"type": "state"})["data"]
        assert state["session_id"] == sid and state["step_count"] == 1 and state["seed"] == 7
        with connect(ws_url(server) + f"?session_id={sid}") as second:
            err = json.loads(second.recv(timeout=10))
            assert err["type"] == "error" and "already has an attached" in err["data"]["message"]
        # closing an attached session over HTTP waits for its socket
        _, other = http(server.url, "/reset", {"seed": 1})
        osid = other["observation"]["session_id"]
        with connect(ws_url(server) + f"?session_id={osid}") as ws2:
            assert http(server.url, "/close", {"session_id": osid}) == (
                200, {"closed": osid, "closing": True})
            assert ask(ws2, {"type": "state"})["data"]["session_id"] == osid
        assert gone(server, osid)  # the server handles the socket's close on its own time
    status, state = http(server.url, f"/state?session_id={sid}")
    assert status == 200 and state["step_count"] == 1  # the session outlived its socket
    obs, *_ = env.step(text)
    status, body = http(server.url, "/step", {"session_id": sid, "action": {"response": text}})
    assert status == 200 and body["observation"]["prompt"] == obs
    http(server.url, "/close", {"session_id": sid})
    with connect(ws_url(server) + f"?session_id={sid}") as ws:
        err = json.loads(ws.recv(timeout=10))
        assert err["data"]["code"] == "SESSION_ERROR" and "Unknown session_id" in \
            err["data"]["message"]


def test_a_websocket_session_cannot_be_attached(server):
    """A /ws connection's own session stays private to it, as over HTTP."""
    with connect(ws_url(server)) as ws:
        sid = ask(ws, {"type": "reset", "data": {"seed": 0}})["data"]["observation"]["session_id"]
        with connect(ws_url(server) + f"?session_id={sid}") as other:
            assert json.loads(other.recv(timeout=10))["data"]["code"] == "SESSION_ERROR"


def test_cli_mode_flag(capsys):
    import argparse

    from arlgym.serve.cli import add_subparser

    parser = argparse.ArgumentParser()
    add_subparser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--env", "arl/Sokoban-v0", "--mode", "production"])
    assert args.mode == "production"
    assert parser.parse_args(["serve", "--env", "arl/Sokoban-v0"]).mode == "simulation"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--env", "arl/Sokoban-v0", "--mode", "prod"])
    assert "invalid choice: 'prod'" in capsys.readouterr().err
