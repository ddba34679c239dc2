"""Policies that need no model: the env's expert, its greedy teacher, a uniform random player, a
human at a terminal, and any of them with slips."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

from arlgym.errors import ConfigError, UnsolvableError
from arlgym.policies.base import Completion, SamplingParams, prompt_text

__all__ = ["ExpertPolicy", "GreedyTeacherPolicy", "RandomPolicy", "HumanPolicy", "SlipPolicy"]


def _require_envs(policy: str, prompts: Sequence[Any], envs: Sequence[Any] | None) -> Sequence[Any]:
    if envs is None or len(envs) != len(prompts):
        raise ConfigError(
            f"the {policy} policy needs the env of every prompt: call "
            f"generate(prompts, envs=[...]) with one env per prompt"
        )
    return envs


class ExpertPolicy:
    """Asks each env for its expert answer (``env.unwrapped.expert_response()``).

    Every arlgym env with an expert (Sokoban: optimal solver; ALFWorld: planner) answers with a
    well-formed ``<think>…</think><action>…</action>`` response, which is what BC data needs.
    """

    name = "expert"

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        envs = _require_envs(self.name, prompts, envs)
        return [Completion(env.unwrapped.expert_response()) for env in envs]


class GreedyTeacherPolicy:
    """Asks each env for its greedy teacher's answer (``env.unwrapped.teacher_response()``).

    Sokoban's teacher (:mod:`arlgym.envs.sokoban.teacher`) is a greedy box-pusher that walks
    straight to the box without path planning: good (53% of held-out rooms, random moves 28%)
    but wrong in a consistent way, so imitation stops below what RL can reach.
    """

    name = "greedy"

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        envs = _require_envs(self.name, prompts, envs)
        out = []
        for env in envs:
            respond = getattr(env.unwrapped, "teacher_response", None)
            if respond is None:
                raise ConfigError(
                    f"{type(env.unwrapped).__name__} has no greedy teacher (only arl/Sokoban-v0 "
                    "and arl/SokobanVision-v0 do). Fix: use --policy expert for this env")
            out.append(Completion(respond()))
        return out


class RandomPolicy:
    """Picks a uniformly random admissible action, in the correct format.

    Args:
        seed: seed of the policy's own RNG (independent of the envs' RNGs).
        think: the reasoning text put in ``<think>``.
    """

    name = "random"

    def __init__(self, seed: int | None = None, think: str = "I pick a random move.") -> None:
        self.rng = np.random.default_rng(seed)
        self.think = think

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        envs = _require_envs(self.name, prompts, envs)
        out = []
        for env in envs:
            actions = env.unwrapped._admissible()
            if not actions:
                raise ConfigError(
                    f"{type(env.unwrapped).__name__} has no finite admissible action list; the "
                    "random policy cannot play it"
                )
            choice = actions[int(self.rng.integers(len(actions)))]
            out.append(Completion(f"<think>{self.think}</think><action>{choice}</action>"))
        return out


def _swap_word(text: str, old: str, new: str) -> str:
    """``text`` with every whole-word ``old`` replaced by ``new`` (a plan "down left down"
    with the mistaken move "up" for "down" reads "up left up")."""
    import re

    return re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", new, text)


class SlipPolicy:
    """Another policy whose hand slips: with probability ``p`` a turn's action is replaced by a
    uniformly random admissible one, its reasoning kept (``reasoning="match"``: a *mistake*
    instead, the reasoning rewritten to name the move made, spec ``mistakes:<p>:<spec>``).

    Why: a demonstrator that knows the plan and sometimes presses the wrong key is the simplest
    imperfect teacher whose imperfection imitation *cannot* remove — behaviour cloning copies the
    slips at their rate, the env's reward tells them apart (docs/main_job.md). The slip keeps the
    base's ``<think>`` and swaps only the ``<action>``, so a slip looks like any other turn; the
    replacement may equal the base's action (then it is no slip).

    Args:
        base: the policy that slips (any policy; scripted ones need ``envs``).
        p: probability of a slip per turn, in [0, 1].
        seed: seed of the slips' own RNG (independent of the envs' and the base's).
        reasoning: ``"keep"`` (a slip: the base's reasoning, another move) or ``"match"`` (a
            mistake: every whole-word mention of the base's move in the reasoning becomes the
            move made).
    """

    def __init__(self, base: Any, p: float, seed: int | None = None, reasoning: str = "keep") -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise ConfigError(f"slip probability p must be in [0, 1], got {p!r}; e.g. slips:0.3:expert")
        if reasoning not in ("keep", "match"):
            raise ConfigError(f"reasoning must be 'keep' (slips) or 'match' (mistakes), got {reasoning!r}")
        self.base = base
        self.p = float(p)
        self.reasoning = reasoning
        self.rng = np.random.default_rng(seed)
        kind = "slips" if reasoning == "keep" else "mistakes"
        self.name = f"{kind}:{self.p:g}:{getattr(base, 'name', type(base).__name__)}"

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        envs = _require_envs(self.name, prompts, envs)
        try:
            out = list(self.base.generate(prompts, sampling, envs=envs))
        except UnsolvableError:  # a slip lost a room the (optimal) base then cannot plan for
            out = [self._answer_or_none(p, sampling, e) for p, e in zip(prompts, envs, strict=True)]
        for i, env in enumerate(envs):
            # one draw per turn, slipped or not, so the slips do not depend on the base's answers
            slip, pick = self.rng.random() < self.p, self.rng.random()
            if out[i] is not None and not slip:
                continue
            actions = env.unwrapped._admissible()
            if not actions:
                raise ConfigError(
                    f"{type(env.unwrapped).__name__} has no finite admissible action list; a "
                    "policy cannot slip on it")
            choice = actions[min(int(pick * len(actions)), len(actions) - 1)]
            if out[i] is None:  # nothing left to plan: the move is a random one
                out[i] = Completion(f"<think>no plan</think><action>{choice}</action>")
                continue
            text = out[i].text
            start, end = text.rfind("<action>"), text.rfind("</action>")
            if start < 0 or end < start:
                continue  # a malformed base answer is passed through
            head = text[:start]
            if self.reasoning == "match":  # a mistake: the reasoning names the move made
                base_action = text[start + len("<action>"):end].strip()
                head = _swap_word(head, base_action, choice) if base_action else head
            out[i] = Completion(f"{head}<action>{choice}{text[end:]}")
        return out

    def _answer_or_none(self, prompt: Any, sampling: SamplingParams | None, env: Any) -> Completion | None:
        try:
            return self.base.generate([prompt], sampling, envs=[env])[0]
        except UnsolvableError:
            return None


class HumanPolicy:
    """A person at a terminal: shows the observation and reads an action.

    A bare action (``up``) is wrapped as ``<think>human</think><action>up</action>``; a reply that
    already contains tags is passed through unchanged, so the format penalty can be tried by hand.
    Vision observations are saved as PNG (``image_path``) and the path is printed.

    Args:
        stdin, stdout: streams (tests pass their own).
        show: ``"observation"`` prints only the env's raw observation and admissible actions;
            ``"prompt"`` prints the full prompt the model would see.
        image_path: where vision observations are written.
    """

    name = "human"

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 show: str = "observation", image_path: str = "arlgym_observation.png",
                 input_fn: Callable[[str], str] | None = None) -> None:
        if show not in ("observation", "prompt"):
            raise ConfigError(f"show must be 'observation' or 'prompt', got {show!r}")
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.show = show
        self.image_path = image_path
        self._returns: dict[int, float] = {}  # per env, this episode's rewards so far

    def _status(self, env: Any) -> str:
        """How the last move went (an unknown or impossible move is said, not passed over), the
        step count and the return so far."""
        key = id(env)
        last = getattr(env, "last_step", None)
        if last is None:
            self._returns[key] = 0.0
            return f"\n--- step 1 of {env.max_steps} ---\n"
        self._returns[key] = self._returns.get(key, 0.0) + last["reward"]
        info = last["info"]
        if not info.get("format_valid", True):
            note = f"your reply was not understood ({info.get('format_error')}); nothing happened"
        elif info.get("action") is None:
            note = "no move given; nothing happened"
        elif not info.get("action_valid", True):
            note = f"{info['action']!r} is not a possible move here; nothing happened"
        else:
            note = f"{info.get('executed_action') or info['action']!r} done"
        return (f"\n{note}; reward {last['reward']:+.2f}, return so far "
                f"{self._returns[key]:+.2f}\n--- step {env._steps + 1} of {env.max_steps} ---\n")

    def _read(self, question: str) -> str:
        self.stdout.write(question)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError("no more input")
        return line.strip()

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        out = []
        for i, prompt in enumerate(prompts):
            env = envs[i].unwrapped if envs is not None else None
            if env is not None:
                self.stdout.write(self._status(env))
            if self.show == "prompt" or env is None:
                self.stdout.write(prompt_text(prompt) + "\n")
            else:
                self.stdout.write(f"\n{env.raw_observation}\n")
                actions = env._admissible()
                if actions:
                    self.stdout.write(f"actions: {', '.join(actions)}\n")
            if isinstance(prompt, dict) and "image" in prompt:
                from PIL import Image

                Image.fromarray(prompt["image"]).save(self.image_path)
                self.stdout.write(f"(image saved to {self.image_path})\n")
            reply = self._read("your move> ")
            if "<" not in reply:
                reply = f"<think>human</think><action>{reply}</action>"
            out.append(Completion(reply))
        return out
