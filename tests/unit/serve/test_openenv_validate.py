"""``openenv validate --url`` against ``arlgym serve``: OpenEnv's own runtime validator
(``openenv.cli._validation.validate_running_environment``, the function behind
``openenv validate --url``; the same code in ``openenv-core==0.3.0``, which the dev extra holds,
and in ``openenv==0.10.0``) passes its 6 checks for every text env, in both modes; each server
then plays one MCP turn of its env equal to the in-process one."""

from __future__ import annotations

import json
import urllib.request

import gymnasium as gym
import pytest
from openenv.cli._validation import validate_running_environment

import arlgym  # noqa: F401
from arlgym.serve.codec import jsonable
from arlgym.serve.server import EnvServer

CRITERIA = {"openapi_version_available", "health_endpoint", "metadata_endpoint",
            "schema_endpoint", "mcp_endpoint", "mode_endpoint_consistency"}


def rpc(url: str, method: str, params: dict) -> dict:
    req = urllib.request.Request(url + "/mcp", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps(
        {"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("mode", ["simulation", "production"])
@pytest.mark.parametrize("env_id", ["arl/Sokoban-v0", "arl/WebShop-v0", "arl/ALFWorld-v0",
                                    "arl/TIRMath-v0"])
def test_openenv_validate_passes_6_of_6(env_id, mode):
    with EnvServer({env_id: {}}, mode=mode, workers=1) as srv:
        report = validate_running_environment(srv.url, timeout_s=60)
        assert report["summary"]["failed_criteria"] == []
        assert {c["id"] for c in report["criteria"] if c["passed"]} == CRITERIA
        assert report["passed"] and report["mode"] == mode
        assert report["standard_profile"] == "openenv-http/1.x"
        # the server plays the env through MCP as in process
        env = gym.make(env_id)
        obs, info = env.reset(seed=3)
        sid = rpc(srv.url, "openenv/session/create", {})["result"]["session_id"]
        first = rpc(srv.url, "tools/call", {"name": "start_episode", "arguments": {"seed": 3},
                                            "session_id": sid})["result"]["data"]
        assert first["observation"]["prompt"] == obs
        move = (info.get("admissible_actions") or ["look"])[0]
        obs, reward, term, trunc, info = env.step(f"<think></think><action>{move}</action>")
        step = rpc(srv.url, "tools/call", {"name": "act", "arguments": {"action": move},
                                           "session_id": sid})["result"]["data"]
        assert step["observation"]["prompt"] == obs and step["reward"] == reward
        meta = dict(step["metadata"])
        assert (meta.pop("terminated"), meta.pop("truncated")) == (term, trunc)
        assert meta == jsonable(info)
        env.close()
