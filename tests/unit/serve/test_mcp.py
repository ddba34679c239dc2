"""MCP on ``arlgym serve``, driven by real clients on loopback: OpenEnv's ``MCPToolClient``
(``openenv-core``; over ``POST /mcp`` with ``session_id`` and over ``/ws`` steps), OpenEnv
0.10's wire flow (``openenv/session/create``, ``/ws?session_id=``, ``tools/call``), WebSocket
``/mcp``, ``{"type": "mcp"}`` messages on ``/ws``, and the official ``mcp`` SDK client over
streamable HTTP. Seeded Sokoban episodes played through each equal the in-process ones."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.error
import urllib.request
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from websockets.sync.client import connect

import arlgym  # noqa: F401
from arlgym.serve.codec import decode_png, jsonable
from arlgym.serve.server import EnvServer

ENV = "arl/Sokoban-v0"


@pytest.fixture(scope="module")
def server():
    with EnvServer({ENV: {}}, max_sessions=64) as srv:
        yield srv


def gone(srv: EnvServer, sid: str) -> bool:
    """Whether the server dropped session ``sid`` (within 10 s: it handles closes async)."""
    import time

    deadline = time.monotonic() + 10
    while sid in srv.app.sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    return sid not in srv.app.sessions


def rpc(url: str, method: str, params: dict | None = None, *, raw: bytes | None = None,
        headers: dict[str, str] | None = None, rid: Any = 1) -> tuple[int, Any]:
    """One JSON-RPC request on ``POST /mcp``: ``(HTTP status, decoded body or None)``."""
    body = raw if raw is not None else json.dumps(
        {"jsonrpc": "2.0", "method": method, "params": params or {}, "id": rid}).encode()
    req = urllib.request.Request(url + "/mcp", data=body, method="POST", headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
            return resp.status, json.loads(data) if data else None
    except urllib.error.HTTPError as e:
        data = e.read()
        return e.code, json.loads(data) if data else None


def response_text(info: dict, rng: random.Random) -> str:
    """A response a policy could give: an admissible move, a made-up one, or a bad format."""
    roll = rng.random()
    if roll < 0.15:
        return "I will just move without tags"
    moves = info.get("admissible_actions") or ["up"]
    action = "dance" if roll < 0.25 else rng.choice(moves)
    return f"<think>step {info['step']}</think><action>{action}</action>"


def check_step(data: dict, obs: str, reward: float | None, term: bool, trunc: bool,
               info: dict) -> None:
    """An MCP tool's step result equals the in-process step, every info key included."""
    meta = dict(data["observation"]["metadata"])
    assert (meta.pop("terminated"), meta.pop("truncated")) == (term, trunc)
    assert meta == jsonable(info)
    assert data["metadata"] == data["observation"]["metadata"]
    assert data["observation"]["prompt"] == obs
    assert data["reward"] == reward and data["done"] == (term or trunc)


def play_episodes(call, episodes: int, max_steps: int = 8, seed0: int = 0) -> int:
    """Seeded episodes through ``call(tool, arguments) -> step result``, each step checked
    against the in-process env; returns the number of steps played."""
    env, steps = gym.make(ENV), 0
    for seed in range(seed0, seed0 + episodes):
        obs, info = env.reset(seed=seed)
        check_step(call("start_episode", {"seed": seed}), obs, None, False, False, info)
        rng = random.Random(seed)
        for _ in range(max_steps):
            text = response_text(info, rng)
            obs, reward, term, trunc, info = env.step(text)
            check_step(call("act", {"response": text}), obs, reward, term, trunc, info)
            steps += 1
            if term or trunc:
                break
    env.close()
    return steps


def test_openenv_mcp_tool_client_plays_20_episodes_over_http_mcp(server):
    """OpenEnv's MCPToolClient in production mode: ``openenv/session/create``, then every
    ``tools/call`` on ``POST /mcp`` with that ``session_id``."""
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=server.url).sync() as client:
        client._async.use_production_mode = True  # openenv-core 0.3.0: HTTP MCP is opt-in
        tools = {t.name: t for t in client.list_tools()}
        assert set(tools) == {"start_episode", "act"}
        assert tools["act"].input_schema["properties"]["response"]["type"] == "string"
        assert play_episodes(lambda name, args: client.call_tool(name, **args), 20) > 60
        with pytest.raises(RuntimeError, match="Tool not found: reset.*reserves"):
            client.call_tool("reset")
        with pytest.raises(RuntimeError, match="exactly one of 'response'"):
            client.call_tool("act", response="x", action="up")


def test_openenv_mcp_tool_client_over_ws_steps(server):
    """OpenEnv's MCPToolClient outside production mode sends ``ListToolsAction`` and
    ``CallToolAction`` as ``/ws`` steps: they play the same episodes."""
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=server.url).sync() as client:
        assert [t.name for t in client.list_tools()] == ["start_episode", "act"]
        assert play_episodes(lambda name, args: client.call_tool(name, **args), 5) > 10
        with pytest.raises(RuntimeError, match="tool_not_found"):
            client.call_tool("step", response="up")


def test_openenv_010_flow_session_create_ws_attach_http_tools_call(server):
    """OpenEnv 0.10's MCPToolClient: an HTTP MCP session, a WebSocket attached to it
    (``/ws?session_id=``) for reset, ``tools/call`` on ``POST /mcp`` for the moves, and
    ``openenv/session/close`` (deferred while the socket is attached)."""
    status, body = rpc(server.url, "openenv/session/create")
    assert status == 200 and body["id"] == 1
    sid = body["result"]["session_id"]
    env = gym.make(ENV)
    obs, info = env.reset(seed=9)
    with connect(server.url.replace("http://", "ws://") + f"/ws?session_id={sid}") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 9}}))
        reset = json.loads(ws.recv(timeout=30))["data"]
        check_step(reset, obs, None, False, False, info)
        assert reset["observation"]["session_id"] == sid
        rng = random.Random(9)
        for _ in range(4):
            text = response_text(info, rng)
            obs, reward, term, trunc, info = env.step(text)
            status, body = rpc(server.url, "tools/call", {
                "name": "act", "arguments": {"response": text}, "session_id": sid})
            assert status == 200
            check_step(body["result"]["data"], obs, reward, term, trunc, info)
            assert body["result"]["structuredContent"] == body["result"]["data"]
            assert body["result"]["isError"] is False
            assert body["result"]["content"][0]["text"].startswith(obs)
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["data"]["step_count"] == 4
        status, body = rpc(server.url, "openenv/session/close", {"session_id": sid})
        assert body["result"] == {"session_id": sid, "closed": False, "closing": True}
    assert gone(server, sid)  # closed when its socket went
    _, body = rpc(server.url, "tools/list", {"session_id": sid})
    assert body["error"]["code"] == -32602 and "Unknown session_id" in body["error"]["message"]


def test_ws_mcp_endpoint_and_mcp_messages_on_ws(server):
    """WebSocket ``/mcp``: JSON-RPC frames on the connection's own session (notifications get
    no answer); ``{"type": "mcp"}`` on ``/ws``: JSON-RPC on that socket's session."""
    ws_base = server.url.replace("http://", "ws://")
    with connect(ws_base + "/mcp") as ws:
        def ask(method: str, params: dict | None = None, rid: int = 1) -> dict:
            ws.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params or {},
                                "id": rid}))
            return json.loads(ws.recv(timeout=30))

        ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        assert ask("ping", rid=7) == {"jsonrpc": "2.0", "id": 7, "result": {}}
        assert [t["name"] for t in ask("tools/list")["result"]["tools"]] == ["start_episode",
                                                                            "act"]
        steps = play_episodes(lambda name, args: ask("tools/call", {
            "name": name, "arguments": args})["result"]["data"], 3)
        assert steps > 5
        ws.send("{oops")
        assert json.loads(ws.recv(timeout=30))["error"]["code"] == -32700
        own = ask("openenv/session/create")["result"]["session_id"]
        err = ask("openenv/session/close", {"session_id": own})["error"]
        assert err["code"] == -32600 and "WebSocket-managed" in err["message"]
    # the socket's session is private: HTTP cannot reach it, and it went with the socket
    assert rpc(server.url, "tools/list", {"session_id": own})[1]["error"]["code"] == -32602
    assert gone(server, own)  # the server handles the socket's close on its own time
    env = gym.make(ENV)
    obs, info = env.reset(seed=4)
    with connect(ws_base + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 4}}))
        json.loads(ws.recv(timeout=30))
        text = "<think>t</think><action>down</action>"
        obs, reward, term, trunc, info = env.step(text)
        ws.send(json.dumps({"type": "mcp", "data": {
            "jsonrpc": "2.0", "method": "tools/call", "id": "a",
            "params": {"name": "act", "arguments": {"response": text}}}}))
        reply = json.loads(ws.recv(timeout=30))
        assert reply["type"] == "mcp" and reply["data"]["id"] == "a"
        check_step(reply["data"]["result"]["data"], obs, reward, term, trunc, info)
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["data"]["step_count"] == 1


def test_json_rpc_errors(server):
    url = server.url
    assert rpc(url, "", raw=b"{}") == (200, {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Invalid Request: a JSON-RPC 2.0 request needs 'jsonrpc': "
        "'2.0' and 'method' (e.g. tools/list)"}})
    assert rpc(url, "", raw=b"{nope")[1]["error"]["code"] == -32700
    assert rpc(url, "", raw=b"[1, 2]")[1]["error"]["code"] == -32600
    _, body = rpc(url, "resources/list", rid="x")
    assert body["id"] == "x" and body["error"]["code"] == -32601
    _, body = rpc(url, "tools/call", {"name": "act", "arguments": {"response": "up"}})
    assert body["error"]["code"] == -32602 and "needs a session" in body["error"]["message"]
    _, body = rpc(url, "tools/call", {"name": "act", "session_id": "x" * 32})
    assert "Unknown session_id" in body["error"]["message"]
    sid = rpc(url, "openenv/session/create")[1]["result"]["session_id"]
    for name, args, match, code in (
            ("acts", {}, "Tool not found: acts (did you mean 'act'?)", -32602),
            ("close", {}, "reserves", -32602),
            ("act", {"response": "up"}, "call the start_episode tool", -32000),  # a state error
            ("act", {"respones": "up"}, "unknown argument 'respones'", -32602),
            ("act", {"action": 3}, "must be a string", -32602),
            ("start_episode", {"seed": -1}, "seed=-1 is invalid", -32602),
            ("start_episode", {"env": "arl/Nope-v0"}, "not hosted", -32602)):
        _, body = rpc(url, "tools/call", {"name": name, "arguments": args, "session_id": sid})
        assert match in body["error"]["message"] and body["error"]["code"] == code, (name, body)
    _, body = rpc(url, "openenv/session/close", {"session_id": sid})
    assert body["result"] == {"session_id": sid, "closed": True}
    _, body = rpc(url, "openenv/session/close", {})
    assert body["error"]["code"] == -32602 and "'session_id' is required" in \
        body["error"]["message"]
    status, body = rpc(url, "tools/list", headers={"Mcp-Session-Id": "gone"})
    assert status == 404  # streamable HTTP: an unknown MCP session means initialize again
    status, body = rpc(url, "", raw=b"{}", headers={"Origin": "http://evil.example"})
    assert status == 403 and body["code"] == "FORBIDDEN"


def test_session_create_respects_max_sessions():
    with EnvServer({ENV: {}}, max_sessions=1) as srv:
        assert "result" in rpc(srv.url, "openenv/session/create")[1]
        _, body = rpc(srv.url, "openenv/session/create")
        assert body["error"]["code"] == -32000
        assert body["error"]["data"]["code"] == "CAPACITY_REACHED"


def test_production_mode_plays_over_mcp():
    with EnvServer({ENV: {}}, mode="production") as srv:
        sid = rpc(srv.url, "openenv/session/create")[1]["result"]["session_id"]

        def call(name: str, args: dict) -> dict:
            _, body = rpc(srv.url, "tools/call", {"name": name, "arguments": args,
                                                  "session_id": sid})
            return body["result"]["data"]

        assert play_episodes(call, 3) > 5


async def _sdk_episodes(url: str, episodes: int) -> tuple[int, Any]:
    """The official ``mcp`` client (streamable HTTP): seeded episodes, checked step by step;
    the ``action`` form equals the wrapped response; a refused call is an ``isError`` result."""
    from mcp.client import Client

    async with Client(url + "/mcp") as client:
        assert client.server_info.name == "arlgym"
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["start_episode", "act"]
        results: list = []

        def structured(result: Any) -> dict:
            assert not result.is_error, result.content
            results.append(result)
            return result.structured_content

        async def call(name: str, args: dict) -> dict:
            return structured(await client.call_tool(name, args))

        loop_steps, env = 0, gym.make(ENV)
        for seed in range(episodes):
            obs, info = env.reset(seed=seed)
            check_step(await call("start_episode", {"seed": seed}), obs, None, False, False,
                       info)
            rng = random.Random(seed)
            for k in range(8):
                text = response_text(info, rng)
                args = {"response": text}
                if k % 3 == 2 and info.get("admissible_actions"):  # the move-alone form
                    move = rng.choice(info["admissible_actions"])
                    text, args = f"<think></think><action>{move}</action>", {"action": move}
                obs, reward, term, trunc, info = env.step(text)
                check_step(await call("act", args), obs, reward, term, trunc, info)
                loop_steps += 1
                if term or trunc:
                    break
        env.close()
        # tool errors in an MCP session are results the model reads (isError), not exceptions
        while not results[-1].structured_content["done"]:
            await call("act", {"action": "up"})
        return loop_steps, await client.call_tool("act", {"action": "up"})


def test_mcp_sdk_client_plays_20_episodes_over_streamable_http(server):
    held = len(server.app.sessions)
    steps, refused = asyncio.run(_sdk_episodes(server.url, 20))
    assert steps > 60
    assert refused.is_error and "episode has ended" in refused.content[0].text
    assert len(server.app.sessions) == held  # the client's DELETE ended its MCP session


def test_vision_env_frame_is_an_image_content_block():
    with EnvServer({"arl/SokobanVision-v0": {}}) as srv:
        env = gym.make("arl/SokobanVision-v0")
        obs, _ = env.reset(seed=2)
        sid = rpc(srv.url, "openenv/session/create")[1]["result"]["session_id"]
        for name, args in (("start_episode", {"seed": 2}), ("act", {"action": "left"})):
            if name == "act":
                obs, *_ = env.step("<think></think><action>left</action>")
            _, body = rpc(srv.url, "tools/call", {"name": name, "arguments": args,
                                                  "session_id": sid})
            text, image = body["result"]["content"]
            assert text["type"] == "text" and text["text"].startswith(obs["text"])
            assert image["type"] == "image" and image["mimeType"] == "image/png"
            np.testing.assert_array_equal(decode_png(image["data"]), obs["image"])
