"""The env server (``arlgym serve``) driven by OpenEnv's own client package over WebSocket and by
plain HTTP checked against OpenEnv's own wire models: every text env's reset/step, seeded
episodes equal to in-process ones, and the refusals (token, malformed, oversized, unknown)."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from typing import Any

import gymnasium as gym
import pytest
from openenv.core.env_server.types import ResetResponse, StepResponse
from openenv.core.generic_client import GenericEnvClient

import arlgym  # noqa: F401
from arlgym.serve.codec import jsonable
from arlgym.serve.server import EnvServer

TEXT_ENVS = ["arl/Sokoban-v0", "arl/TIRMath-v0", "arl/WebShop-v0", "arl/ALFWorld-v0"]


@pytest.fixture(scope="module")
def server():
    with EnvServer({env_id: {} for env_id in TEXT_ENVS}, workers=1, max_sessions=64) as srv:
        yield srv


def http(url: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None, method: str | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url + path, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw_post(url: str, rest: bytes) -> bytes:
    """POST /reset with hand-written headers (``rest``), for bodies urllib would not send."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + rest)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < int(
                reply.lower().partition(b"content-length: ")[2].split(b"\r\n")[0] or 0):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
        return reply


def responses(env_id: str, info: dict, rng: random.Random) -> str:
    """A response a policy could give: an admissible action, a made-up one, or a bad format."""
    roll = rng.random()
    if roll < 0.15:
        return "I will just move without tags"
    if env_id == "arl/TIRMath-v0":
        return rng.choice(["<think>sum</think>The answer is \\boxed{4}.", "\\boxed{7}",
                           "<think>t</think><answer>\\boxed{12}</answer>"])
    if env_id == "tir-code":  # a code cell: the sandbox runs it
        return f"<think>compute</think>\n```python\nprint({rng.randrange(100)} * 3)\n```"
    admissible = [a for a in (info.get("admissible_actions") or []) if "<" not in a]
    if roll < 0.25 or not admissible:
        action = rng.choice(["up", "search[red shirt]", "go to nowhere", "click[buy now]"])
    else:
        action = rng.choice(admissible)
    return f"<think>step {info['step']}</think><action>{action}</action>"


def play_both(client, env_id: str, seed: int, max_steps: int, rng_seed: int,
              code: bool = False) -> None:
    """One seeded episode through the server and in process: every step must match
    (``code``: TIR Math responses alternate with code cells the sandbox runs)."""
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    r = client.reset(seed=seed, env=env_id)
    assert r.observation["prompt"] == obs and r.reward is None and r.done is False
    meta = dict(r.observation["metadata"])
    assert (meta.pop("terminated"), meta.pop("truncated")) == (False, False)
    assert meta == jsonable(info)
    rng = random.Random(rng_seed)
    for k in range(max_steps):
        text = responses("tir-code" if code and k % 2 == 0 else env_id, info, rng)
        obs, reward, term, trunc, info = env.step(text)
        r = client.step({"response": text})
        meta = dict(r.observation["metadata"])
        assert (meta.pop("terminated"), meta.pop("truncated")) == (term, trunc)
        assert r.observation["prompt"] == obs
        assert r.reward == reward and r.done == (term or trunc)
        assert meta == jsonable(info)
        if term or trunc:
            break
    env.close()


@pytest.mark.parametrize("env_id", TEXT_ENVS)
def test_openenv_ws_client_reset_step_every_text_env(server, env_id):
    with GenericEnvClient(base_url=server.url).sync() as client:
        play_both(client, env_id, seed=11, max_steps=4, rng_seed=1)
        state = client.state()
        assert state["env"] == env_id and state["seed"] == 11 and state["step_count"] >= 1


@pytest.mark.parametrize("env_id", TEXT_ENVS)
def test_http_reset_step_state_close_every_text_env(server, env_id):
    env = gym.make(env_id)
    obs, info = env.reset(seed=4)
    status, body = http(server.url, "/reset", {"seed": 4, "env": env_id})
    assert status == 200
    # the top-level metadata is the observation's (OpenEnv 0.10's StepResult.metadata); the
    # 0.3.0 wire model predates it, and accepts the rest
    assert body["metadata"] == body["observation"]["metadata"]
    ResetResponse.model_validate({k: v for k, v in body.items() if k != "metadata"})
    sid = body["observation"]["session_id"]
    assert body["observation"]["prompt"] == obs
    assert body["observation"]["metadata"]["anchor"] == info["anchor"]
    text = responses(env_id, info, random.Random(0))
    obs, reward, *_ = env.step(text)
    status, body = http(server.url, "/step", {"session_id": sid, "action": {"response": text}})
    assert status == 200
    assert body["metadata"] == body["observation"]["metadata"]
    StepResponse.model_validate({k: v for k, v in body.items() if k != "metadata"})
    assert body["observation"]["prompt"] == obs and body["reward"] == reward
    status, state = http(server.url, f"/state?session_id={sid}")
    assert status == 200 and state["step_count"] == 1 and state["env"] == env_id
    assert http(server.url, "/close", {"session_id": sid}) == (200, {"closed": sid})
    status, err = http(server.url, "/step", {"session_id": sid, "action": {"response": text}})
    assert status == 404 and err["code"] == "SESSION_ERROR"


def test_task_id_and_split_are_honoured(server):
    env = gym.make("arl/Sokoban-v0")
    tid = env.unwrapped.list_tasks("test", limit=3)[2]
    obs, info = env.reset(options={"task_id": tid, "split": "test"})
    with GenericEnvClient(base_url=server.url).sync() as client:
        r = client.reset(task_id=tid, split="test")
    assert r.observation["prompt"] == obs and r.observation["metadata"]["task_id"] == tid
    held = len(server.app.sessions)
    with GenericEnvClient(base_url=server.url).sync() as client, pytest.raises(RuntimeError,
                                                                                match="task"):
        client.reset(task_id="no-such-task")
    status, err = http(server.url, "/reset", {"task_id": "no-such-task"})
    assert status == 400 and err["code"] == "INVALID_REQUEST" and "no-such-task" in err["detail"]
    assert len(server.app.sessions) == held  # failed first resets keep no session


def test_differential_200_sokoban_episodes(server):
    with GenericEnvClient(base_url=server.url).sync() as client:
        for seed in range(200):
            play_both(client, "arl/Sokoban-v0", seed=seed, max_steps=6, rng_seed=1000 + seed)


@pytest.mark.slow
@pytest.mark.parametrize("env_id,episodes", [("arl/WebShop-v0", 200), ("arl/TIRMath-v0", 200),
                                             ("arl/ALFWorld-v0", 20)])
def test_differential_other_envs(server, env_id, episodes):
    with GenericEnvClient(base_url=server.url).sync() as client:
        for seed in range(episodes):
            play_both(client, env_id, seed=seed, max_steps=5, rng_seed=seed)


def test_differential_tir_code_cells(server):
    """TIR Math with code cells: the sandbox's output reaches the prompt alike (20 episodes)."""
    with GenericEnvClient(base_url=server.url).sync() as client:
        for seed in range(20):
            play_both(client, "arl/TIRMath-v0", seed=seed, max_steps=3, rng_seed=seed, code=True)


def test_bad_requests_get_4xx_json(server):
    url = server.url
    status, err = http(url, "/reset", raw=b"{not json")
    assert status == 400 and err["code"] == "INVALID_JSON"
    status, err = http(url, "/reset", {"seed": 1, "sede": 2})
    assert status == 422 and "sede" in err["detail"]
    status, err = http(url, "/reset", {"seed": -1})
    assert status == 422 and "seed" in err["detail"]
    status, err = http(url, "/reset", {"env": "arl/Sokoban-v9"})
    assert status == 404 and err["code"] == "UNKNOWN_ENV" and "arl/Sokoban-v0" in err["detail"]
    status, err = http(url, "/step", {"session_id": "x" * 32, "action": {"response": "up"}})
    assert status == 404 and err["code"] == "SESSION_ERROR"
    status, err = http(url, "/step", {"action": {"response": "up"}})
    assert status == 400 and "session_id" in err["detail"]
    assert raw_post(url, b"Content-Length: %d\r\n\r\n{" % (2 << 20)).startswith(b"HTTP/1.1 413")
    def chunk(n: int) -> bytes:
        return b"%x\r\n%s\r\n" % (n, b" " * n)

    # no length given: counted as read, refused at the byte past max_body (1 MiB)
    reply = raw_post(url, b"Transfer-Encoding: chunked\r\n\r\n" + chunk(1 << 19)
                     + chunk((1 << 19) + 1))
    assert reply.startswith(b"HTTP/1.1 413") and b"PAYLOAD_TOO_LARGE" in reply
    status, err = http(url, "/reset", raw=b"{}", headers={"Content-Type": "text/plain"})
    assert status == 415
    status, err = http(url, "/reset", {}, headers={"Origin": "http://evil.example"})
    assert status == 403 and err["code"] == "FORBIDDEN"
    status, err = http(url, "/nope")
    assert status == 404 and err["code"] == "NOT_FOUND"
    status, _ = http(url, "/health")
    assert status == 200
    with GenericEnvClient(base_url=url).sync() as client:
        with pytest.raises(RuntimeError, match="reset"):
            client.step({"response": "up"})  # before any reset
        client.reset(seed=0)
        with pytest.raises(RuntimeError, match="response"):
            client.step({"text": "up"})
        with pytest.raises(RuntimeError, match="UNKNOWN_ENV"):
            client.reset(env="arl/Nope-v0")
        assert client.step({"response": "<think>a</think><action>up</action>"}).done is False


def test_ws_oversized_message_closes_the_connection(server):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        # the server closes as soon as it reads the frame's length; on a busy machine that can
        # happen while the client is still sending, so the send itself may see the close
        with pytest.raises(ConnectionClosed) as exc:
            ws.send(json.dumps({"type": "step", "data": {"response": "x" * (2 << 20)}}))
            ws.recv(timeout=10)
        if exc.value.rcvd is not None:  # the close frame arrived before the socket went away
            assert exc.value.rcvd.code == 1009  # message too big
        # malformed JSON on a fresh connection: an error message, the connection stays usable
    with connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send("{oops")
        reply = json.loads(ws.recv(timeout=10))
        assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "dance"}))
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "UNKNOWN_TYPE"


def test_max_sessions_refused_with_a_clear_error():
    with EnvServer({"arl/Sokoban-v0": {}}, max_sessions=2) as srv:
        a, b = (GenericEnvClient(base_url=srv.url).sync() for _ in range(2))
        with a, b:
            a.reset(seed=0)
            b.reset(seed=1)
            status, err = http(srv.url, "/reset", {"seed": 2})
            assert status == 503 and "max_sessions=2" in err["detail"]
            with GenericEnvClient(base_url=srv.url).sync() as c, pytest.raises(
                    RuntimeError, match="CAPACITY_REACHED"):
                c.reset(seed=2)
        # closing the connections frees the slots
        with GenericEnvClient(base_url=srv.url).sync() as c:
            assert c.reset(seed=2).done is False


def test_idle_sessions_expire():
    with EnvServer({"arl/Sokoban-v0": {}}, ttl=0.3) as srv:
        status, body = http(srv.url, "/reset", {"seed": 0})
        sid = body["observation"]["session_id"]
        import time

        deadline = time.monotonic() + 10
        while srv.app.sessions and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not srv.app.sessions and srv.app.expired == 1
        status, err = http(srv.url, "/step", {"session_id": sid, "action": {"response": "up"}})
        assert status == 404 and "expired" in err["detail"]


def test_token_required_and_checked():
    token = "s3cret-token-0123456789"
    with EnvServer({"arl/Sokoban-v0": {}}, token=token) as srv:
        status, err = http(srv.url, "/health")
        assert status == 401 and err["code"] == "UNAUTHORIZED"
        status, _ = http(srv.url, "/health", headers={"Authorization": "Bearer wrong-token"})
        assert status == 401
        status, _ = http(srv.url, "/health", headers={"Authorization": f"Bearer {token}"})
        assert status == 200
        with pytest.raises(ConnectionError, match="403"):
            GenericEnvClient(base_url=srv.url).sync().reset(seed=0)
        # OpenEnv's client with the token in the URL (websockets sends it as HTTP Basic)
        authed = srv.url.replace("http://", f"http://arl:{token}@")
        with GenericEnvClient(base_url=authed).sync() as client:
            assert client.reset(seed=0).done is False


def test_non_loopback_bind_needs_token_or_insecure():
    from arlgym.errors import ConfigError

    with pytest.raises(ConfigError, match="--token"):
        EnvServer({"arl/Sokoban-v0": {}}, host="0.0.0.0")
    with pytest.raises(ConfigError, match="too short"):
        EnvServer({"arl/Sokoban-v0": {}}, token="short")
    srv = EnvServer({"arl/Sokoban-v0": {}}, host="0.0.0.0", insecure=True)
    srv.stop()


def test_session_ids_are_unguessable(server):
    ids = set()
    for _ in range(5):
        _, body = http(server.url, "/reset", {"seed": 0})
        sid = body["observation"]["session_id"]
        assert len(sid) >= 32
        ids.add(sid)
        http(server.url, "/close", {"session_id": sid})
    assert len(ids) == 5


def test_dead_env_worker_is_reported_and_replaced(server):
    """ALFWorld runs in worker processes: killing one mid-episode fails that step with a JSON
    error naming the worker, and the next reset starts a fresh worker."""
    import os
    import signal

    with GenericEnvClient(base_url=server.url).sync() as client:
        client.reset(seed=1, env="arl/ALFWorld-v0")
        host = server._hosts["arl/ALFWorld-v0"]
        for pid in host.pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="ENV_WORKER_FAILED"):
            client.step({"response": "<think>t</think><action>look</action>"})
        r = client.reset(seed=1, env="arl/ALFWorld-v0")
        assert r.done is False and r.observation["metadata"]["step"] == 0


def test_http_session_reuse_and_ws_state(server):
    status, body = http(server.url, "/reset", {"seed": 1})
    sid = body["observation"]["session_id"]
    env = gym.make("arl/Sokoban-v0")
    obs, _ = env.reset(seed=2)
    status, body = http(server.url, "/reset", {"seed": 2, "session_id": sid})
    assert status == 200 and body["observation"]["session_id"] == sid
    assert body["observation"]["prompt"] == obs
    http(server.url, "/close", {"session_id": sid})
    with GenericEnvClient(base_url=server.url).sync() as client:
        client.reset(seed=5, episode_id="ep-1")
        state = client.state()
        assert state["episode_id"] == "ep-1" and state["step_count"] == 0
        # a WebSocket session is not reachable over HTTP, even with its id
        status, err = http(server.url, f"/state?session_id={state['session_id']}")
        assert status == 404 and err["code"] == "SESSION_ERROR"


def test_cli_user_errors_exit_2_with_one_line(capsys):
    from arlgym.cli import main

    assert main(["serve", "--env", "arl/Sokoban-v0", "--env-kwarg", "dim_rom=7"]) == 2
    err = capsys.readouterr().err
    assert "dim_rom" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["serve", "--env", "arl/Sokoban-v0", "--env", "arl/TIRMath-v0",
                 "--env-kwarg", "max_steps=3"]) == 2
    assert "arl/Sokoban-v0:max_steps=3" in capsys.readouterr().err
    assert main(["serve", "--env", "arl/Sokoban-v1"]) == 2
    assert "arl/Sokoban-v0" in capsys.readouterr().err  # did you mean


def test_env_kwargs_per_env():
    from arlgym.serve.cli import parse_env_kwargs

    got = parse_env_kwargs(["arl/Sokoban-v0", "arl/TIRMath-v0"],
                           ["arl/Sokoban-v0:dim_room=(7, 7)", "arl/TIRMath-v0:max_steps=3"])
    assert got == {"arl/Sokoban-v0": {"dim_room": (7, 7)}, "arl/TIRMath-v0": {"max_steps": 3}}
    assert parse_env_kwargs(["arl/Sokoban-v0"], ["num_boxes=2"]) == {
        "arl/Sokoban-v0": {"num_boxes": 2}}
