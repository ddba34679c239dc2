"""An expert for the six ALFWorld task types, for behaviour-cloning data and solvability checks.

It reads the true PDDL state (where each object is, what is open, what the agent holds) and the
goal's ``pddl_params`` from ``traj_data.json``, so it works on generated and official games
alike, and picks the next command of a direct plan: go to the object, open its receptacle if
closed, take it, clean/heat/cool it at the sink/microwave/fridge or switch on the lamp, go to the
goal receptacle, open it, put the object there (twice for ``pick_two_obj_and_place``). When its
command is not admissible (a state it did not plan for), it asks Fast Downward for an optimal
plan from the current state and takes that plan's first step.

It is a privileged expert (it knows where objects are, as ALFWorld's planner expert does); the
``<think>`` text states the subgoal it is pursuing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arlgym.envs.alfworld.engine import AlfredGame

__all__ = ["ExpertStep", "next_expert_step", "play_expert", "play_plan"]

_TOOL = {
    "pick_clean_then_place_in_recep": ("sinkbasintype", "isclean", "clean"),
    "pick_heat_then_place_in_recep": ("microwavetype", "ishot", "heat"),
    "pick_cool_then_place_in_recep": ("fridgetype", "iscool", "cool"),
}


@dataclass(frozen=True, slots=True)
class ExpertStep:
    """The expert's next command and the reason it gives."""

    command: str
    reason: str

    def response(self, task: str) -> str:
        think = f"My task is to: {task} {self.reason} So I will '{self.command}'."
        return f"<think>{think}</think><action>{self.command}</action>"


class _View:
    """The facts the expert needs, indexed once per step."""

    def __init__(self, game: AlfredGame) -> None:
        self.names = game.entity_names()
        self.location: str = ""
        self.held: str | None = None
        self.in_recep: dict[str, str] = {}
        self.otype: dict[str, str] = {}
        self.rtype: dict[str, str] = {}
        self.r_loc: dict[str, str] = {}
        self.flags: set[tuple[str, str]] = set()
        for fact in game.state.facts:
            args = [v.name for v in fact.arguments]
            name = fact.name
            if name == "atlocation":
                self.location = args[1]
            elif name == "holds":
                self.held = args[1]
            elif name == "inreceptacle":
                self.in_recep[args[0]] = args[1]
            elif name == "objecttype":
                self.otype[args[0]] = args[1]
            elif name == "receptacletype":
                self.rtype[args[0]] = args[1]
            elif name == "receptacleatlocation":
                self.r_loc[args[0]] = args[1]
            elif len(args) == 1:
                self.flags.add((name, args[0]))

    def n(self, entity: str) -> str:
        return self.names.get(entity, entity).strip()

    def of_type(self, otype: str) -> list[str]:
        return sorted((o for o, t in self.otype.items() if t == otype), key=self.n)

    def receptacles(self, rtype: str) -> list[str]:
        return sorted((r for r, t in self.rtype.items() if t == rtype), key=self.n)

    def closed(self, r: str) -> bool:
        return ("openable", r) in self.flags and ("opened", r) not in self.flags


def _approach(v: _View, r: str, purpose: str) -> ExpertStep | None:
    """Go to receptacle ``r`` and open it if needed; ``None`` when already there and open."""
    if v.location != v.r_loc.get(r):
        return ExpertStep(f"go to {v.n(r)}", f"I need to go to the {v.n(r)} {purpose}.")
    if v.closed(r):
        return ExpertStep(f"open {v.n(r)}", f"The {v.n(r)} is closed, so I open it.")
    return None


def _fetch(v: _View, candidates: list[str], what: str) -> ExpertStep | None:
    for o in candidates:
        r = v.in_recep.get(o)
        if r is None:
            continue
        step = _approach(v, r, f"to get the {v.n(o)}")
        if step is not None:
            return step
        return ExpertStep(f"take {v.n(o)} from {v.n(r)}",
                          f"The {v.n(o)} is here; I take it because I need {what}.")
    return None


def _subgoal(v: _View, task_type: str, params: dict[str, Any]) -> ExpertStep | None:
    obj_t = str(params.get("object_target", "")).lower() + "type"
    recep_t = str(params.get("parent_target", "")).lower() + "type"
    objects = v.of_type(obj_t)
    what = f"a {params.get('object_target', '').lower()}"
    if task_type == "look_at_obj_in_light":
        lamp_t = str(params.get("toggle_target", "")).lower() + "type"
        if v.held not in objects:
            return _fetch(v, objects, what)
        lamps = [lmp for lmp in v.of_type(lamp_t) if lmp in v.in_recep]
        if not lamps:
            return None
        lamp = lamps[0]
        r = v.in_recep[lamp]
        if v.location != v.r_loc.get(r):
            return ExpertStep(f"go to {v.n(r)}", f"The {v.n(lamp)} is on the {v.n(r)}; I go there "
                              f"with the {v.n(v.held)}.")
        return ExpertStep(f"use {v.n(lamp)}", f"I switch on the {v.n(lamp)} to look at the "
                          f"{v.n(v.held)} under it.")
    goal_receps = v.receptacles(recep_t)
    if not goal_receps:
        return None
    needed = 2 if task_type == "pick_two_obj_and_place" else 1
    tool = _TOOL.get(task_type)

    def done(o: str) -> bool:
        return tool is None or (tool[1], o) in v.flags

    # The goal receptacle: one already holding a finished object, else the first by name.
    target = next((r for r in goal_receps
                   if any(v.in_recep.get(o) == r and done(o) for o in objects)), goal_receps[0])
    placed = [o for o in objects if v.in_recep.get(o) == target and done(o)]
    if len(placed) >= needed:
        return None
    if v.held is not None and v.held in objects and v.held not in placed:
        o = v.held
        if tool is not None and not done(o):
            tools = v.receptacles(tool[0])
            if not tools:
                return None
            if v.location != v.r_loc.get(tools[0]):
                return ExpertStep(f"go to {v.n(tools[0])}",
                                  f"I hold the {v.n(o)} and must {tool[2]} it with the "
                                  f"{v.n(tools[0])}.")
            return ExpertStep(f"{tool[2]} {v.n(o)} with {v.n(tools[0])}",
                              f"I {tool[2]} the {v.n(o)} here.")
        step = _approach(v, target, f"to put the {v.n(o)} there")
        if step is not None:
            return step
        return ExpertStep(f"move {v.n(o)} to {v.n(target)}",
                          f"I put the {v.n(o)} in/on the {v.n(target)}.")
    if v.held is not None:
        return None  # holding something else: leave it to the planner
    return _fetch(v, [o for o in objects if o not in placed], what)


def next_expert_step(game: AlfredGame, task_type: str, params: dict[str, Any]) -> ExpertStep:
    """The expert's next command in ``game``'s current state (always admissible if any is)."""
    step = _subgoal(_View(game), task_type, params)
    if step is not None and step.command in game.admissible_commands:
        return step
    plan = game.plan()
    if plan and plan[0] in game.admissible_commands:
        return ExpertStep(plan[0], "Following the plan from here.")
    fallback = "look" if "look" in game.admissible_commands else game.admissible_commands[0]
    return ExpertStep(fallback, "I look around.")


def play_expert(game: AlfredGame, task_type: str, params: dict[str, Any],
                max_steps: int = 50) -> list[str] | None:
    """Reset ``game`` and let the expert play; its commands if it wins, else ``None``."""
    game.reset()
    commands: list[str] = []
    for _ in range(max_steps):
        if game.won:
            return commands
        step = next_expert_step(game, task_type, params)
        commands.append(step.command)
        game.step(step.command)
    return commands if game.won else None


def play_plan(game: AlfredGame, game_json: Mapping[str, Any],
              planning_problem: str | None = None) -> list[str] | None:
    """The planner's solvability check: a Fast Downward plan that wins when played.

    Loads ``game_json`` into ``game`` and asks for a plan from its initial state (for
    ``planning_problem`` instead, when given: a cut-down problem that plans faster, see
    :meth:`.generator.GeneratedGame.planning_problem`), then plays the plan in the full game.
    The plan is not trusted: only a win in the full game counts. Returns the plan, or ``None``
    when the planner finds none (an unsolvable problem) or its plan does not win there (a game
    that starts won has an empty plan and fails too: it is no task). ``game`` is left on
    ``game_json``.
    """
    if planning_problem is not None:
        game.load(dict(game_json, pddl_problem=planning_problem))
    else:
        game.load(game_json)
    game.reset()
    plan = game.plan()
    game.load(game_json)
    game.reset()
    if not plan:
        return None
    for command in plan:
        if command not in game.admissible_commands:
            return None
        game.step(command)
    return plan if game.won else None
