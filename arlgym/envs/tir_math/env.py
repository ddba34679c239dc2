"""``arl/TIRMath-v0``: tool-integrated math reasoning with a Python sandbox (paper §5, H.1.1).

Each turn the agent writes reasoning and either one Python code block or a final answer
``\\boxed{...}``. The env follows ARLArena's TIR loop (a SimpleTIR port):

* the response is cut after its first code block (text after it was written blind);
* a ``\\boxed{}`` answer before any code ends the episode: reward 1 if it equals the reference
  (math-verify, see :mod:`~arlgym.envs.tir_math.answers`), else 0;
* otherwise the code runs in a fresh sandboxed interpreter (:class:`PythonSandbox`) with
  ``final_answer(x)`` predefined (it prints ``\\boxed{x}``); the observation is
  ``stdout`` (or the error's last line, or "interpreter timeout") cut to ``max_obs_chars``;
  output containing ``\\boxed{}`` is the final answer and ends the episode;
* a turn with neither code nor answer is a "void turn": format-invalid (penalised) and, with
  ``end_on_void_turn`` (default, as ARLArena), the end of the episode;
* ``max_steps`` turns (paper: 5) without an answer: truncated, reward 0.

The prompt is the paper's TIR template with the whole conversation so far appended (each past
response, then ``Code execution result: ...``); the agent sees its full history, as in the
paper, not a 2-turn window. The anchor hashes the problem and the code cells executed so far.

``response_format="tags"`` swaps the paper's format for the uniform ``<think>…</think><action>…
</action>`` one: the action is the code (fences optional) or a ``\\boxed{}`` answer.

Tasks: generated problems by default (``tir-<seed>``, offline, see
:mod:`~arlgym.envs.tir_math.problems`); ``data_path=`` a ``.jsonl``/``.json``/``.parquet`` file
(used for every split) or a folder with ``train``/``val``/``test`` files loads official data.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from arlgym.core.env import ActResult, AgentEnv, TaskSpec
from arlgym.core.parsing import (
    ParsedResponse,
    extract_boxed,
    parse_response,
    parse_tir_response,
    truncate_after_code,
)
from arlgym.core.prompts import TIR_MATH, HistoryEntry
from arlgym.envs.requirements import require
from arlgym.envs.tir_math.answers import answers_match
from arlgym.envs.tir_math.problems import (
    FAMILIES,
    SPLIT_SEED_RANGES,
    MathProblem,
    generate_problem,
    load_problems,
    panel_seeds,
    problem_content_key,
    without_held_out,
)
from arlgym.envs.tir_math.sandbox import PythonSandbox
from arlgym.errors import ConfigError, TaskNotFound

_log = logging.getLogger(__name__)

__all__ = ["TIRMathEnv"]

_SPLIT_ALIASES = {"eval": "test", "validation": "val", "valid": "val"}
_GENERATED_ID = re.compile(r"^tir-(\d+)$")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_FENCE = re.compile(r"^```[ \t]*+(?:python3?|py)?[ \t]*+\n(.*?)\n?```\s*+$", re.IGNORECASE | re.DOTALL)

TIR_NO_ACTION_FEEDBACK = (
    "Your response had neither a ```python``` code block nor a \\boxed{} final answer."
)


def _check_kwargs(**kwargs: Any) -> None:
    """Types and ranges of the sandbox kwargs, named as the user wrote them (a string from
    ``--env-kwarg sandbox_network=false`` is not a boolean, ``'5'`` is not a number)."""
    for name in ("sandbox_network", "end_on_void_turn", "use_math_verify"):
        value = kwargs[name]
        if not isinstance(value, bool) and not (value is None and name == "sandbox_network"):
            allowed = "True, False or None" if name == "sandbox_network" else "True or False"
            raise ConfigError(f"{name} must be {allowed} (a boolean), got {value!r} "
                              f"({type(value).__name__}); pass it as JSON (e.g. "
                              f"--env_kwargs '{{\"{name}\": false}}')")
    timeout, memory = kwargs["sandbox_timeout"], kwargs["sandbox_memory_mb"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ConfigError(f"sandbox_timeout must be a number of seconds > 0, got {timeout!r} "
                          f"({type(timeout).__name__})")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 64):
        raise ConfigError(f"sandbox_memory_mb must be an integer number of MiB >= 64 (or None for "
                          f"no limit), got {memory!r} ({type(memory).__name__}); e.g. 2048 for 2 GiB")
    if kwargs["sandbox_engine"] not in ("auto", "fork", "subprocess"):
        raise ConfigError(f"sandbox_engine must be 'auto', 'fork' or 'subprocess' (with "
                          f"sandbox='unisolated'), got {kwargs['sandbox_engine']!r}")
    if kwargs["sandbox"] not in ("isolated", "unisolated"):
        raise ConfigError(f"sandbox must be 'isolated' (default) or 'unisolated', got {kwargs['sandbox']!r}")


def _is_answer(action: str) -> bool:
    return action.startswith("\\boxed") and extract_boxed(action) is not None


class TIRMathEnv(AgentEnv):
    """Math problems solved with a Python tool; reward 1 for a correct final answer.

    Args:
        data_path: official data (file or folder of ``<split>.jsonl|json|parquet``); ``None``
            uses the built-in generator.
        max_steps: turns per episode (paper: 5).
        sandbox_timeout: wall-clock seconds per code cell (ARLArena: 3–10).
        sandbox_memory_mb: address-space limit of a cell (``None``: unlimited).
        sandbox_network: cells without network (``False``), with (``True``), or without where
            the machine allows it (``None``, default).
        sandbox_engine: with ``sandbox="unisolated"`` only: ``"auto"`` (fork from a warm
            interpreter where possible), ``"fork"`` or ``"subprocess"``; see :class:`PythonSandbox`.
        sandbox: ``"isolated"`` (default): every cell in its own namespaces inside a bubblewrap
            sandbox (``docs/security.md``); construction fails, naming the fix, where this
            machine cannot isolate. ``"unisolated"``: an explicit opt-out — model code then runs
            on this machine with resource limits only.
        max_obs_chars: code output shown to the agent is cut here (ARLArena: 512).
        end_on_void_turn: a turn with neither code nor answer ends the episode (ARLArena).
        response_format: ``"tir"`` (paper: code blocks and ``\\boxed{}``) or ``"tags"``
            (``<think>…</think><action>code or \\boxed{}</action>``).
        families: restrict generated problems to these families (names in ``FAMILIES``).
        use_math_verify: judge answers with math-verify (the ``[math]`` extra; making the env
            without it is an error naming the install command). ``False``: the exact checker
            alone, an explicit choice that is logged.
        **kwargs: the :class:`~arlgym.core.env.AgentEnv` options. ``history_length`` defaults
            to ``max_steps`` (the full conversation).
    """

    default_max_steps: ClassVar[int] = 5
    no_action_feedback: ClassVar[str] = TIR_NO_ACTION_FEEDBACK

    def __init__(
        self,
        data_path: str | Path | None = None,
        max_steps: int | None = None,
        sandbox_timeout: float = 5.0,
        sandbox_memory_mb: int | None = 2048,
        sandbox_network: bool | None = None,
        sandbox_engine: str = "auto",
        sandbox: str = "isolated",
        max_obs_chars: int = 512,
        end_on_void_turn: bool = True,
        response_format: Literal["tir", "tags"] = "tir",
        families: tuple[str, ...] | list[str] | None = None,
        use_math_verify: bool = True,
        **kwargs: Any,
    ) -> None:
        # no reward that depends on what happens to be installed: without math-verify the env
        # is refused unless use_math_verify=False chooses the exact checker explicitly
        # (the sandbox checks its own isolation, with its own fixes, below)
        waived = ("bubblewrap (the code sandbox)",) + (
            ("math-verify (the answer checker)",) if use_math_verify is False else ())
        require("arl/TIRMath-v0", skip=waived,
                hint="or pass use_math_verify=False to judge with the exact checker only")
        if not use_math_verify:
            _log.info("arl/TIRMath-v0: use_math_verify=False: answers are judged by the exact "
                      "checker only (rewards differ from math-verify's on equivalent forms)")
        kwargs.setdefault("history_length", max_steps or self.default_max_steps)
        super().__init__(max_steps=max_steps, **kwargs)
        if response_format not in ("tir", "tags"):
            raise ConfigError(f"response_format must be 'tir' or 'tags', got {response_format!r}")
        if not isinstance(max_obs_chars, int) or max_obs_chars < 16:
            raise ConfigError(f"max_obs_chars must be an int >= 16, got {max_obs_chars!r}")
        if families is not None and (isinstance(families, str) or not isinstance(families, (list, tuple))
                                     or not all(isinstance(f, str) for f in families)):
            raise ConfigError(f"families must be a list of family names (from {sorted(FAMILIES)}), "
                              f"got {families!r} ({type(families).__name__})")
        if data_path is not None and not isinstance(data_path, (str, Path)):
            raise ConfigError(f"data_path must be a path (str) to a .jsonl/.json/.parquet file or a "
                              f"folder, got {data_path!r} ({type(data_path).__name__})")
        if families is not None:
            unknown = sorted(set(families) - set(FAMILIES))
            if unknown or not families:
                raise ConfigError(f"unknown problem families {unknown}; choose from {sorted(FAMILIES)}")
        self.families = None if families is None else tuple(families)
        _check_kwargs(sandbox_timeout=sandbox_timeout, sandbox_memory_mb=sandbox_memory_mb,
                      sandbox_network=sandbox_network, end_on_void_turn=end_on_void_turn,
                      use_math_verify=use_math_verify, sandbox=sandbox, sandbox_engine=sandbox_engine)
        self.sandbox = PythonSandbox(timeout=sandbox_timeout, memory_mb=sandbox_memory_mb,
                                     network=sandbox_network, engine=sandbox_engine,
                                     isolation=sandbox)
        self.max_obs_chars = max_obs_chars
        self.end_on_void_turn = end_on_void_turn
        self.response_format = response_format
        self.use_math_verify = use_math_verify
        self.data_path = None if data_path is None else Path(data_path)
        self._datasets: dict[str, list[MathProblem]] = {}
        if self.data_path is not None and not self.data_path.exists():
            raise ConfigError(f"data_path {str(self.data_path)!r} does not exist")
        self.problem: MathProblem | None = None
        self._cells: list[str] = []
        self._answer: str | None = None
        self._correct = False  # judged once, when the answer is given (math-verify is not free)

    # ------------------------------------------------------------------ tasks
    @staticmethod
    def _split_name(split: str) -> str:
        split = _SPLIT_ALIASES.get(split, split)
        if split not in SPLIT_SEED_RANGES:
            raise ConfigError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SEED_RANGES)}")
        return split

    def _dataset(self, split: str) -> list[MathProblem]:
        """The official problems of ``split`` (loaded once per env).

        From a folder, ``train`` drops every problem whose content a ``val`` or ``test`` file
        holds (:func:`~arlgym.envs.tir_math.problems.without_held_out`), so a dataset whose
        train file repeats test questions cannot train on them. A single file serves every
        split: nothing is held out then, by the caller's choice.
        """
        assert self.data_path is not None
        if split not in self._datasets:
            path = self.data_path
            if path.is_dir():
                candidates = [path / f"{split}{suffix}" for suffix in _DATA_SUFFIXES]
                found = [c for c in candidates if c.is_file()]
                if not found:
                    raise ConfigError(f"{path} has no {split}.jsonl/.json/.parquet file")
                path = found[0]
            problems = load_problems(path)
            if split == "train" and self.data_path.is_dir():
                held_out = [p for s in ("val", "test")
                            if any((self.data_path / f"{s}{x}").is_file() for x in _DATA_SUFFIXES)
                            for p in self._dataset(s)]
                kept = without_held_out(problems, held_out)
                if not kept:
                    raise ConfigError(f"every problem of {path} is also in the val/test files of "
                                      f"{self.data_path}; give a train file with other problems")
                if len(kept) < len(problems):
                    _log.info("TIR train data %s: %d of %d problems dropped, their content is in "
                              "val/test", path, len(problems) - len(kept), len(problems))
                problems = kept
            self._datasets[split] = problems
        return self._datasets[split]

    def _problem_for(self, task_id: str, split: str | None = None) -> MathProblem:
        match = _GENERATED_ID.match(task_id)
        if self.data_path is None:
            if not match:
                raise TaskNotFound(f"task_id {task_id!r} is not a generated TIR task id like 'tir-123'")
            seed = int(match.group(1))
            splits = [split] if split is not None else list(SPLIT_SEED_RANGES)
            if not any(SPLIT_SEED_RANGES[s][0] <= seed < SPLIT_SEED_RANGES[s][1] for s in splits):
                ranges = ", ".join(f"{s}: tir-{lo}..tir-{hi - 1}" for s, (lo, hi) in SPLIT_SEED_RANGES.items()
                                   if s in splits)
                raise TaskNotFound(f"task_id {task_id!r} is not in {'split ' + repr(split) if split else 'any split'} "
                                   f"({ranges}); use list_tasks(split) for valid ids")
            return generate_problem(seed, self.families)
        for split in SPLIT_SEED_RANGES:
            try:
                problems = self._dataset(split)
            except ConfigError:
                continue
            for problem in problems:
                if problem.problem_id == task_id:
                    return problem
        raise TaskNotFound(f"no problem with id {task_id!r} in {self.data_path}")

    reset_option_keys: ClassVar[tuple[str, ...]] = ("problem",)

    def _load_task(self, seed: int | None, options: dict[str, Any]) -> TaskSpec:
        if "problem" in options:  # play a given {"question", "answer"}
            spec = options["problem"]
            if not isinstance(spec, dict) or not {"question", "answer"} <= set(spec):
                raise ConfigError("options['problem'] must be a dict with 'question' and 'answer'")
            for key in ("question", "answer"):
                if isinstance(spec[key], bool) or not isinstance(spec[key], (str, int, float)):
                    raise ConfigError(f"options['problem'][{key!r}] must be a string (or a number), got "
                                      f"{spec[key]!r} ({type(spec[key]).__name__})")
            self.problem = MathProblem(str(spec.get("id", "custom")), str(spec["question"]),
                                       str(spec["answer"]))
        elif "task_id" in options:
            split = options.get("split")
            self.problem = self._problem_for(str(options["task_id"]),
                                             None if split is None else self._split_name(split))
        else:
            split = self._split_name(options.get("split", "train"))
            if self.data_path is None:
                low, high = SPLIT_SEED_RANGES[split]
                self.problem = generate_problem(int(self.np_random.integers(low, high)), self.families)
            else:
                problems = self._dataset(split)
                self.problem = problems[int(self.np_random.integers(len(problems)))]
        self._cells = []
        self._answer = None
        self._correct = False
        return TaskSpec(task_id=self.problem.problem_id, observation=self.problem.question,
                        task_type=self.problem.family, description=self.problem.question)

    def list_tasks(self, split: str = "test", limit: int | None = None) -> list[str]:
        """Generated: the split's first ``limit`` (default 500) seeds with pairwise different
        problems (:func:`~arlgym.envs.tir_math.problems.panel_seeds`); official data: the
        split file's problem ids."""
        split = self._split_name(split)
        if self.data_path is not None:
            ids = [p.problem_id for p in self._dataset(split)]
            return ids if limit is None else ids[:limit]
        return [f"tir-{s}" for s in panel_seeds(split, 500 if limit is None else limit, self.families)]

    def task_content_key(self, task_id: str) -> str:
        """The question of task ``task_id`` by
        :func:`~arlgym.envs.tir_math.problems.problem_content_key` (a generated seed's problem,
        a dataset problem); an id of neither kind (a problem given at reset) is its own key."""
        if self.data_path is None and not _GENERATED_ID.match(task_id):
            return task_id
        problem = self._problem_for(task_id)
        return problem_content_key(problem.question, problem.family)

    # ------------------------------------------------------------------ parsing
    def _parse(self, response: str) -> ParsedResponse:
        if self.response_format == "tir":
            return parse_tir_response(response)
        parsed = parse_response(response, strict=self.strict_format,
                                think_prefilled=self.think_prefilled)
        if parsed.action is not None:
            fenced = _FENCE.match(parsed.action.strip())
            action = fenced.group(1) if fenced else parsed.action
            boxed = extract_boxed(action)
            if boxed is not None and "\n" not in action.strip():
                action = f"\\boxed{{{boxed}}}"
            parsed = ParsedResponse(parsed.think, action, parsed.format_valid, parsed.error)
        return parsed

    def _history_action(self, parsed: ParsedResponse, response: str) -> str:
        if self.response_format == "tir":
            return truncate_after_code(response).strip() if isinstance(response, str) else ""
        return super()._history_action(parsed, response)

    # ------------------------------------------------------------------ hooks
    def _finish(self, predicted: str | None, observation: str, executed: str) -> ActResult:
        assert self.problem is not None
        self._answer = predicted
        self._correct = answers_match(predicted, self.problem.answer,
                                      use_math_verify=self.use_math_verify)
        return ActResult(observation, 1.0 if self._correct else 0.0, True, True, executed)

    def _act(self, action: str) -> ActResult:
        if _is_answer(action):
            predicted = extract_boxed(action)
            return self._finish(predicted, f"Final answer: {predicted}", action)
        self._cells.append(action)
        result = self.sandbox.run(action)
        feedback = result.feedback(self.max_obs_chars)
        predicted = extract_boxed(result.stdout)
        if predicted is not None:
            return self._finish(predicted, feedback, action)
        return ActResult(feedback, 0.0, False, result.ok, action)

    def _noop_result(self, feedback: str) -> ActResult:
        return ActResult(feedback, 0.0, self.end_on_void_turn, False, None)

    def _anchor_state(self) -> Any:
        assert self.problem is not None
        return (self.problem.question, tuple(cell.strip() for cell in self._cells), self._answer)

    def _won(self) -> bool:
        return self._correct

    def _prompt(self, history: list[HistoryEntry]) -> str:
        assert self.problem is not None
        if not history:
            return TIR_MATH.first.format(task_description=self.problem.question)
        shown = history[-self.history_length:] if self.history_length else []
        start = len(history) - len(shown)
        parts = []
        for i, entry in enumerate(shown, start=start):
            result = history[i + 1].observation if i + 1 < len(history) else self.raw_observation
            parts.append(f"{entry.action}\nCode execution result: {result}\n")
        return TIR_MATH.later.format(task_description=self.problem.question,
                                     transcript="\n".join(parts))

    def close(self) -> None:
        """Stop this env's use of the fork server (the last env of the process stops it: no
        process, and no file of a cell, survives)."""
        self.sandbox.close()
        super().close()

    # ------------------------------------------------------------------ extras
    @property
    def final_answer(self) -> str | None:
        """The episode's final answer so far (``None`` before one is given)."""
        return self._answer

    def expert_response(self) -> str:
        """The reference solution script of a generated problem, in the env's format."""
        if self.problem is None or self.problem.solution_code is None:
            raise ConfigError("only generated problems (data_path=None) have an expert solution")
        think = f"This is a {self.problem.family.replace('_', ' ')} problem; I will compute it exactly."
        if self.response_format == "tags":
            return f"<think>{think}</think><action>{self.problem.solution_code}</action>"
        return f"{think}\n```python\n{self.problem.solution_code}\n```"
