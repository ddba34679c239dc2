"""``AgentEnv``: the uniform LLM-agent environment contract.

Every arlgym env takes the raw LLM response as its action. ``AgentEnv.step`` does the part that
is the same for every env — parse the response, decide what to execute, apply the format
penalty, count steps, keep the history window, fill the documented ``info`` keys, render the
next prompt — and calls the subclass's hooks for the env-specific part. Subclasses implement
hooks and never override ``step``/``reset``.

Info keys (every ``reset`` and ``step``):

===================== ===========================================================================
``task_id``           identifier of the task (seed-derived or from a task list)
``task_type``         task family (e.g. ALFWorld's six types; ``"sokoban"`` for Sokoban)
``step``              number of steps taken so far in the episode
``raw_observation``   the env's own observation text, without the prompt template
``admissible_actions`` list of admissible action strings, or ``None`` when unbounded
``anchor``            :func:`~arlgym.core.anchors.anchor_hash` of the true env state (GiGPO)
``think``             parsed reasoning text of the last response (``None`` at reset)
``action``            parsed action text of the last response (``None`` when none extracted)
``executed_action``   what the env executed (``None`` for a no-op)
``format_valid``      whether the last response followed the format (``True`` at reset)
``action_valid``      whether the action was executable/admissible (``True`` at reset)
``format_error``      ``None`` or a key of :data:`~arlgym.core.parsing.FORMAT_ERRORS`
``task_reward``       the env's own reward for the step, before penalties
``format_penalty``    the amount subtracted for an invalid format (0 or the coefficient)
``won``               whether the task is solved
``score``             task score in [0, 1] (fraction of goal achieved)
===================== ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym

from arlgym.core.anchors import anchor_hash
from arlgym.core.parsing import ParsedResponse, parse_response
from arlgym.core.prompts import HistoryEntry
from arlgym.core.spaces import AnyText
from arlgym.core.validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_str,
    did_you_mean,
    raise_unknown_kwargs,
)
from arlgym.errors import ConfigError, ResetNeeded

__all__ = ["AgentEnv", "ActResult", "TaskSpec", "INFO_KEYS", "NO_ACTION_FEEDBACK"]

#: The documented info keys, in order.
INFO_KEYS: tuple[str, ...] = (
    "task_id",
    "task_type",
    "step",
    "raw_observation",
    "admissible_actions",
    "anchor",
    "think",
    "action",
    "executed_action",
    "format_valid",
    "action_valid",
    "format_error",
    "task_reward",
    "format_penalty",
    "won",
    "score",
)

#: Feedback shown when no action could be extracted from the response.
NO_ACTION_FEEDBACK = (
    "Your response contained no <action>...</action> block, so nothing happened. "
    "Answer with <think>...</think><action>...</action>."
)


@dataclass(slots=True)
class TaskSpec:
    """What ``_load_task`` returns: the task's identity and first observation."""

    task_id: str
    observation: str
    task_type: str = ""
    description: str = ""


@dataclass(slots=True)
class ActResult:
    """What ``_act``/``_noop`` return for one executed (or refused) action.

    Attributes:
        observation: the env's feedback text after the action.
        reward: the task reward of this step (before any format penalty).
        terminated: the episode ended (solved, or failed for good).
        action_valid: the action was admissible/executable.
        executed_action: canonical form of what was executed, ``None`` for a no-op.
    """

    observation: str
    reward: float
    terminated: bool
    action_valid: bool
    executed_action: str | None


class AgentEnv(gym.Env[Any, str]):
    """Base class of every arlgym env; see the module docstring for the contract.

    Args:
        max_steps: steps after which the episode is truncated.
        history_length: past turns shown in the prompt (paper: 2).
        format_penalty_coef: subtracted from the reward when the format is invalid (paper: 0.1).
        on_format_error: ``"penalize"`` executes the extracted action if there is one (else a
            no-op with feedback) and subtracts the penalty; ``"terminate"`` ends the episode.
        strict_format: ARLArena's strict parser (default) or verl-agent's lenient one.
        think_prefilled: the chat template's generation prefix already opened ``<think>``.
        render_mode: ``None``, ``"ansi"`` or an env-specific mode.

    Subclass hooks (all required unless noted):
        ``_load_task(seed_task, options) -> TaskSpec``: set up a task; may use ``self.np_random``.
        ``_act(action: str) -> ActResult``: execute a parsed action; an inadmissible action is a
        no-op with the env's own feedback and ``action_valid=False``.
        ``_anchor_state() -> object``: the true state to hash.
        ``_admissible() -> list[str] | None``: admissible actions now.
        ``_won() -> bool`` and ``_score() -> float``.
        ``_prompt(history) -> str``: the full prompt for the current turn.
        ``_noop_result(feedback) -> ActResult`` (optional): what a no-op step yields.
        ``_observation(prompt) -> obs`` (optional): wrap the prompt (vision envs add an image).
        ``_parse(response) -> ParsedResponse`` (optional): the uniform ``<think>/<action>``
        parser by default; only an env whose paper protocol has another answer format
        (TIR Math: code blocks and ``\\boxed{}``) overrides it.
        ``_history_action(parsed, response) -> str`` (optional): what the history window shows
        of a past turn (the parsed action by default).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    #: Whether several instances may be stepped from threads of one process.
    thread_safe: ClassVar[bool] = True
    #: Whether a step costs well under a millisecond of CPU, so that ``arlgym serve`` runs it
    #: on its event loop rather than handing it to a thread (a hop that costs more than such a
    #: step); a slow step there would delay every other session's messages.
    cheap_step: ClassVar[bool] = False
    #: Default for ``max_steps``; subclasses set their paper value.
    default_max_steps: ClassVar[int] = 50
    #: Feedback of a turn from which no action could be extracted.
    no_action_feedback: ClassVar[str] = NO_ACTION_FEEDBACK
    #: ``reset(options=...)`` keys an env understands besides ``task_id`` and ``split``; any
    #: other key is refused (a misspelt ``taskid`` would otherwise be ignored silently)
    reset_option_keys: ClassVar[tuple[str, ...]] = ()
    #: The splits held out from training, whose panels (``list_tasks``) no training run may
    #: play (:mod:`arlgym.envs.content` counts it)
    held_out_splits: ClassVar[tuple[str, ...]] = ("test", "val")

    def __init__(
        self,
        *,
        max_steps: int | None = None,
        history_length: int = 2,
        format_penalty_coef: float = 0.1,
        on_format_error: Literal["penalize", "terminate"] = "penalize",
        strict_format: bool = True,
        think_prefilled: bool = False,
        render_mode: str | None = None,
        **unknown: Any,
    ) -> None:
        where = type(self).__name__
        if unknown:  # a typo'd keyword: name it and the accepted ones (not a bare TypeError)
            raise_unknown_kwargs(type(self), unknown, where=where)
        max_steps = self.default_max_steps if max_steps is None else max_steps
        max_steps = check_int("max_steps", max_steps, min=1, where=where,
                              example=self.default_max_steps)
        history_length = check_int("history_length", history_length, min=0, where=where,
                                   example=2)
        format_penalty_coef = check_float("format_penalty_coef", format_penalty_coef, min=0.0,
                                          where=where, example=0.1)
        check_choice("on_format_error", on_format_error, ("penalize", "terminate"), where=where)
        strict_format = check_bool("strict_format", strict_format, where=where)
        think_prefilled = check_bool("think_prefilled", think_prefilled, where=where)
        check_choice("render_mode", render_mode, self.metadata["render_modes"], allow_none=True,
                     where=where)
        self.max_steps = max_steps
        self.history_length = history_length
        self.format_penalty_coef = float(format_penalty_coef)
        self.on_format_error = on_format_error
        self.strict_format = strict_format
        self.think_prefilled = think_prefilled
        self.render_mode = render_mode
        self.action_space = AnyText()
        if not hasattr(self, "observation_space"):
            self.observation_space = AnyText()
        self._task: TaskSpec | None = None
        self._history: list[HistoryEntry] = []
        self._last_raw: str = ""
        self._steps = 0
        self._done = True

    # ------------------------------------------------------------------ hooks
    def _load_task(self, seed: int | None, options: dict[str, Any]) -> TaskSpec:
        raise NotImplementedError

    def _act(self, action: str) -> ActResult:
        raise NotImplementedError

    def _anchor_state(self) -> Any:
        raise NotImplementedError

    def _admissible(self) -> list[str] | None:
        return None

    def _won(self) -> bool:
        raise NotImplementedError

    def _score(self) -> float:
        return 1.0 if self._won() else 0.0

    def _prompt(self, history: list[HistoryEntry]) -> str:
        raise NotImplementedError

    def _noop_result(self, feedback: str) -> ActResult:
        """A step where nothing is executed; envs with a step cost override the reward."""
        return ActResult(feedback, 0.0, False, False, None)

    def _observation(self, prompt: str) -> Any:
        return prompt

    def _parse(self, response: str) -> ParsedResponse:
        return parse_response(response, strict=self.strict_format,
                              think_prefilled=self.think_prefilled)

    def _history_action(self, parsed: ParsedResponse, response: str) -> str:
        return parsed.action if parsed.action is not None else ""

    # ------------------------------------------------------------------ contract
    @property
    def task(self) -> TaskSpec:
        """The current task; raises :class:`ResetNeeded` before the first ``reset``."""
        if self._task is None:
            raise ResetNeeded(f"{type(self).__name__}: call reset() before using the env")
        return self._task

    @property
    def steps_taken(self) -> int:
        return self._steps

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start a task. The same ``seed`` gives the same task; ``options`` may pin one.

        ``options`` keys understood by every env: ``task_id``, ``split``; envs add their own.
        """
        self._check_reset_args(seed, options)
        super().reset(seed=seed)
        self._task = self._load_task(seed, dict(options or {}))
        self._history = []
        self._steps = 0
        self._done = False
        self.last_step: dict[str, Any] | None = None
        self._last_raw = self._task.observation
        info = self._info(parsed=None, result=None, penalty=0.0)
        return self._observation(self._prompt(self._history)), info

    def _check_reset_args(self, seed: Any, options: Any) -> None:
        """Types of ``seed`` and of the shared ``options`` keys (``task_id``, ``split``); envs
        check their own keys, and whether a ``task_id`` exists, in ``_load_task``."""
        where = f"{type(self).__name__}.reset"
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 and type(seed).__module__ != "numpy"):
            raise ConfigError(f"{where}: seed={seed!r} is invalid: expected an int >= 0 or None. "
                              "Fix: pass e.g. reset(seed=0)")
        if seed is not None and int(seed) < 0:
            raise ConfigError(f"{where}: seed={seed!r} is invalid: expected an int >= 0 or None. "
                              "Fix: pass e.g. reset(seed=0)")
        if options is None:
            return
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: options={options!r} is invalid: expected a dict or None. "
                              "Fix: pass e.g. options={'task_id': ...}")
        known = ("task_id", "split", *self.reset_option_keys)
        for key in options:
            if key not in known:
                raise ConfigError(f"{where}: options key {key!r} is unknown{did_you_mean(key, known)}; "
                                  f"this env understands {', '.join(map(repr, known))}")
        if "task_id" in options:
            task_id = options["task_id"]
            if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or (
                    isinstance(task_id, str) and not task_id.strip()):
                raise ConfigError(
                    f"{where}: options['task_id']={task_id!r} is invalid: expected a task id "
                    "string. Fix: use an id from env.unwrapped.list_tasks(split) or info['task_id']")
        if "split" in options:
            check_str("options['split']", options["split"], where=where)

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Play one turn with the raw LLM ``action`` text; see the module docstring."""
        if not isinstance(action, str):
            raise ConfigError(f"{type(self).__name__}.step: action={action!r} is invalid: expected "
                              "the LLM's response text (a str). Fix: pass the generated text")
        if self._task is None or self._done:
            raise ResetNeeded(
                f"{type(self).__name__}.step() called "
                + ("before reset()" if self._task is None else "after the episode ended")
                + "; call reset() first"
            )
        parsed = self._parse(action)
        observation_before = self._last_raw
        if not parsed.format_valid and self.on_format_error == "terminate":
            result = self._noop_result(
                f"Invalid response format ({parsed.error}); the episode is terminated."
            )
            result.terminated = True
        elif parsed.action is None:
            result = self._noop_result(self.no_action_feedback)
        else:
            result = self._act(parsed.action)
        penalty = 0.0 if parsed.format_valid else self.format_penalty_coef
        self._steps += 1
        terminated = bool(result.terminated)
        truncated = (not terminated) and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._history.append(HistoryEntry(observation_before, self._history_action(parsed, action)))
        self._last_raw = result.observation
        info = self._info(parsed=parsed, result=result, penalty=penalty)
        reward = float(result.reward) - penalty
        self.last_step = {"reward": reward, "info": info}  # what a human player is shown next
        return self._observation(self._prompt(self._history)), reward, terminated, truncated, info

    def _info(
        self, *, parsed: ParsedResponse | None, result: ActResult | None, penalty: float
    ) -> dict[str, Any]:
        task = self.task
        return {
            "task_id": task.task_id,
            "task_type": task.task_type,
            "step": self._steps,
            "raw_observation": self._last_raw,
            "admissible_actions": self._admissible(),
            "anchor": anchor_hash(self._anchor_state()),
            "think": parsed.think if parsed else None,
            "action": parsed.action if parsed else None,
            "executed_action": result.executed_action if result else None,
            "format_valid": parsed.format_valid if parsed else True,
            "action_valid": result.action_valid if result else True,
            "format_error": parsed.error if parsed else None,
            "task_reward": float(result.reward) if result else 0.0,
            "format_penalty": penalty,
            "won": bool(self._won()),
            "score": float(self._score()),
        }

    @property
    def history(self) -> list[HistoryEntry]:
        """Every past turn of the current episode (observation shown, action parsed)."""
        return list(self._history)

    @property
    def raw_observation(self) -> str:
        return self._last_raw

    def render(self) -> Any:
        if self.render_mode == "ansi":
            return self._last_raw
        return None

    def expert_response(self) -> str:
        """A well-formed expert answer for the current state (envs with an expert override)."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def list_tasks(self, split: str = "test", limit: int | None = None) -> list[str]:
        """The enumerated, fixed task ids of ``split`` (eval lists), first ``limit`` of them.

        Each id can be played with ``reset(options={"task_id": id})``. Envs override this.
        """
        raise NotImplementedError(f"{type(self).__name__} does not enumerate its tasks")

    def task_content_key(self, task_id: str) -> str:
        """What makes task ``task_id`` the same task as another id's: two ids with one key are
        one task to a learner (the same puzzle, question or request drawn twice). Held-out
        panels are compared with training by this key, not by id. Envs whose ids can repeat
        content override it; by default the id is the content.
        """
        return task_id
