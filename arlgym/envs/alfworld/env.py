"""``arl/ALFWorld-v0``: ALFWorld text games on the real TextWorld PDDL engine.

Task sources (``data_source``):

* ``"official"``: ALFWorld's data at ``$ALFWORLD_DATA`` (or ``data_dir``), the folders
  ``json_2.1.1/{train,valid_seen,valid_unseen}`` for the splits ``train``,
  ``eval_in_distribution`` and ``eval_out_of_distribution``. As ALFWorld's loader does, a game is
  a folder holding ``traj_data.json`` and a solvable ``game.tw-pddl``; folders whose path
  contains ``movable`` or ``Sliced`` are skipped.
* ``"generated"``: games from :mod:`.generator`, made on first use and cached on disk under
  ``$ARLGYM_CACHE/alfworld/<generator version>/<split>/`` (default ``~/.cache/arlgym``); each
  one is played by the expert in the engine before it is written, so every cached game is
  solvable. Nothing is downloaded.
* ``"auto"`` (default): official when the split's folder holds games, generated otherwise. An
  explicit ``data_dir`` without games is an error; ``$ALFWORLD_DATA`` set to a folder without
  games gives a warning that says generated games are used instead.

``domain_randomization=True`` shuffles the object numbering at every reset of a ``train``
episode ("apple 1" may be "apple 3"), as ALFWorld's ``env.domain_randomization`` does (ALFWorld
never randomizes its eval splits, and neither does this env).

Each split is an enumerated, fixed task list (``list_tasks(split)``); ``reset(seed=s)`` draws
from it with the env's RNG and ``options={"task_id": ...}`` pins a task.

As in ARLArena: the prompt is the paper's ALFWorld template (Appendix H.1.3) with the
admissible commands minus ``help``, 50 steps, task reward ``10 * won`` on the winning step,
``score = won``. An action outside the admissible list changes nothing and shows TextWorld's own
"Nothing happens."; the anchor hashes the PDDL state facts, so equal feedback in different
states gives different anchors.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar, Literal

from arlgym.core.env import ActResult, AgentEnv, TaskSpec
from arlgym.core.prompts import ALFWORLD, HistoryEntry, format_admissible, render_prompt
from arlgym.core.validation import (
    bad_value,
    check_bool,
    check_choice,
    check_int,
    check_mapping,
    check_path,
    check_sequence,
    check_str,
)
from arlgym.envs.alfworld.catalog import TASK_TYPES, tables
from arlgym.envs.alfworld.engine import INVALID_FEEDBACK, AlfredGame, load_game_file
from arlgym.envs.alfworld.expert import next_expert_step, play_expert
from arlgym.envs.alfworld.generator import (
    DEFAULT_SPLIT_SIZES,
    GENERATOR_VERSION,
    OFFICIAL_SPLIT_DIRS,
    SPLITS,
    game_content_key,
    generate_game,
    parse_task_id,
    task_ids,
    write_game,
)
from arlgym.envs.requirements import require
from arlgym.errors import ConfigError, LevelFormatError, TaskNotFound, UnsolvableError

__all__ = ["ALFWorldEnv", "REWARD_WON", "cache_root", "official_root", "load_generated"]

REWARD_WON = 10.0
_SPLIT_ALIASES = {
    "valid_seen": "eval_in_distribution",
    "valid_unseen": "eval_out_of_distribution",
    "eval": "eval_in_distribution",
    "test": "eval_in_distribution",
}
_MAX_ATTEMPTS = 8


def cache_root() -> Path:
    """Where generated games are cached: ``$ARLGYM_CACHE`` or ``~/.cache/arlgym``."""
    return Path(os.environ.get("ARLGYM_CACHE") or Path.home() / ".cache" / "arlgym")


def official_root(data_dir: str | os.PathLike | None = None) -> Path:
    """ALFWorld's data root: ``data_dir``, ``$ALFWORLD_DATA`` or ``~/.cache/alfworld``."""
    if data_dir is not None:
        return Path(data_dir)
    return Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld")


_WHERE = "arl/ALFWorld-v0"


def _normalise_split(split: Any, name: str = "split") -> str:
    if isinstance(split, str):
        split = _SPLIT_ALIASES.get(split, split)
    check_choice(name, split, [*SPLITS, *_SPLIT_ALIASES], where=_WHERE)
    return split


def _alfworld_default_root() -> Path:
    """Where ``import alfworld`` points ``$ALFWORLD_DATA`` when it was not set."""
    return Path.home() / ".cache" / "alfworld"


def _official_games(split_dir: Path) -> dict[str, Path]:
    """task id (folder path relative to the split folder) -> game folder, as ALFWorld walks."""
    games: dict[str, Path] = {}
    if not split_dir.is_dir():
        return games
    for root, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in root or "Sliced" in root:
            continue
        folder = Path(root)
        try:
            with open(folder / "game.tw-pddl", encoding="utf-8") as f:
                solvable = json.load(f).get("solvable", False)
        except (OSError, json.JSONDecodeError):
            continue
        if solvable:
            games[folder.relative_to(split_dir).as_posix()] = folder
    return dict(sorted(games.items()))


def load_generated(split: str, index: int, *, seed: int = 0, cache: Path | None = None,
                   engine: Any = None) -> Path:
    """The cached folder of generated game ``index`` of ``split``; generates it if missing.

    A fresh game is played by the expert in the real engine first; a draw the expert cannot
    win is replaced by the next ``attempt``. A won walkthrough is a constructive proof that the
    game is solvable, so the planner check of ``arlgym alfworld generate`` (~1 s per game) is
    not repeated here, where games are made on first use. Files are written atomically (temporary file +
    rename, ``game.tw-pddl`` last), so concurrent processes at worst generate the same game
    twice and never see a half-written one.
    """

    folder = (cache or cache_root()) / "alfworld" / f"{GENERATOR_VERSION}-s{seed}" / split / \
        f"gen-{split}-{index:05d}"
    if (folder / "game.tw-pddl").is_file():
        return folder
    game_engine = engine if engine is not None else AlfredGame()
    for attempt in range(_MAX_ATTEMPTS):
        game = generate_game(split, index, seed=seed, attempt=attempt)
        game_engine.load(game.game_json())
        walkthrough = play_expert(game_engine, game.task_type, game.pddl_params)
        if walkthrough is not None:
            game.walkthrough = walkthrough
            game.checks = ("expert",)
            return write_game(game, folder)
    raise UnsolvableError(f"no solvable draw for gen-{split}-{index:05d} in {_MAX_ATTEMPTS} tries")


class ALFWorldEnv(AgentEnv):
    """ALFWorld on TextWorld's PDDL engine; see the module docstring.

    Args:
        split: ``train``, ``eval_in_distribution`` or ``eval_out_of_distribution`` (aliases
            ``valid_seen``/``valid_unseen``); ``reset(options={"split": ...})`` overrides it.
        data_source: ``"auto"``, ``"generated"`` or ``"official"``.
        data_dir: ALFWorld data root for official data (default ``$ALFWORLD_DATA``).
        split_sizes: sizes of the generated splits (default ALFWorld's 3553/140/134).
        task_types: restrict to some of the six task types (default all).
        generator_seed: base seed of the generated problems (a different seed is a different
            set of games).
        domain_randomization: shuffle the object numbering at each reset of a ``train``
            episode, as ALFWorld's ``env.domain_randomization`` (default ``False``).
        max_steps: paper value 50.
        **kwargs: the :class:`~arlgym.core.env.AgentEnv` options.
    """

    thread_safe: ClassVar[bool] = False
    default_max_steps: ClassVar[int] = 50
    template = ALFWORLD
    #: ALFWorld's two eval splits (seen and unseen scenes); it has no third one
    held_out_splits: ClassVar[tuple[str, ...]] = ("eval_in_distribution", "eval_out_of_distribution")

    def __init__(
        self,
        split: str = "train",
        data_source: Literal["auto", "generated", "official"] = "auto",
        data_dir: str | os.PathLike | None = None,
        split_sizes: dict[str, int] | None = None,
        task_types: list[str] | tuple[str, ...] | None = None,
        generator_seed: int = 0,
        domain_randomization: bool = False,
        max_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        require("arl/ALFWorld-v0")  # at make, not at the first reset
        super().__init__(max_steps=max_steps, **kwargs)
        check_choice("data_source", data_source, ("auto", "generated", "official"),
                     where=_WHERE)
        self.split = _normalise_split(split)
        self.data_source = data_source
        self.data_dir = check_path("data_dir", data_dir, must_exist=False, allow_none=True,
                                   where=_WHERE)
        sizes = dict(DEFAULT_SPLIT_SIZES)
        given = check_mapping(
            "split_sizes", split_sizes, allow_none=True, where=_WHERE,
            fix="pass a dict of split name to number of games, e.g. split_sizes={'train': 500}")
        for key, value in (given or {}).items():
            sizes[_normalise_split(key, name="split_sizes key")] = check_int(
                f"split_sizes[{key!r}]", value, min=1, where=_WHERE,
                fix=f"pass a positive number of games, e.g. split_sizes={{{key!r}: 500}}")
        self.split_sizes = sizes
        if task_types is not None:
            task_types = check_sequence(
                "task_types", task_types, min_len=1, where=_WHERE,
                item=lambda n, v: check_choice(n, v, TASK_TYPES, where=_WHERE),
                fix=f"pass a list of task types, e.g. task_types=[{TASK_TYPES[0]!r}]")
        self.task_types = tuple(task_types) if task_types is not None else TASK_TYPES
        self.generator_seed = check_int(
            "generator_seed", generator_seed, min=0, where=_WHERE,
            fix="pass an int >= 0, e.g. generator_seed=0 (each seed is another set of games)")
        self.domain_randomization = check_bool("domain_randomization", domain_randomization,
                                               where=_WHERE)
        self._lists: dict[str, tuple[str, dict[str, Path] | list[str]]] = {}
        self._engine: Any = None
        self._traj: dict[str, Any] = {}
        self._task_text = ""

    # ------------------------------------------------------------------ tasks
    def _source(self, split: str) -> tuple[str, dict[str, Path] | list[str]]:
        """("official", {id: folder}) or ("generated", [ids]) for ``split``, cached."""
        if split in self._lists:
            return self._lists[split]
        result: tuple[str, Any]
        if self.data_source in ("auto", "official"):
            split_dir = official_root(self.data_dir) / "json_2.1.1" / OFFICIAL_SPLIT_DIRS[split]
            games = _official_games(split_dir)
            games = {k: v for k, v in games.items() if self._official_type(v) in self.task_types}
            if games:
                result = ("official", games)
            elif self.data_source == "official":
                raise ConfigError(
                    f"no ALFWorld games under {split_dir}; set $ALFWORLD_DATA to a folder with "
                    "json_2.1.1/{train,valid_seen,valid_unseen}, or use data_source='generated'"
                )
            else:
                self._explain_fallback(split, split_dir)
                result = ("generated", self._generated_ids(split))
        else:
            result = ("generated", self._generated_ids(split))
        self._lists[split] = result
        return result

    def _explain_fallback(self, split: str, split_dir: Path) -> None:
        """``data_source="auto"`` found no official games: say so when data was pointed at."""
        what = (f"no ALFWorld games of split {split!r} (task types {list(self.task_types)}) "
                f"under {split_dir} (ALFWorld's layout: json_2.1.1/{OFFICIAL_SPLIT_DIRS[split]}/"
                "<task>/trial_*/ with traj_data.json and a solvable game.tw-pddl)")
        if self.data_dir is not None:
            raise bad_value(
                "data_dir", str(self.data_dir), "a folder holding ALFWorld's games", where=_WHERE,
                fix=f"{what}; point data_dir at the folder that contains json_2.1.1, or pass "
                    "data_source='generated' to use generated games")
        env_root = os.environ.get("ALFWORLD_DATA")
        if env_root and Path(env_root).expanduser() != _alfworld_default_root():
            warnings.warn(
                f"{_WHERE}: $ALFWORLD_DATA={env_root!r} is set but holds {what}; using "
                "generated games instead. Fix: point $ALFWORLD_DATA at the folder that contains "
                "json_2.1.1, or pass data_source='generated' to choose generated games "
                "explicitly.", UserWarning, stacklevel=4)

    @staticmethod
    def _official_type(folder: Path) -> str:
        name = folder.parent.name if folder.name.startswith("trial_") else folder.name
        return next((t for t in TASK_TYPES if name.startswith(t)), "")

    def _generated_ids(self, split: str) -> list[str]:
        ids = task_ids(split, self.split_sizes[split])
        if self.task_types != TASK_TYPES:
            ids = [t for t in ids if TASK_TYPES[parse_task_id(t)[1] % 6] in self.task_types]
        return ids

    def list_tasks(self, split: str | None = None, limit: int | None = None) -> list[str]:
        """The fixed, ordered task list of ``split`` (generated ids or official folders)."""
        _, tasks = self._source(_normalise_split(split or self.split))
        ids = list(tasks)
        return ids if limit is None else ids[:limit]

    def task_content_key(self, task_id: str) -> str:
        """The game of task ``task_id`` as the agent meets it
        (:func:`~arlgym.envs.alfworld.generator.game_content_key`), read from the game's own
        files: a generated slot whose first draw the expert could not win holds a later one."""
        if task_id.startswith("gen-"):
            folder = self._folder_for(parse_task_id(task_id)[0], task_id)
        else:
            found = [s for s in SPLITS if task_id in self._source(s)[1]]
            if not found:
                raise TaskNotFound(f"task {task_id!r} is in no split of this env; use an id "
                                   "from list_tasks()")
            folder = self._folder_for(found[0], task_id)
        try:
            traj = json.loads((folder / "traj_data.json").read_text(encoding="utf-8"))
            game = json.loads((folder / "game.tw-pddl").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise LevelFormatError(f"cannot read the game of {task_id!r} in {folder}: {e}") from e
        anns = traj.get("turk_annotations", {}).get("anns") or [{}]
        return game_content_key(traj.get("task_type", ""),
                                traj.get("scene", {}).get("floor_plan", ""),
                                anns[0].get("task_desc", ""), game.get("pddl_problem", ""))

    def _folder_for(self, split: str, task_id: str) -> Path:
        kind, tasks = self._source(split)
        if kind == "official":
            assert isinstance(tasks, dict)
            if task_id not in tasks:
                raise TaskNotFound(f"task {task_id!r} is not in the official {split} split "
                                   f"({len(tasks)} games; see list_tasks())")
            return tasks[task_id]
        gen_split, index = parse_task_id(task_id)
        if gen_split != split:
            split = gen_split
        size = self.split_sizes[split]
        if index >= size:
            raise TaskNotFound(
                f"task_id {task_id!r} is beyond split {split!r}, which has {size} games "
                f"(gen-{split}-00000 .. gen-{split}-{size - 1:05d}). Fix: pick an id from "
                f"list_tasks({split!r}), or enlarge the split with split_sizes={{{split!r}: "
                f"{index + 1}}}")
        return load_generated(split, index, seed=self.generator_seed, engine=self._get_engine())

    def _get_engine(self) -> Any:
        if self._engine is None:
            self._engine = AlfredGame()
        return self._engine

    def _load_task(self, seed: int | None, options: dict[str, Any]) -> TaskSpec:
        split = _normalise_split(options.get("split", self.split), name="options['split']")
        if "task_id" in options:
            task_id = check_str("options['task_id']", options["task_id"], where=_WHERE,
                                fix="pass a task id from list_tasks(), e.g. 'gen-train-00042'")
            if task_id.startswith("gen-"):
                split = parse_task_id(task_id)[0]
        else:
            tasks = self.list_tasks(split)
            task_id = tasks[int(self.np_random.integers(len(tasks)))]
        folder = self._folder_for(split, task_id)
        try:
            with open(folder / "traj_data.json", encoding="utf-8") as f:
                self._traj = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise LevelFormatError(f"cannot read {folder / 'traj_data.json'}: {e}") from e
        game = load_game_file(str(folder / "game.tw-pddl"))
        if "UNKNOWN GOAL" in game["grammar"]:
            game["grammar"] = game["grammar"].replace("UNKNOWN GOAL", self._templated_goal())
        engine = self._get_engine()
        engine.load(game)
        shuffle_seed = None
        if self.domain_randomization and split == "train":
            shuffle_seed = int(self.np_random.integers(2**31))
        intro = engine.reset(shuffle_seed=shuffle_seed)
        marker = "Your task is to: "
        self._task_text = intro[intro.find(marker) + len(marker):].strip() \
            if marker in intro else ""
        task_type = self._traj.get("task_type", "")
        return TaskSpec(task_id=task_id, observation=intro, task_type=task_type,
                        description=self._task_text)

    def _templated_goal(self) -> str:
        """ALFWorld's templated task text for official games whose grammar has no task yet."""
        p = self._traj.get("pddl_params", {})
        templates = tables().goal_templates.get(self._traj.get("task_type", ""), ("{obj}",))
        return templates[0].format(obj=str(p.get("object_target", "")).lower(),
                                   recep=str(p.get("parent_target", "")).lower(),
                                   toggle=str(p.get("toggle_target", "")).lower(),
                                   mrecep=str(p.get("mrecep_target", "")).lower())

    # ------------------------------------------------------------------ hooks
    def _act(self, action: str) -> ActResult:
        engine = self._engine
        command = action.strip()
        admissible = self._admissible()
        if command not in admissible:
            lowered = {a.lower(): a for a in admissible}
            command = lowered.get(command.lower(), "")
        if not command:
            return ActResult(INVALID_FEEDBACK, 0.0, False, False, None)
        feedback = engine.step(command)
        won = bool(engine.won)
        return ActResult(feedback, REWARD_WON if won else 0.0, won, True, command)

    def _noop_result(self, feedback: str) -> ActResult:
        return ActResult(feedback, 0.0, False, False, None)

    def _anchor_state(self) -> Any:
        return ("alfworld", self._engine.facts())

    def _admissible(self) -> list[str]:
        return [a for a in self._engine.admissible_commands if a != "help"]

    def _won(self) -> bool:
        return self._engine is not None and bool(self._engine.won)

    def _prompt(self, history: list[HistoryEntry]) -> str:
        return render_prompt(
            self.template,
            current_observation=self._last_raw,
            history=history,
            history_length=self.history_length,
            task_description=self._task_text,
            admissible_actions=format_admissible(self._admissible()),
        )

    # ------------------------------------------------------------------ expert
    def expert_response(self) -> str:
        """``<think>…</think><action>…</action>`` with the expert's next command."""
        step = next_expert_step(self._engine, self.task.task_type,
                                self._traj.get("pddl_params", {}))
        return step.response(self._task_text)

    def render(self) -> Any:
        if self.render_mode == "ansi":
            return self._last_raw
        return None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        super().close()
