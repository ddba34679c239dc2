"""arlgym envs in TRL's ``GRPOTrainer(environment_factory=...)`` (multi-turn, through tool calls).

TRL builds one environment per rollout, calls ``reset(**row)`` with the dataset row (its string
is appended to the last user message), exposes the env's public methods as tools the model calls
during generation, and scores the rollout with ``get_reward()``. Here:

* ``reset(seed=..., task_id=..., split=...)`` starts the arlgym task that the row's ``seed`` (or
  ``task_id``) names — the same task as ``gymnasium.make(id).reset(seed=seed)`` — and returns
  the env's own first observation with the admissible actions.
* the one tool, ``act(action)``, plays one move: the env steps the well-formed response
  ``<think></think><action>{action}</action>``, so what it executes, its reward and its next
  observation are the env's own. After the episode ends, ``act`` raises (TRL counts a failed
  tool call and shows the model the error).
* ``get_reward()`` is the episode's summed env reward (task reward; 0 when the model never
  acted).

Vision envs (SokobanVision): ``reset`` and ``act`` return TRL's content blocks, the frame as
an image block (a PIL image of the env's exact array) before the text, so a VLM trained
through TRL sees what the env renders; text envs return plain text.

What does not carry over: the ``<think>/<action>`` text format is replaced by TRL's tool-call
format, so the format penalty never applies (a malformed tool call is TRL's tool failure, which
TRL logs); anchors (GiGPO) are in ``self.infos`` but TRL's GRPO has no use for them; the env's
prompt template, which asks for ``<think>/<action>`` text, is not shown — the model sees the
env's observation and the ``act`` tool's schema instead.

    from trl import GRPOConfig, GRPOTrainer
    from arlgym.serve.trl_env import environment_factory, seed_dataset
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=seed_dataset(64),
                          environment_factory=environment_factory("arl/Sokoban-v0"))

With ``server="http://host:8000"`` the episodes run on an ``arlgym serve`` server
(:class:`arlgym.serve.RemoteEnv`) instead of in the trainer's process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arlgym.errors import ConfigError
from arlgym.serve.client import RemoteEnv

__all__ = ["ArlgymTRLEnv", "EnvironmentFactory", "environment_factory", "seed_dataset"]


class ArlgymTRLEnv:
    """One rollout's env for TRL; see the module docstring."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 server: str | None = None, token: str | None = None) -> None:
        if server is None:
            import gymnasium as gym

            self._env = gym.make(env_id, **dict(env_kwargs or {}))
        else:
            self._env = RemoteEnv(server, env_id, env_kwargs, token=token)
        self.env_id = env_id
        self.done = True
        self.episode_return = 0.0
        self.infos: list[dict[str, Any]] = []

    def reset(self, seed: int | None = None, task_id: str | None = None,
              split: str | None = None, **row: Any) -> str | list[dict[str, Any]]:
        """Start the row's task (TRL passes the dataset row; only these keys are read)."""
        options = {k: v for k, v in (("task_id", task_id), ("split", split)) if v is not None}
        obs, info = self._env.reset(seed=None if seed is None else int(seed),
                                    options=options or None)
        self.done, self.episode_return, self.infos = False, 0.0, [info]
        return _content(obs, self._describe(info))

    def act(self, action: str) -> str | list[dict[str, Any]]:
        """Play one move in the environment.

        Args:
            action: the move to play, one of the admissible actions listed in the last
                observation (e.g. "up" in Sokoban).

        Returns:
            What happened: the new observation, the reward and whether the episode is over.
        """
        if self.done:
            raise RuntimeError("the episode is over; no more moves")
        obs, reward, terminated, truncated, info = self._env.step(
            f"<think></think><action>{action}</action>")
        self.episode_return += float(reward)
        self.done = bool(terminated or truncated)
        self.infos.append(info)
        status = "episode over" + (" (solved)" if info.get("won") else "") if self.done else \
            "continue"
        return _content(obs, f"{self._describe(info)}\nReward: {reward:g}. Status: {status}.")

    def get_reward(self) -> float:
        """The episode's summed env reward (TRL calls it once the rollout is complete)."""
        return self.episode_return

    def _close(self) -> None:
        """Close the env (private: every public method would become a tool the model sees).
        TRL pools and reuses its env instances, so few are ever made."""
        self._env.close()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @staticmethod
    def _describe(info: dict[str, Any]) -> str:
        text = str(info.get("raw_observation", ""))
        actions = info.get("admissible_actions")
        if actions:
            text += "\nAdmissible actions: " + ", ".join(actions)
        return text


def _content(obs: Any, text: str) -> str | list[dict[str, Any]]:
    """``text``, or for a vision env (``obs`` a dict with the frame) TRL's content blocks: the
    frame as an image block, then the text. TRL passes a list returned by ``reset`` or a tool
    through as a multimodal message and hands its images to the VLM's processor."""
    if not isinstance(obs, dict) or "image" not in obs:
        return text
    from PIL import Image

    return [{"type": "image", "image": Image.fromarray(obs["image"])},
            {"type": "text", "text": text}]


@dataclass(frozen=True)
class EnvironmentFactory:
    """A picklable zero-argument factory of :class:`ArlgymTRLEnv`: TRL's ``AsyncGRPOTrainer``
    sends ``environment_factory`` to its rollout worker, a spawned process, by pickling it (a
    closure cannot be pickled)."""

    env_id: str
    env_kwargs: dict[str, Any] | None = None
    server: str | None = None
    token: str | None = None

    def __call__(self) -> ArlgymTRLEnv:
        return ArlgymTRLEnv(self.env_id, self.env_kwargs, server=self.server, token=self.token)


def environment_factory(env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                        server: str | None = None,
                        token: str | None = None) -> EnvironmentFactory:
    """A zero-argument, picklable factory for ``GRPOTrainer(environment_factory=...)`` and
    ``AsyncGRPOTrainer`` (whose rollout worker runs in a spawned process)."""
    import gymnasium as gym

    if env_id not in gym.registry:
        raise ConfigError(f"environment_factory: unknown env id {env_id!r}; see `arlgym envs`")
    return EnvironmentFactory(env_id, None if env_kwargs is None else dict(env_kwargs),
                              server=server, token=token)


def seed_dataset(n: int, start: int = 0, instruction: str = "Solve the task with the act tool. "
                 "The current state:\n") -> Any:
    """``n`` TRL rows ``{"prompt": [user message], "seed": s}``: GRPO's groups share a row, so
    the ``num_generations`` rollouts of a group play the same seeded task."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": instruction}],
                               "seed": start + i} for i in range(n)])
