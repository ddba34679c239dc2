"""ALFWorld on the real TextWorld PDDL engine (``arl/ALFWorld-v0``).

Modules:
    ``catalog``   floor-plan inventories (receptacles, objects) read from the installed
                  ``alfworld`` package, and ALFRED's object/receptacle compatibility tables.
    ``generator`` procedural ALFWorld-compatible problems for the six task types, the
                  on-disk layout (``traj_data.json`` + ``game.tw-pddl``) and the split lists.
    ``engine``    a fast TextWorld PDDL game runner (caches what the engine re-derives every
                  step) and the unmodified reference engine used by the differential test.
    ``expert``    a state-aware expert for all six task types (planner fallback).
    ``env``       :class:`ALFWorldEnv`.
    ``cli``       ``arlgym alfworld generate``.

Nothing here imports TextWorld at package import time; the engine is imported when an env is
made, so ``import arlgym`` stays light.
"""
