"""arlgym text envs as a verifiers environment (``verifiers==0.4.0``, its ``verifiers.v1`` stack).

verifiers 0.4 composes an environment from a *taskset* (the tasks: here one per seed, whose
prompt is the env's first observation), an *env* (how one task becomes one episode: here
:class:`ArlgymEnv`, whose ``run()`` steps the arlgym env as the conversation's user, the way
verifiers' own TextArena and OpenEnv tasksets step their game engines) and a *harness* (the
program that talks to the model: the plain chat loop, ``NullHarness``, exported so that it is
the default). verifiers finds all three by the taskset id ``arlgym-verifiers``, the top-level
package :mod:`arlgym_verifiers` that re-exports them: ``vf-eval arlgym-verifiers
--env.taskset.env arl/Sokoban-v0 ...`` or, from Python, :func:`load_environment`.

How an episode maps:

* the first user message is the env's reset observation for the task's seed (the task's
  prompt); every assistant message is the raw response the env steps (``<think>…</think>
  <action>…</action>``, parsed by the env exactly as in process); each next user message is
  the env's next observation. A terminated or truncated episode ends the conversation.
* reward: ``arlgym_reward`` = the episode's summed env reward, i.e. task reward minus format
  penalty, each step as the env computes it; ``task_reward``, ``format_penalty`` (summed),
  ``won``, ``score`` and ``steps`` are recorded as metrics, so the two parts stay separate.
* the env runs in this process (``server=None``) or as a session on an ``arlgym serve``
  server (``server="http://host:8000"``, token from ``$ARLGYM_SERVE_TOKEN``).

Not carried: GiGPO's anchors (the per-step ``anchor`` hashes are in the env's info, but a
verifiers trace has no per-turn field a trainer reads them from; they are listed in
``trace.info["anchors"]`` for inspection only), and vision envs (text envs only). verifiers
keeps the whole conversation in the model's context, whereas arlgym's own trainer sends each
turn's prompt alone (an arlgym prompt already shows the history the env chooses to show).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig

import arlgym
from arlgym.core.validation import did_you_mean, make_checked_env
from arlgym.envs.servers import TOKEN_VARIABLE
from arlgym.errors import ConfigError
from arlgym.serve.client import RemoteEnv

__all__ = ["ArlgymTasksetConfig", "ArlgymData", "ArlgymTask", "ArlgymTaskset",
           "ArlgymEnvConfig", "ArlgymEnv", "NullHarness", "NullHarnessConfig",
           "load_environment", "TASKSET_ID", "make_env"]

#: the taskset id verifiers imports the classes by (the package ``arlgym_verifiers``)
TASKSET_ID = "arlgym-verifiers"


class ArlgymTasksetConfig(vf.TasksetConfig):
    """Which env, where it runs, and which seeds (``--env.taskset.<field>`` on verifiers' CLI)."""

    env: str = "arl/Sokoban-v0"
    """A registered arlgym text env id (`arlgym envs` lists them)."""
    server: str | None = None
    """An `arlgym serve` URL to play on; None: the env runs in this process."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keywords for gymnasium.make (remote: must equal the server's --env-kwarg)."""
    seed: int = 0
    """Task i resets the env with seed + i: the task gymnasium.make(env).reset(seed=seed + i) shows."""
    num_tasks: int = 16
    """How many seeded tasks the taskset holds."""
    split: str | None = None
    """Task split passed as a reset option (None: the env's default, train)."""


class ArlgymData(vf.TaskData):
    info: dict[str, Any]
    """env, seed, server, env_kwargs, split: what the episode is replayed from."""


class ArlgymTask(vf.Task[ArlgymData, vf.State, vf.TaskConfig]):
    pass


class ArlgymEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The model's seat. Its chat loop runs as a local subprocess by default (it executes no
    code: the env is stepped here, by :meth:`ArlgymEnv.run`), not in a remote sandbox."""


def make_env(info: dict[str, Any]) -> Any:
    """The episode's env: ``gymnasium.make`` here, or a session on the server."""
    if info.get("server"):
        return RemoteEnv(info["server"], info["env"], info.get("env_kwargs") or {},
                         token=os.environ.get(TOKEN_VARIABLE) or None)
    return make_checked_env(info["env"], dict(info.get("env_kwargs") or {}))


def _reset(env: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    options = {"split": info["split"]} if info.get("split") else None
    return env.reset(seed=info["seed"], options=options)


def _text(obs: Any) -> str:
    if not isinstance(obs, str):
        raise ConfigError("the verifiers adapter plays text envs only; this env's observation "
                          f"is {type(obs).__name__} (a vision env). Fix: pick a text env")
    return obs


class ArlgymEnv(vf.Env[ArlgymEnvConfig]):
    """One task = one arlgym episode; the env is the conversation's user (module docstring)."""

    async def run(self, task: Any, agents: Any) -> None:
        info = task.data.info
        env = await asyncio.to_thread(make_env, info)
        totals = {"reward": 0.0, "task_reward": 0.0, "format_penalty": 0.0}
        last: dict[str, Any] = {}
        anchors: list[str] = []
        steps = 0
        try:
            obs, first = await asyncio.to_thread(_reset, env, info)
            anchors.append(str(first.get("anchor", "")))
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()  # the task's prompt is the reset observation
                while not segment.terminated:
                    obs, reward, terminated, truncated, last = await asyncio.to_thread(
                        env.step, segment.last_reply)
                    steps += 1
                    totals["reward"] += float(reward)
                    totals["task_reward"] += float(last.get("task_reward", reward))
                    totals["format_penalty"] += float(last.get("format_penalty", 0.0))
                    anchors.append(str(last.get("anchor", "")))
                    if terminated or truncated:
                        break
                    segment = await interaction.turn(_text(obs))
        finally:
            await asyncio.to_thread(env.close)
        trace = interaction.trace
        trace.record_reward("arlgym_reward", totals["reward"])
        trace.record_metrics({"task_reward": totals["task_reward"],
                              "format_penalty": totals["format_penalty"],
                              "won": float(bool(last.get("won", False))),
                              "score": float(last.get("score", 0.0)), "steps": float(steps)})
        trace.info["task_id"] = first.get("task_id")
        trace.info["anchors"] = anchors


class ArlgymTaskset(vf.Taskset[ArlgymTask, ArlgymTasksetConfig]):
    """``num_tasks`` seeded episodes of one env; each prompt is the env's reset observation."""

    def load(self) -> Iterator[ArlgymTask]:
        cfg = self.config
        if cfg.num_tasks < 1:
            raise ConfigError(f"num_tasks={cfg.num_tasks} is invalid: expected >= 1")
        base = {"env": cfg.env, "server": cfg.server, "env_kwargs": dict(cfg.env_kwargs),
                "split": cfg.split}
        env = make_env(base)
        try:
            for i in range(cfg.num_tasks):
                info = {**base, "seed": cfg.seed + i}
                obs, first = _reset(env, info)
                yield ArlgymTask(ArlgymData(name=f"{cfg.env}#{cfg.seed + i}", prompt=_text(obs),
                                            id=str(first.get("task_id", "")) or None, info=info),
                                 cfg.task)
        finally:
            env.close()


def load_environment(env: str = "arl/Sokoban-v0", *, server: str | None = None,
                     num_tasks: int = 16, seed: int = 0, split: str | None = None,
                     env_kwargs: dict[str, Any] | None = None, **config: Any) -> ArlgymEnv:
    """A verifiers environment playing ``env`` (in process, or on ``server``).

    Builds the env config verifiers would build from ``vf-eval arlgym-verifiers
    --env.taskset.env ...`` and loads it through verifiers' own ``load_environment``, so the
    result is exactly what verifiers' eval and env server run. ``config``: further
    ``EnvConfig`` fields (e.g. ``player={"max_turns": 20}``).
    """
    if env not in arlgym.ENV_IDS:
        raise ConfigError(f"env={env!r} is not an arlgym env{did_you_mean(env, arlgym.ENV_IDS)}"
                          f"; ids: {sorted(arlgym.ENV_IDS)}")
    taskset = {"id": TASKSET_ID, "env": env, "server": server, "num_tasks": num_tasks,
               "seed": seed, "split": split, "env_kwargs": dict(env_kwargs or {})}
    return vf.load_environment(vf.resolve_env_config({"taskset": taskset, **config}))
