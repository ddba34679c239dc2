"""The verifiers adapter (``arlgym_verifiers``) runs episodes through the real verifiers package:
verifiers' own env loader, its interception server and its chat-loop harness program (a
subprocess, which calls the model), against an OpenAI-compatible chat endpoint served on
loopback by uvicorn. The model there is scripted: it replays the conversation on its own copy
of the env and answers with the env's expert move, except one malformed reply per episode, so
both the task reward and the format penalty appear. The rewards verifiers records equal the
in-process episode's for the same seeds, with the env in process and on an ``arlgym serve``
server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

try:  # the verifiers extra, part of the dev install (`make test`, CI)
    import verifiers.v1 as vf
except ImportError as e:  # a machine without it skips, except CI, where it is part of the job
    if os.environ.get("ARLGYM_REQUIRE_VERIFIERS") == "1":
        raise
    pytest.skip(f"verifiers is not installed ({e}); pip install 'arlgym[verifiers]'",
                allow_module_level=True)

from arlgym.serve.server import EnvServer  # noqa: E402
from arlgym.serve.verifiers_env import ArlgymEnv, load_environment  # noqa: E402

ENV, KWARGS, SEEDS = "arl/Sokoban-v0", {"max_steps": 6}, (3, 4)
MALFORMED = "I push the box up."  # no <think>/<action>: the env's format penalty applies


class ScriptedModel:
    """The policy behind the chat endpoint: a pure function of the conversation."""

    def __init__(self, seeds: tuple[int, ...]) -> None:
        self.seed_of = {}
        for seed in seeds:
            env = gym.make(ENV, **KWARGS)
            self.seed_of[env.reset(seed=seed)[0]] = seed
            env.close()
        #: conversations whose user messages were not the env's observations, step by step
        self.mismatches: list[int] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        users = [m["content"] for m in messages if m["role"] == "user"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        env = gym.make(ENV, **KWARGS)
        env.reset(seed=self.seed_of[users[0]])
        for turn, reply in enumerate(replies, start=1):
            obs, *_ = env.step(reply)
            if users[turn] != obs:
                self.mismatches.append(turn)
        answer = MALFORMED if len(replies) == 1 else env.unwrapped.expert_response()
        env.close()
        return answer


def chat_app(model: ScriptedModel):
    """An OpenAI-compatible ``/v1/chat/completions`` (streamed or not) as a plain ASGI app."""

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        text = model(request["messages"])
        head = {"id": "c", "created": 0, "model": request.get("model", "scripted")}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not request.get("stream"):
            out = {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text},
                 "finish_reason": "stop"}]}
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": json.dumps(out).encode()})
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        events = [{**chunk, "choices": [{"index": 0, "finish_reason": None, "delta": {
                      "role": "assistant", "content": text}}]},
                  {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                  {**chunk, "choices": [], "usage": usage}]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for event in events:
            await send({"type": "http.response.body", "more_body": True,
                        "body": f"data: {json.dumps(event)}\n\n".encode()})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


@pytest.fixture(scope="module")
def endpoint():
    import uvicorn

    model = ScriptedModel(SEEDS)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(chat_app(model), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", model
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def uv_on_path(monkeypatch):
    """verifiers runs its chat program with uv; the one installed beside this Python."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ARLGYM_TEST_MODEL_KEY", "none")


def in_process(model: ScriptedModel, seed: int) -> dict[str, float]:
    """The same episode played here: the messages verifiers' chat loop would send."""
    env = gym.make(ENV, **KWARGS)
    obs, _ = env.reset(seed=seed)
    messages = [{"role": "user", "content": obs}]
    out = {"reward": 0.0, "task_reward": 0.0, "format_penalty": 0.0, "steps": 0}
    while True:
        reply = model(messages)
        obs, reward, terminated, truncated, info = env.step(reply)
        out["reward"] += reward
        out["task_reward"] += info["task_reward"]
        out["format_penalty"] += info["format_penalty"]
        out["steps"] += 1
        out["won"] = float(info["won"])
        if terminated or truncated:
            return out
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]


def play(env: ArlgymEnv, url: str) -> list[Any]:
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
        base_url=url, api_key_var="ARLGYM_TEST_MODEL_KEY"))

    async def run() -> list[Any]:
        async with env.serving():
            return [await env.run_episode(task, ctx) for task in env.taskset]

    return asyncio.run(run())


def check(episodes: list[Any], model: ScriptedModel) -> None:
    assert len(episodes) == len(SEEDS) and model.mismatches == []
    for seed, episode in zip(SEEDS, episodes, strict=True):
        assert episode.ok, episode.errors
        (trace,) = episode.traces
        want = in_process(model, seed)
        assert trace.rewards["arlgym_reward"].score == pytest.approx(want["reward"], abs=1e-12)
        for key in ("task_reward", "format_penalty", "steps", "won"):
            assert trace.metrics[key] == pytest.approx(want[key], abs=1e-12), key
        assert want["format_penalty"] > 0 and want["won"] == 1.0  # both parts were exercised
        assert trace.num_turns == want["steps"]
        assert len(trace.info["anchors"]) == want["steps"] + 1


@pytest.mark.slow
def test_verifiers_episodes_in_process_equal_the_env(endpoint):
    url, model = endpoint
    env = load_environment(ENV, seed=SEEDS[0], num_tasks=len(SEEDS), env_kwargs=KWARGS)
    assert isinstance(env, vf.Env) and type(env).__name__ == "ArlgymEnv"
    check(play(env, url), model)


@pytest.mark.slow
def test_verifiers_episodes_on_a_server_equal_the_env(endpoint):
    url, model = endpoint
    with EnvServer({ENV: KWARGS}) as server:
        env = load_environment(ENV, server=server.url, seed=SEEDS[0], num_tasks=len(SEEDS),
                               env_kwargs=KWARGS)
        check(play(env, url), model)
        assert server.app.sessions == {}  # every episode closed its session


def test_load_environment_resolves_through_verifiers():
    """The taskset id resolves through verifiers' own loaders to the adapter's classes, and
    each task's prompt is the env's reset observation for its seed."""
    from verifiers.v1.utils.loaders import default_harness_id, environment_class, taskset_class

    assert environment_class("arlgym-verifiers") is ArlgymEnv
    assert taskset_class("arlgym-verifiers").__name__ == "ArlgymTaskset"
    assert default_harness_id("arlgym-verifiers") == "arlgym-verifiers"  # the plain chat loop
    env = load_environment(ENV, seed=7, num_tasks=2, env_kwargs=KWARGS)
    prompts = [task.data.prompt for task in env.taskset]
    direct = gym.make(ENV, **KWARGS)
    assert prompts == [direct.reset(seed=7)[0], direct.reset(seed=8)[0]]
    from arlgym.errors import ConfigError

    with pytest.raises(ConfigError, match="is not an arlgym env"):
        load_environment("arl/Sokoban-v9")
