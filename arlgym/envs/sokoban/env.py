"""``arl/Sokoban-v0`` (text grid in the prompt) and ``arl/SokobanVision-v0`` (image + text).

Rewards are gym-sokoban's: −0.1 per step, +1 for a box pushed onto a target, −1 for a box pushed
off one, +10 when every box is on a target. An unknown move (or no action at all) is a no-op
that still costs the step penalty, as in ARLArena. ``score`` is the fraction of boxes on
targets; the anchor hashes walls, targets, boxes and the player cell.

Tasks: ``reset(seed=s)`` draws a room seed from the env's RNG in the split's seed range and
generates the room from that seed, so a task id such as ``"6x6-1b-123"`` names one room forever:
``reset(options={"task_id": ...})`` regenerates it. Splits are disjoint by *content*, not only by
seed: small rooms repeat (at 7×7 with one box, 10% of 200 seed-disjoint test rooms were found
verbatim among 3,000 training rooms), so a room's split is a function of its puzzle — walls,
targets and boxes (:func:`room_split`) — and a draw whose puzzle belongs to another split is
redrawn. A held-out room can therefore not be drawn for training from any seed.
``reset(options={"level": xsb})`` plays a given XSB level, and ``levels=<file or list>`` makes
the env draw from a level collection (e.g. Boxoban files).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from arlgym.core.anchors import anchor_hash
from arlgym.core.env import ActResult, AgentEnv, TaskSpec
from arlgym.core.prompts import SOKOBAN_TEXT, SOKOBAN_VISION, HistoryEntry, render_prompt
from arlgym.core.spaces import AnyText
from arlgym.core.validation import check_int, check_pair_of_ints, check_str
from arlgym.envs.sokoban.generator import generate_room
from arlgym.envs.sokoban.render import TILE_SIZE, render_rgb
from arlgym.envs.sokoban.room import MOVE_NAMES, Room, parse_xsb, read_xsb_collection
from arlgym.envs.sokoban.solver import solve
from arlgym.envs.sokoban.teacher import greedy_response
from arlgym.errors import ConfigError, LevelFormatError, TaskNotFound, UnsolvableError

__all__ = ["SokobanEnv", "SokobanVisionEnv", "SPLIT_SEED_RANGES", "room_content_key", "room_split"]

#: Room-seed ranges per split (disjoint ids; the content rule below makes the rooms disjoint).
#: ``val`` is for choosing among checkpoints and designs, so the ``test`` rooms stay unseen by
#: any choice.
SPLIT_SEED_RANGES: dict[str, tuple[int, int]] = {
    "train": (0, 2**30),
    "test": (2**30, 2**31),
    "val": (2**31, 2**31 + 2**30),
}
_SPLIT_ALIASES = {"eval": "test", "validation": "val", "valid": "val"}

#: A room's puzzle hash modulo ``CONTENT_BUCKETS`` decides its split: bucket 0 is ``test``,
#: bucket 1 ``val``, the rest ``train`` (10% / 10% / 80% of the puzzles). Drawing a 200-room
#: panel generates ~2,000 rooms (~1.5 s at 7×7, once per process: :func:`_panel`).
CONTENT_BUCKETS = 10
_BUCKET_SPLIT = {0: "test", 1: "val"}


def room_content_key(room: Room) -> str:
    """The puzzle of a room — walls, targets and boxes, not the player's start (a room whose
    player starts elsewhere is the same puzzle) — as a stable hex digest."""
    return anchor_hash({"h": room.height, "w": room.width, "walls": sorted(room.walls),
                        "targets": sorted(room.targets), "boxes": sorted(room.boxes)})


def room_split(room: Room) -> str:
    """The split a room belongs to, by its content (:func:`room_content_key`)."""
    return _BUCKET_SPLIT.get(int(room_content_key(room)[:12], 16) % CONTENT_BUCKETS, "train")


#: (room settings, split) -> [room seeds of the panel so far, next seed to look at, puzzles seen]
_PANELS: dict[tuple[Any, ...], tuple[list[int], list[int], set[str]]] = {}

REWARD_STEP = -0.1
REWARD_BOX_ON_TARGET = 1.0
REWARD_BOX_OFF_TARGET = -1.0
REWARD_SOLVED = 10.0

_TASK_ID = re.compile(r"^(\d+)x(\d+)-(\d+)b-(\d+)$")
_MOVE_ALIASES = {m: m for m in MOVE_NAMES}


def _normalise_move(action: str) -> str | None:
    """``"Up"``, ``" up. "``, ``"'up'"`` → ``"up"``; anything else → ``None``."""
    token = action.strip().strip("\"'`.!").strip().lower()
    return _MOVE_ALIASES.get(token)


def load_levels(levels: str | Path | Sequence[str] | None) -> list[tuple[str, Room]] | None:
    """The ``levels`` argument as ``(title, room)`` pairs: an XSB collection file or a list of
    XSB strings (None: rooms are generated), each level checked, with the fix in the error."""
    if levels is None:
        return None
    if isinstance(levels, (str, Path)) and Path(levels).is_file():
        try:
            collection = read_xsb_collection(Path(levels).read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise LevelFormatError(f"levels file {str(levels)!r} is not UTF-8 text "
                                   f"({e.reason}); give an XSB level collection") from None
    elif isinstance(levels, (str, Path)):
        raise ConfigError(f"levels={str(levels)!r} is not a file; pass a path or a list of XSB strings")
    elif not isinstance(levels, Sequence) or not all(isinstance(t, str) for t in levels):
        raise ConfigError(f"levels={levels!r} is invalid: expected a file path or a list of "
                          "XSB level strings. Fix: pass e.g. levels='boxoban/000.txt'")
    else:
        collection = [(str(i + 1), text) for i, text in enumerate(levels)]
    if not collection:
        raise ConfigError("levels holds no XSB level")
    out = []
    for title, text in collection:
        try:
            out.append((title, parse_xsb(text)))
        except LevelFormatError as e:
            raise LevelFormatError(f"level {title!r}: {e}") from e
    return out


class SokobanEnv(AgentEnv):
    """Text Sokoban: the prompt shows the room as a grid of ``# _ O X √ P S`` symbols.

    Args:
        dim_room: room size ``(height, width)`` or one int, walls included (paper: 6×6).
        num_boxes: boxes per room (paper: 1).
        max_steps: step budget per episode (paper Table 6: 15).
        search_depth: most reverse pulls in room generation (ARLArena: 30).
        max_solution_length: generated rooms are solvable within this many moves
            (default: ``max_steps``, so every room can be won in time).
        levels: a path to an XSB collection, or a list of XSB strings, to play instead of
            generated rooms.
        cell_separator: string between grid cells in the text view (verl-agent uses "\\t").
        expert_plan_length: how many upcoming moves the expert's ``<think>`` lists.
        **kwargs: the :class:`~arlgym.core.env.AgentEnv` options (history_length,
            format_penalty_coef, on_format_error, strict_format, think_prefilled, render_mode).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    default_max_steps: ClassVar[int] = 15
    cheap_step: ClassVar[bool] = True  # ~0.1 ms: a move, the room's text, the anchor hash
    template = SOKOBAN_TEXT

    def __init__(
        self,
        dim_room: int | Sequence[int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int | None = None,
        search_depth: int = 30,
        max_solution_length: int | None = None,
        levels: str | Path | Sequence[str] | None = None,
        cell_separator: str = "",
        expert_plan_length: int = 4,
        tile_size: int = TILE_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_steps=max_steps, **kwargs)
        where = type(self).__name__
        height, width = check_pair_of_ints(
            "dim_room", dim_room, min=4, max=64, allow_single=True, where=where,
            fix="pass (height, width) with walls included, each 4..64, e.g. dim_room=(6, 6)")
        num_boxes = check_int("num_boxes", num_boxes, min=1, max=(height - 2) * (width - 2) - 1,
                              where=where, example=1)
        tile_size = check_int("tile_size", tile_size, min=1, max=256, where=where,
                              example=TILE_SIZE)
        self.dim_room = (height, width)
        self.num_boxes = num_boxes
        self.search_depth = check_int("search_depth", search_depth, min=1, where=where,
                                      example=30)
        self.max_solution_length = (
            self.max_steps if max_solution_length is None
            else check_int("max_solution_length", max_solution_length, min=1, where=where,
                           example=self.max_steps)
        )
        self.cell_separator = check_str("cell_separator", cell_separator, nonempty=False,
                                        where=where)
        self.expert_plan_length = check_int("expert_plan_length", expert_plan_length, min=1,
                                            where=where, example=4)
        self.tile_size = tile_size
        self.levels = load_levels(levels)
        self.room: Room | None = None
        self._plan_cache: dict[tuple[int, tuple[int, ...]], tuple[str, ...]] = {}

    # ------------------------------------------------------------------ tasks
    def _split_range(self, split: str) -> tuple[int, int]:
        split = _SPLIT_ALIASES.get(split, split)
        if split not in SPLIT_SEED_RANGES:
            raise ConfigError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SEED_RANGES)}")
        return SPLIT_SEED_RANGES[split]

    def task_id_for(self, room_seed: int) -> str:
        h, w = self.dim_room
        return f"{h}x{w}-{self.num_boxes}b-{room_seed}"

    def room_for_seed(self, room_seed: int) -> Room:
        """The generated room of ``room_seed`` (the same for every env with these kwargs)."""
        rng = np.random.default_rng(room_seed)
        return generate_room(
            rng,
            self.dim_room,
            self.num_boxes,
            search_depth=self.search_depth,
            max_solution_length=self.max_solution_length,
        ).room

    reset_option_keys: ClassVar[tuple[str, ...]] = ("level",)

    def _load_task(self, seed: int | None, options: dict[str, Any]) -> TaskSpec:
        self._plan_cache = {}
        if "level" in options:
            if not isinstance(options["level"], str):
                raise ConfigError(f"options['level']={options['level']!r} is invalid: expected "
                                  "an XSB level string. Fix: pass e.g. options={'level': "
                                  "'#####\\n#@$.#\\n#####'}")
            try:
                self.room = parse_xsb(options["level"])
            except LevelFormatError as e:
                raise LevelFormatError(f"options['level']: {e}") from None
            task_id = "xsb-" + anchor_hash(self.room.to_xsb())[:12]
        elif self.levels is not None:
            if "task_id" in options:
                titles = [t for t, _ in self.levels]
                key = str(options["task_id"]).removeprefix("level-")
                if key not in titles:
                    raise TaskNotFound(f"no level titled {key!r}; titles: {titles[:10]}...")
                index = titles.index(key)
            else:
                index = int(self.np_random.integers(len(self.levels)))
            title, self.room = self.levels[index]
            task_id = f"level-{title}"
        else:
            if "task_id" in options:
                room_seed = self._parse_task_id(str(options["task_id"]))
                self.room = self.room_for_seed(room_seed)
                if "split" in options:  # the id must belong to the split asked for
                    low, high = self._split_range(options["split"])
                    split = _SPLIT_ALIASES.get(options["split"], options["split"])
                    if not low <= room_seed < high or room_split(self.room) != split:
                        raise TaskNotFound(
                            f"task_id {options['task_id']!r} is not in split "
                            f"{options['split']!r} (its room seeds are {low}..{high - 1} and its "
                            f"puzzle must belong to the split). Fix: use an id from "
                            "env.unwrapped.list_tasks(split) or drop 'split'")
            else:
                split = _SPLIT_ALIASES.get(options.get("split", "train"), options.get("split", "train"))
                low, high = self._split_range(split)
                while True:  # a puzzle of another split is redrawn: no seed reaches it from here
                    room_seed = int(self.np_random.integers(low, high))
                    self.room = self.room_for_seed(room_seed)
                    if room_split(self.room) == split:
                        break
            task_id = self.task_id_for(room_seed)
        return TaskSpec(task_id=task_id, observation=self._text(), task_type="sokoban")

    def list_tasks(self, split: str = "test", limit: int | None = None) -> list[str]:
        """The split's panel: the first ``limit`` (default 500) room seeds from the start of its
        range whose puzzle belongs to the split, each puzzle once (two seeds that give the same
        room would weigh it twice in a success rate).

        With ``levels=...`` the level titles are the tasks.
        """
        if self.levels is not None:
            titles = [f"level-{t}" for t, _ in self.levels]
            return titles if limit is None else titles[:limit]
        low, high = self._split_range(split)
        limit = check_int("limit", 500 if limit is None else limit, min=0, max=high - low)
        return [self.task_id_for(seed) for seed in self._panel(_SPLIT_ALIASES.get(split, split), limit)]

    def task_content_key(self, task_id: str) -> str:
        """The puzzle of task ``task_id`` (:func:`room_content_key`): a room seed's room, a
        level's room; an ``xsb-`` id (a level given at reset) is its own key."""
        if self.levels is not None:
            titles = dict(self.levels)
            title = task_id.removeprefix("level-")
            if title not in titles:
                raise TaskNotFound(f"no level titled {title!r}; titles: {list(titles)[:10]}...")
            return room_content_key(titles[title])
        if task_id.startswith("xsb-"):
            return task_id
        return room_content_key(self.room_for_seed(self._parse_task_id(task_id)))

    def _panel(self, split: str, limit: int) -> list[int]:
        """The first ``limit`` room seeds of :meth:`list_tasks`, grown on demand and kept for the
        process (every env with these room settings shares it)."""
        key = (self.dim_room, self.num_boxes, self.search_depth, self.max_solution_length, split)
        seeds, cursor, seen = _PANELS.setdefault(key, ([], [self._split_range(split)[0]], set()))
        while len(seeds) < limit:
            room = self.room_for_seed(cursor[0])
            content = room_content_key(room)
            if room_split(room) == split and content not in seen:
                seen.add(content)
                seeds.append(cursor[0])
            cursor[0] += 1
        return seeds[:limit]

    def _parse_task_id(self, task_id: str) -> int:
        match = _TASK_ID.match(task_id)
        if not match:
            raise TaskNotFound(
                f"task_id {task_id!r} is not a Sokoban task id like '6x6-1b-123'"
            )
        h, w, b, room_seed = (int(x) for x in match.groups())
        end = max(high for _, high in SPLIT_SEED_RANGES.values())
        if room_seed >= end:
            raise TaskNotFound(f"task_id {task_id!r}: room seed {room_seed} is beyond every "
                               f"split (seeds 0..{end - 1}). Fix: use an id from "
                               "env.unwrapped.list_tasks(split)")
        if (h, w) != self.dim_room or b != self.num_boxes:
            raise TaskNotFound(
                f"task_id {task_id!r} is for {h}x{w} rooms with {b} box(es), but this env makes "
                f"{self.dim_room[0]}x{self.dim_room[1]} rooms with {self.num_boxes}; "
                f"pass dim_room=({h}, {w}), num_boxes={b}"
            )
        return room_seed

    # ------------------------------------------------------------------ hooks
    def _text(self) -> str:
        assert self.room is not None
        return self.room.to_text(self.cell_separator)

    def _act(self, action: str) -> ActResult:
        assert self.room is not None
        move = _normalise_move(action)
        if move is None:
            return ActResult(
                self._text(), REWARD_STEP, False, False, None
            )
        self.room, delta = self.room.move(move)
        reward = REWARD_STEP
        if delta > 0:
            reward += REWARD_BOX_ON_TARGET
        elif delta < 0:
            reward += REWARD_BOX_OFF_TARGET
        solved = self.room.solved
        if solved:
            reward += REWARD_SOLVED
        return ActResult(self._text(), reward, solved, True, move)

    def _noop_result(self, feedback: str) -> ActResult:
        # The observation stays the grid (what the agent must look at); the step still costs.
        return ActResult(self._text(), REWARD_STEP, False, False, None)

    def _anchor_state(self) -> Any:
        room = self.room
        assert room is not None
        return (room.height, room.width, room.walls, room.targets, room.boxes, room.player)

    def _admissible(self) -> list[str]:
        return list(MOVE_NAMES)

    def _won(self) -> bool:
        return self.room is not None and self.room.solved

    def _score(self) -> float:
        assert self.room is not None
        return self.room.boxes_on_targets / len(self.room.boxes)

    def _prompt(self, history: list[HistoryEntry]) -> str:
        return render_prompt(self.template, current_observation=self._text(), history=history,
                             history_length=self.history_length)

    # ------------------------------------------------------------------ extras
    def to_xsb(self) -> str:
        """The current position in XSB format."""
        if self.room is None:
            raise ConfigError("call reset() before to_xsb()")
        return self.room.to_xsb()

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return render_rgb(self.room, self.tile_size) if self.room is not None else None
        return super().render()

    def solution(self) -> tuple[str, ...]:
        """A move-optimal solution from the current position (cached per position).

        Raises:
            UnsolvableError: the position cannot be solved any more (e.g. a box in a corner).
        """
        assert self.room is not None
        key = self.room.state_key()
        if key not in self._plan_cache:
            sol = solve(self.room)
            if sol is None:
                raise UnsolvableError(
                    f"task {self.task.task_id}: the current position has no solution"
                )
            # Cache every suffix: following the plan never needs another search.
            room = self.room
            for i in range(len(sol.moves)):
                self._plan_cache[room.state_key()] = sol.moves[i:]
                room, _ = room.move(sol.moves[i])
            self._plan_cache[room.state_key()] = ()
        return self._plan_cache[key]

    def expert_response(self) -> str:
        """``<think>plan: next moves</think><action>move</action>`` from the optimal solution."""
        plan = self.solution()
        if not plan:
            return "<think>all boxes are on targets</think><action>up</action>"
        shown = " ".join(plan[: max(1, self.expert_plan_length)])
        return f"<think>plan: {shown}</think><action>{plan[0]}</action>"

    def teacher_response(self) -> str:
        """The greedy teacher's answer (:mod:`arlgym.envs.sokoban.teacher`), in the expert's
        format: imperfect demonstrations (53% of held-out rooms won) that RL can improve on."""
        if self.room is None:
            raise ConfigError("call reset() before teacher_response()")
        return greedy_response(self.room, self.expert_plan_length)


class SokobanVisionEnv(SokobanEnv):
    """Vision Sokoban: observations are ``{"text": prompt, "image": uint8 (H, W, 3)}``.

    The prompt is the paper's vision template (Appendix H.1.4) with an ``<image>`` placeholder;
    past turns in the history window show their action only, since their observation was an
    image. ``render_mode`` defaults to ``"rgb_array"``.
    """

    template = SOKOBAN_VISION
    cheap_step: ClassVar[bool] = False  # each step also renders and PNG-encodes a frame

    def __init__(self, *args: Any, render_mode: str | None = "rgb_array", **kwargs: Any) -> None:
        super().__init__(*args, render_mode=render_mode, **kwargs)
        h, w = self.dim_room
        self.observation_space = spaces.Dict(
            {
                "text": AnyText(),
                "image": spaces.Box(0, 255, (h * self.tile_size, w * self.tile_size, 3), np.uint8),
            }
        )

    def _prompt(self, history: list[HistoryEntry]) -> str:
        shown = [HistoryEntry("(image)", entry.action) for entry in history]
        return render_prompt(self.template, current_observation="", history=shown,
                             history_length=self.history_length)

    def _observation(self, prompt: str) -> dict[str, Any]:
        assert self.room is not None
        return {"text": prompt, "image": render_rgb(self.room, self.tile_size)}
