"""Procedural ALFWorld-compatible problems for all six task types.

A problem is drawn from one shipped THOR floor plan (see :mod:`.catalog`): its real receptacle
instances, a random subset of its object types, each instance placed in a receptacle whose type
ALFRED allows to hold it (``VAL_RECEPTACLE_OBJECTS``), and a goal from ALFWorld's own goal
library (PDDL goal and task-text templates, so the task reads exactly as ALFWorld phrases it).
Each game is written in ALFWorld's layout, ``traj_data.json`` + ``initial_state.pddl`` +
``game.tw-pddl`` (domain, grammar with the task filled in, problem, ``solvable``,
``walkthrough``), so the official alfworld tools load it too (tested with alfworld's own
``AlfredTWEnv`` in ``tests/unit/envs/test_alfworld_generate.py``).

Determinism: problem ``index`` of ``split`` under base ``seed`` is a pure function of those
three numbers (``numpy.random.default_rng([seed, split_code, index])``), so a task id such as
``"gen-train-00042"`` names one problem forever and games can be generated lazily.

Splits follow ALFWorld's scene protocol: ``train`` and ``eval_in_distribution`` (``valid_seen``)
draw from ALFWorld's train scenes with disjoint seed streams (held-out problems in seen rooms);
``eval_out_of_distribution`` (``valid_unseen``) uses only ALFWorld's unseen scenes, FloorPlan
10, 219, 308 and 424 (:data:`.catalog.UNSEEN_SCENE_NUMBERS`), which train never uses. A game is
the same game as another when :func:`game_content_key` agrees (task, scene, task text and where
every object starts, object numbering and THOR coordinates ignored); seen-scene games share
their scene and often their goal with train games, by ALFWorld's design, but not their layout:
every game draws 1..3 copies of each of the scene's object types into random receptacles.

Scenes are as dense as ALFRED makes them: every receptacle instance the floor plan ships, every
pickup type of the floor plan placed (1..3 copies, the goal object 1..4, 2..4 for pick-two:
ALFRED's ``MAX_NUM_OF_OBJ_INSTANCES`` and ``PICKUP_REPEAT_MAX``), and ALFRED's goal rules (task
types by scene type as ``GOALS_VALID``; no pick-two into a coffee machine, toilet-paper hanger
or hand-towel holder; no toaster goals).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from arlgym.envs.alfworld.catalog import (
    LAMP_HOLDERS,
    PICK_TWO_EXCLUDED_RECEPTACLES,
    TASK_TYPES,
    UNSEEN_SCENE_NUMBERS,
    FloorPlan,
    floor_plans,
    tables,
)
from arlgym.errors import ConfigError, TaskNotFound, UnsolvableError

__all__ = [
    "GENERATOR_VERSION",
    "SPLITS",
    "OFFICIAL_SPLIT_DIRS",
    "DEFAULT_SPLIT_SIZES",
    "GeneratedGame",
    "split_floor_plans",
    "generate_game",
    "generate_in_floor_plan",
    "task_ids",
    "parse_task_id",
    "write_game",
    "mangle",
    "domain_text",
    "grammar_template",
    "problem_key",
    "game_content_key",
]

#: Bump when the generated problems change, so on-disk caches are not reused.
GENERATOR_VERSION = "gen-2"
SPLITS: tuple[str, ...] = ("train", "eval_in_distribution", "eval_out_of_distribution")
_SPLIT_CODE = {"train": 0, "eval_in_distribution": 1, "eval_out_of_distribution": 2}
#: The folder of each split under ``json_2.1.1`` in ALFWorld's data layout.
OFFICIAL_SPLIT_DIRS = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
#: ALFWorld's split sizes (3553 train games; 140 seen and 134 unseen eval games).
DEFAULT_SPLIT_SIZES = {"train": 3553, "eval_in_distribution": 140,
                       "eval_out_of_distribution": 134}
_TASK_ID = re.compile(r"^gen-(train|eval_in_distribution|eval_out_of_distribution)-(\d+)$")
_TOOL = {  # the appliance of each state-change task, and the type constant the domain uses
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
#: ALFRED removes the toaster from its goal receptacles ("isn't interesting").
_NO_GOAL_RECEPTACLES = frozenset({"Toaster"})
_DOMAIN_CONSTANT_TYPES = {"rtype": ("SinkBasin", "Microwave", "Fridge"),
                          "otype": ("Knife", "ButterKnife")}


def mangle(thor_id: str) -> str:
    """THOR id -> PDDL name, as ALFWorld spells it (``Apple|+01.20`` -> ``Apple_bar__plus_01_dot_20``)."""
    return (thor_id.replace("|", "_bar_").replace("-", "_minus_").replace("+", "_plus_")
            .replace(".", "_dot_").replace(",", "_comma_"))


@functools.cache
def domain_text() -> str:
    """``alfred.pddl`` as shipped in the alfworld wheel."""
    return (resources.files("alfworld") / "data" / "alfred.pddl").read_text()


@functools.cache
def grammar_template() -> str:
    """``alfred.twl2`` (task slot ``UNKNOWN GOAL``) as shipped in the alfworld wheel."""
    return (resources.files("alfworld") / "data" / "alfred.twl2").read_text()


@dataclass
class GeneratedGame:
    """One generated problem, ready to be written or played."""

    task_id: str
    split: str
    task_type: str
    floor_plan: str
    task_text: str
    pddl_params: dict[str, Any]
    pddl_problem: str
    #: canonical commands that solve the game (checked in the engine unless told otherwise)
    walkthrough: list[str] = field(default_factory=list)
    #: solvability checks the game passed before it was written ("expert", "planner"),
    #: recorded in ``traj_data.json`` so a data folder says how it was vetted
    checks: tuple[str, ...] = ()

    @property
    def grammar(self) -> str:
        return grammar_template().replace("UNKNOWN GOAL", self.task_text)

    def game_json(self) -> dict[str, Any]:
        """The ``game.tw-pddl`` content (TextWorld's PddlEnv format)."""
        return {
            "pddl_domain": domain_text(),
            "grammar": self.grammar,
            "pddl_problem": self.pddl_problem,
            "solvable": True,
            "walkthrough": list(self.walkthrough),
        }

    def traj_data(self) -> dict[str, Any]:
        """The ``traj_data.json`` fields ALFWorld's loaders and handcoded expert read."""
        number = int(self.floor_plan.removeprefix("FloorPlan"))
        return {
            "task_id": self.task_id,
            "task_type": self.task_type,
            "pddl_params": dict(self.pddl_params),
            "scene": {"floor_plan": self.floor_plan, "scene_num": number},
            "turk_annotations": {"anns": [{"task_desc": self.task_text, "assignment_id": "gen",
                                           "high_descs": [], "votes": [1, 1, 1]}]},
            "generator": {"name": "arlgym", "version": GENERATOR_VERSION,
                          "checks": list(self.checks)},
        }

    @property
    def content_key(self) -> str:
        """:func:`game_content_key` of this game."""
        return game_content_key(self.task_type, self.floor_plan, self.task_text, self.pddl_problem)

    @property
    def dirname(self) -> str:
        """ALFWorld's folder naming: ``<type>-<obj>-<mrecep>-<recep>-<scene>/trial_<id>``."""
        p = self.pddl_params
        parent = p["parent_target"] or p["toggle_target"]
        number = self.floor_plan.removeprefix("FloorPlan")
        return f"{self.task_type}-{p['object_target']}-None-{parent}-{number}/trial_{self.task_id}"

    def planning_problem(self) -> str:
        """The problem cut down to what the goal needs, for the planner's solvability check.

        Fast Downward as built for TextWorld searches with no heuristic (lazy search ordered by
        cost alone), so every object it could pick up and every cabinet it could open or close
        multiplies the states it visits: a pick-two in a kitchen took 137 s. Here objects of
        other types are dropped, and receptacles that neither hold a goal object nor have the
        goal's receptacle type lose ``openable``; the same game then plans in ~0.3 s. A plan
        for this problem proves nothing by itself: :func:`.expert.play_plan` replays it in the
        full game, and only a win there counts.
        """
        p = self.pddl_params
        keep_types = {f"{t}Type" for t in (p["object_target"], p["toggle_target"]) if t}
        lines = self.pddl_problem.splitlines()
        dropped = {line.split()[1] for line in lines if line.startswith("(objectType ")
                   and line.split()[2].rstrip(")") not in keep_types}
        lines = [line for line in lines if not dropped & set(_tokens(line))]
        holders = {_tokens(line)[2] for line in lines if line.startswith("(inReceptacle ")}
        goal_rtype = f"{p['parent_target']}Type"
        goal_receptacles = {_tokens(line)[1] for line in lines
                            if line.startswith("(receptacleType ") and _tokens(line)[2] == goal_rtype}
        keep_openable = holders | goal_receptacles
        lines = [line for line in lines
                 if not (line.startswith("(openable ") and _tokens(line)[1] not in keep_openable)]
        return "\n".join(lines) + "\n"


def _tokens(line: str) -> list[str]:
    """The words of one PDDL line of our problems, parentheses removed."""
    return line.replace("(", " ").replace(")", " ").split()


def problem_key(pddl_problem: str) -> str:
    """Identity of a problem's content (initial state + goal), independent of its name."""
    body = pddl_problem.split("(:domain", 1)[-1]
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def game_content_key(task_type: str, scene: str, task_text: str, pddl_problem: str) -> str:
    """Identity of a game as the agent meets it, for auditing splits.

    The task type, scene, task text, and the multiset of (object type, receptacle) pairs the
    problem starts with. Object ids (THOR coordinates, hence the numbering ``apple 2``) are
    left out, so two games that differ only by renaming share a key; works on generated and
    on ALFWorld's own problems (both state ``objectType`` and ``inReceptacle`` facts).
    """
    types: dict[str, str] = {}
    holders: dict[str, str] = {}
    for line in pddl_problem.splitlines():
        line = line.strip()
        if line.startswith("(objectType "):
            words = _tokens(line)
            types[words[1]] = words[2]
        elif line.startswith("(inReceptacle "):
            words = _tokens(line)
            holders[words[1]] = words[2]
    layout = sorted(f"{types.get(o, '?')}@{r}" for o, r in holders.items())
    text = " ".join(task_text.lower().split())
    body = json.dumps([task_type, scene, text, layout])
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


# ------------------------------------------------------------------------------------ splits
@functools.cache
def split_floor_plans(split: str) -> tuple[str, ...]:
    """Floor plans a split draws from: ALFWorld's unseen scenes for OOD, the others otherwise."""
    if split not in _SPLIT_CODE:
        raise ConfigError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    plans = floor_plans()
    ood = split == "eval_out_of_distribution"
    return tuple(name for name, fp in plans.items()
                 if (fp.number in UNSEEN_SCENE_NUMBERS) == ood)


def task_ids(split: str, num: int | None = None) -> list[str]:
    """The enumerated task list of a generated split (ALFWorld sizes by default)."""
    if split not in _SPLIT_CODE:
        raise ConfigError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    n = DEFAULT_SPLIT_SIZES[split] if num is None else int(num)
    if n < 1:
        raise ConfigError(f"split size must be >= 1, got {num!r}")
    return [f"gen-{split}-{i:05d}" for i in range(n)]


def parse_task_id(task_id: str) -> tuple[str, int]:
    match = _TASK_ID.match(task_id)
    if not match:
        raise TaskNotFound(
            f"task_id {task_id!r} is not a generated ALFWorld id like 'gen-train-00042'"
        )
    return match.group(1), int(match.group(2))


# ------------------------------------------------------------------------------------ sampling
def _supports(fp: FloorPlan, task_type: str) -> bool:
    if fp.scene_type not in tables().goals_valid.get(task_type, ()):
        return False  # ALFRED's GOALS_VALID: e.g. heat/cool only in kitchens
    rtypes = fp.receptacle_types()
    if task_type in _TOOL and _TOOL[task_type] not in rtypes:
        return False
    if task_type == "look_at_obj_in_light":
        return bool(fp.lamps) and bool(rtypes & set(LAMP_HOLDERS))
    return True


def _goal_candidates(fp: FloorPlan, task_type: str) -> list[tuple[str, str]]:
    """(object type, parent receptacle type) pairs the task type allows in this floor plan."""
    tab = tables()
    rtypes = fp.receptacle_types()
    need = {
        "pick_clean_then_place_in_recep": tab.cleanable,
        "pick_heat_then_place_in_recep": tab.heatable,
        "pick_cool_then_place_in_recep": tab.coolable,
    }.get(task_type)
    pairs = []
    for obj in fp.object_types:
        if need is not None and obj not in need:
            continue
        homes = {r for r in rtypes if obj in tab.can_contain[r]}
        if task_type == "look_at_obj_in_light":
            if homes:
                pairs.append((obj, ""))
            continue
        for recep in sorted(homes):
            if recep == _TOOL.get(task_type) or recep in _NO_GOAL_RECEPTACLES:
                continue  # "cool X and put it in the fridge" is no task
            if task_type == "pick_two_obj_and_place" and recep in PICK_TWO_EXCLUDED_RECEPTACLES:
                continue  # ALFRED's generator excludes these (they hold one object)
            if homes - {recep}:  # the object must start somewhere else
                pairs.append((obj, recep))
    return pairs


def _position_id(rtype: str, rng: np.random.Generator, used: set[str]) -> str:
    while True:
        x, y, z = rng.uniform(-3.0, 3.0, size=3)
        tid = f"{rtype}|{x:+06.2f}|{abs(y):+06.2f}|{z:+06.2f}"
        if tid not in used:
            used.add(tid)
            return tid


def _location_ids(fp: FloorPlan) -> dict[str, str]:
    """One distinct navigation point per receptacle, from its THOR position."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for r in fp.receptacles:
        gx, gz, rot, hor = int(round(r.position[0] / 0.25)), int(round(r.position[1] / 0.25)), \
            r.position[2] // 90 % 4, r.position[3]
        while True:
            loc = f"loc|{gx}|{gz}|{rot}|{hor}"
            if loc not in taken:
                break
            gx += 1
        taken.add(loc)
        out[r.thor_id] = loc
    return out


def generate_game(split: str, index: int, *, seed: int = 0, attempt: int = 0,
                  max_tries: int = 50) -> GeneratedGame:
    """Problem ``index`` of ``split`` (deterministic); its walkthrough is not yet engine-checked.

    Task types cycle through the six types (``index % 6``), so every prefix of a split is
    balanced across types. ``attempt`` draws another problem for the same slot (used when a
    draw fails the solvability check).
    """
    if split not in _SPLIT_CODE:
        raise ConfigError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    rng = np.random.default_rng([int(seed), _SPLIT_CODE[split], int(index), int(attempt)])
    plans = floor_plans()
    names = [n for n in split_floor_plans(split) if _supports(plans[n], task_type)]
    if not names:
        raise UnsolvableError(f"no floor plan of split {split!r} supports {task_type}")
    for _ in range(max_tries):
        fp = plans[names[int(rng.integers(len(names)))]]
        pairs = _goal_candidates(fp, task_type)
        if pairs:
            break
    else:
        raise UnsolvableError(f"could not sample a {task_type} goal for {split}[{index}]")
    obj, recep = pairs[int(rng.integers(len(pairs)))]
    task_id = f"gen-{split}-{index:05d}"
    return _build(task_id, split, task_type, fp, obj, recep, rng)


def generate_in_floor_plan(floor_plan: str, *, seed: int = 0, attempt: int = 0,
                           task_type: str | None = None) -> GeneratedGame:
    """A problem in one given floor plan (for checks that must cover every floor plan).

    The split is the one the floor plan belongs to (``eval_out_of_distribution`` for ALFWorld's
    unseen scenes, else ``train``); the task type is ``task_type`` or the first of the six,
    starting at ``number % 6``, that ALFRED's rules allow there. The task id is
    ``gen-<split>-fp<number>``.
    """
    plans = floor_plans()
    if floor_plan not in plans:
        raise ConfigError(f"floor_plan={floor_plan!r} is invalid: expected one of the "
                          f"{len(plans)} shipped floor plans, e.g. 'FloorPlan10'")
    fp = plans[floor_plan]
    split = "eval_out_of_distribution" if fp.number in UNSEEN_SCENE_NUMBERS else "train"
    order = [task_type] if task_type else [TASK_TYPES[(fp.number + k) % len(TASK_TYPES)]
                                           for k in range(len(TASK_TYPES))]
    rng = np.random.default_rng([int(seed), 3, fp.number, int(attempt)])
    for ttype in order:
        pairs = _goal_candidates(fp, ttype) if _supports(fp, ttype) else []
        if pairs:
            obj, recep = pairs[int(rng.integers(len(pairs)))]
            return _build(f"gen-{split}-fp{fp.number}", split, ttype, fp, obj, recep, rng)
    raise UnsolvableError(f"{floor_plan} supports none of {order}")


def _build(task_id: str, split: str, task_type: str, fp: FloorPlan, obj: str, recep: str,
           rng: np.random.Generator) -> GeneratedGame:
    tab = tables()
    receptacles = list(fp.receptacles)
    by_type: dict[str, list[str]] = {}
    for r in receptacles:
        by_type.setdefault(r.rtype, []).append(r.thor_id)
    used_ids = {r.thor_id for r in receptacles}

    # ALFRED's counts: every pickup type of the floor plan, 1..MAX_NUM_OF_OBJ_INSTANCES (3)
    # copies; the goal object 1..PICKUP_REPEAT_MAX (4), at least 2 for pick-two.
    counts: dict[str, int] = {}
    for t in fp.object_types:
        if t == obj:
            low = 2 if task_type == "pick_two_obj_and_place" else 1
            counts[t] = int(rng.integers(low, tab.pickup_repeat_max + 1))
        else:
            counts[t] = int(rng.integers(1, tab.max_instances + 1))
    placements: list[tuple[str, str, str]] = []  # (thor id, type, receptacle thor id)
    for t in sorted(counts):
        # The target object never starts in a receptacle of the goal's type.
        homes = [rid for rt, rids in by_type.items()
                 if t in tab.can_contain[rt] and not (t == obj and rt == recep) for rid in rids]
        if not homes:
            continue
        for _ in range(counts[t]):
            placements.append((_position_id(t, rng, used_ids), t,
                               homes[int(rng.integers(len(homes)))]))
    lamp = ""
    if fp.lamps:
        holders = [r.thor_id for r in receptacles if r.rtype in LAMP_HOLDERS]
        if holders:
            lamp = fp.lamps[int(rng.integers(len(fp.lamps)))]
            placements.append((_position_id(lamp, rng, used_ids), lamp,
                               holders[int(rng.integers(len(holders)))]))
    if task_type == "look_at_obj_in_light" and not lamp:
        raise UnsolvableError(f"{fp.name} has no lamp on furniture for {task_id}")

    templates = tab.goal_templates[task_type]
    template = templates[int(rng.integers(len(templates)))]
    task_text = template.format(obj=obj.lower(), recep=recep.lower(), toggle=lamp.lower(),
                                mrecep="")
    goal = tab.goal_pddl[task_type].replace("#", "-").format(obj=obj, recep=recep, toggle=lamp,
                                                             mrecep="")
    problem = _problem_text(task_id, fp, placements, goal)
    params = {"object_target": obj, "parent_target": recep,
              "toggle_target": lamp if task_type == "look_at_obj_in_light" else "",
              "mrecep_target": "", "object_sliced": False}
    return GeneratedGame(task_id, split, task_type, fp.name, task_text, params, problem)


def _problem_text(task_id: str, fp: FloorPlan, placements: list[tuple[str, str, str]],
                  goal: str) -> str:
    tab = tables()
    locs = _location_ids(fp)
    rtypes = sorted({r.rtype for r in fp.receptacles} | set(_DOMAIN_CONSTANT_TYPES["rtype"]))
    otypes = sorted({t for _, t, _ in placements} | set(_DOMAIN_CONSTANT_TYPES["otype"]))
    lines = [f"(define (problem plan_{task_id.replace('-', '_')})", "(:domain alfred)",
             "(:objects", "agent1 - agent"]
    lines += [f"{t}Type - otype" for t in otypes]
    lines += [f"{t}Type - rtype" for t in rtypes]
    lines += [f"{mangle(oid)} - object" for oid, _, _ in placements]
    lines += [f"{mangle(r.thor_id)} - receptacle" for r in fp.receptacles]
    start = "loc|0|0|0|30"
    while start in locs.values():
        start = start.replace("loc|", "loc|9")
    lines += [f"{mangle(loc)} - location" for loc in sorted(set(locs.values()) | {start})]
    lines += [")", "(:init", f"(atLocation agent1 {mangle(start)})"]
    for r in fp.receptacles:
        rid = mangle(r.thor_id)
        lines.append(f"(receptacleType {rid} {r.rtype}Type)")
        lines.append(f"(receptacleAtLocation {rid} {mangle(locs[r.thor_id])})")
        if r.rtype in tab.openable:
            lines.append(f"(openable {rid})")
    loc_of = {r.thor_id: locs[r.thor_id] for r in fp.receptacles}
    for oid, t, rid in placements:
        o = mangle(oid)
        lines.append(f"(objectType {o} {t}Type)")
        if t in tab.toggleable:
            lines.append(f"(toggleable {o})")
        else:
            lines.append(f"(pickupable {o})")
        for flag, members in (("cleanable", tab.cleanable), ("heatable", tab.heatable),
                              ("coolable", tab.coolable), ("sliceable", tab.sliceable)):
            if t in members:
                lines.append(f"({flag} {o})")
        lines.append(f"(inReceptacle {o} {mangle(rid)})")
        lines.append(f"(objectAtLocation {o} {mangle(loc_of[rid])})")
    for rt in rtypes:
        for ot in otypes:
            if ot in tab.can_contain.get(rt, ()):
                lines.append(f"(canContain {rt}Type {ot}Type)")
    lines.append(")")
    return "\n".join(lines) + "\n" + goal.strip() + "\n"


# ------------------------------------------------------------------------------------ writing
def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_game(game: GeneratedGame, folder: str | Path) -> Path:
    """Write ``traj_data.json``, ``initial_state.pddl``, then ``game.tw-pddl`` into ``folder``.

    Each file is written atomically and ``game.tw-pddl`` last, so a folder that has it is
    complete. ``initial_state.pddl`` (the problem alone) is what ALFWorld's own scripts
    (``alfworld-play-tw``, ``alfworld-generate``) read; its loader ``AlfredTWEnv`` reads the
    other two.
    """
    folder = Path(folder)
    _atomic_write(folder / "traj_data.json", json.dumps(game.traj_data(), indent=2))
    _atomic_write(folder / "initial_state.pddl", game.pddl_problem)
    _atomic_write(folder / "game.tw-pddl", json.dumps(game.game_json()))
    return folder
