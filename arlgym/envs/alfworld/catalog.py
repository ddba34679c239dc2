"""What a generated ALFWorld problem may contain, read from the installed ``alfworld`` package.

ALFWorld's games come from ALFRED's THOR scenes. The ``alfworld`` wheel ships, for each of the
THOR floor plans it was built from, the object types present (``FloorPlanN-objects.json``) and
the receptacle instances with their real THOR ids (``FloorPlanN-openable.json``), plus ALFRED's
tables of which object types each receptacle type can hold and which objects can be cleaned,
heated, cooled or toggled (``alfworld/gen/constants.py``). The generator samples only from these
facts, so every object sits where ALFRED could have put it.

Receptacle types that a floor plan's ``objects.json`` lists but its ``openable.json`` does not
(the coffee machine, toaster, stove burners, garbage can, towel holders) get instances at
positions derived from the floor plan name, as THOR ships no position for them in this package:
four stove burners (:data:`INSTANCES_WITHOUT_POSITION`; THOR's kitchens have four, e.g. real
ALFWorld's FloorPlan1 and FloorPlan10 games list ``stoveburner 1``..``4``) and one of each other
type. Sinks and bathtubs are named as THOR names them (``Sink|x|y|z|SinkBasin``), so ALFWorld's
``Demangler`` calls them "sinkbasin 1", never "sinkbasinbasin 1".
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from arlgym.envs.requirements import import_for

__all__ = [
    "FloorPlan",
    "Receptacle",
    "TASK_TYPES",
    "floor_plans",
    "tables",
    "LAMP_TYPES",
    "LAMP_HOLDERS",
    "INSTANCES_WITHOUT_POSITION",
    "UNSEEN_SCENE_NUMBERS",
    "PICK_TWO_EXCLUDED_RECEPTACLES",
]

#: The six ALFWorld task types, in ALFWorld's numbering order (``TASK_TYPES`` 1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: Lamps that ``look_at_obj_in_light`` switches on.
LAMP_TYPES: tuple[str, ...] = ("DeskLamp", "FloorLamp")
#: Furniture a lamp stands on (ALFRED places desk lamps on these; the PDDL toggle action
#: needs the lamp to be in a receptacle).
LAMP_HOLDERS: tuple[str, ...] = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable",
                                 "DiningTable", "TVStand", "CounterTop")


#: ALFWorld's ``valid_unseen`` scenes (ALFRED's validation-unseen floor plans): no train or
#: ``valid_seen`` game of ALFWorld uses them.
UNSEEN_SCENE_NUMBERS: frozenset[int] = frozenset({10, 219, 308, 424})
#: Receptacles ALFRED's generator never makes the goal of a pick-two task (they hold one object):
#: ``goal_to_invalid_receptacle['pick_two_obj_and_place']`` in ALFRED's
#: ``gen/scripts/generate_trajectories.py``.
PICK_TWO_EXCLUDED_RECEPTACLES: frozenset[str] = frozenset(
    {"CoffeeMachine", "ToiletPaperHanger", "HandTowelHolder"})
#: Instances given to a receptacle type that a floor plan lists without any THOR position
#: (default 1).
INSTANCES_WITHOUT_POSITION: dict[str, int] = {"StoveBurner": 4}
#: Types THOR names by their basin: ``Sink|-01.90|+00.97|-01.50|SinkBasin``.
_BASIN_PARENT = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}


@dataclass(frozen=True, slots=True)
class Receptacle:
    """One receptacle instance: THOR id (``Cabinet|+00.68|+00.50|-02.20``), type, position."""

    thor_id: str
    rtype: str
    position: tuple[float, float, int, int]


@dataclass(frozen=True, slots=True)
class FloorPlan:
    """The inventory of one THOR floor plan."""

    name: str
    number: int
    scene_type: str
    receptacles: tuple[Receptacle, ...]
    #: pickupable object types present (movable receptacles such as Mug count as objects)
    object_types: tuple[str, ...]
    #: lamp types present
    lamps: tuple[str, ...]

    def receptacle_types(self) -> set[str]:
        return {r.rtype for r in self.receptacles}


@dataclass(frozen=True, slots=True)
class Tables:
    """ALFRED's compatibility tables (from ``alfworld.gen.constants``)."""

    can_contain: dict[str, frozenset[str]]
    cleanable: frozenset[str]
    heatable: frozenset[str]
    coolable: frozenset[str]
    sliceable: frozenset[str]
    toggleable: frozenset[str]
    openable: frozenset[str]
    movable_receptacles: frozenset[str]
    static_receptacles: frozenset[str]
    scene_type: dict[str, range]
    test_scene_numbers: frozenset[int]
    goal_templates: dict[str, tuple[str, ...]]
    goal_pddl: dict[str, str]
    #: scene types (Kitchen, ...) where ALFRED generates each task type
    goals_valid: dict[str, frozenset[str]]
    #: ALFRED's instance counts: the goal object 1..pickup_repeat_max (2.. for pick-two),
    #: every other pickup type 1..max_instances
    pickup_repeat_max: int
    max_instances: int


def _require_alfworld() -> Any:
    return import_for("arl/ALFWorld-v0", "alfworld.gen.constants", "alfworld.gen.goal_library")


@functools.cache
def tables() -> Tables:
    """ALFRED's tables, read once per process."""
    constants, goal_library = _require_alfworld()
    actions = constants.VAL_ACTION_OBJECTS
    static = frozenset(constants.RECEPTACLES) - frozenset(constants.MOVABLE_RECEPTACLES)
    return Tables(
        can_contain={k: frozenset(v) for k, v in constants.VAL_RECEPTACLE_OBJECTS.items()},
        cleanable=frozenset(actions["Cleanable"]),
        heatable=frozenset(actions["Heatable"]),
        coolable=frozenset(actions["Coolable"]),
        sliceable=frozenset(actions["Sliceable"]),
        toggleable=frozenset(actions["Toggleable"]),
        openable=frozenset(constants.OPENABLE_CLASS_SET),
        movable_receptacles=frozenset(constants.MOVABLE_RECEPTACLES),
        static_receptacles=static,
        scene_type={k: v for k, v in constants.SCENE_TYPE.items()},
        test_scene_numbers=frozenset(constants.TEST_SCENE_NUMBERS),
        goal_templates={k: tuple(v["templates"]) for k, v in goal_library.gdict.items()},
        goal_pddl={k: v["pddl"] for k, v in goal_library.gdict.items()},
        goals_valid={k: frozenset(v) for k, v in constants.GOALS_VALID.items()},
        pickup_repeat_max=int(constants.PICKUP_REPEAT_MAX),
        max_instances=int(constants.MAX_NUM_OF_OBJ_INSTANCES),
    )


def _pseudo_id(rtype: str, x: float, y: float, z: float) -> str:
    """A THOR-style id for an instance without a shipped position."""
    coords = f"{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"
    parent = _BASIN_PARENT.get(rtype)
    return f"{parent}|{coords}|{rtype}" if parent else f"{rtype}|{coords}"


def _receptacle_type(thor_id: str) -> str:
    # Sinks and bathtubs are listed by their basin: "Sink|-01.90|+00.97|-01.50|SinkBasin".
    parts = thor_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


@functools.cache
def floor_plans() -> dict[str, FloorPlan]:
    """Every floor plan shipped in ``alfworld/gen/layouts``, keyed by name (``FloorPlan12``)."""
    tab = tables()
    layouts = resources.files("alfworld.gen") / "layouts"
    placeable = set().union(*tab.can_contain.values())
    plans: dict[str, FloorPlan] = {}
    for entry in sorted(layouts.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith("-objects.json"):
            continue
        name = entry.name.removesuffix("-objects.json")
        number = int(name.removeprefix("FloorPlan"))
        types = json.loads(entry.read_text())
        openable_file = layouts / f"{name}-openable.json"
        placed = json.loads(openable_file.read_text()) if openable_file.is_file() else {}
        receptacles = [
            Receptacle(tid, _receptacle_type(tid), (float(p[0]), float(p[1]), int(p[2]), int(p[3])))
            for tid, p in sorted(placed.items())
        ]
        listed = {r.rtype for r in receptacles}
        k = 0
        for rtype in sorted(set(types) & tab.static_receptacles - listed):
            if rtype not in tab.can_contain:
                continue
            # No THOR position is shipped for these: fixed, distinct pseudo positions.
            for i in range(INSTANCES_WITHOUT_POSITION.get(rtype, 1)):
                pos = (-3.0 - 0.25 * k, 3.0 + 0.25 * (number % 7), 90 * (k % 4), 30)
                receptacles.append(Receptacle(
                    _pseudo_id(rtype, pos[0], 0.90 + 0.01 * i, pos[1]), rtype, pos))
                k += 1
        receptacles = [r for r in receptacles if r.rtype in tab.can_contain]
        scene_type = next((st for st, rng in tab.scene_type.items() if number in rng), "Kitchen")
        objects = sorted(
            t for t in set(types)
            if t in placeable and t not in tab.static_receptacles and "Sliced" not in t
            and t not in LAMP_TYPES
        )
        lamps = tuple(sorted(t for t in set(types) if t in LAMP_TYPES))
        if not receptacles or not objects:
            continue
        plans[name] = FloorPlan(name, number, scene_type, tuple(receptacles), tuple(objects),
                                lamps)
    return plans
