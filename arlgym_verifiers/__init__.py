"""The verifiers taskset package of arlgym's text envs: ``vf-eval arlgym-verifiers ...``.

verifiers 0.4 resolves a taskset id to a top-level module and reads its ``__all__`` for the
taskset, env and harness classes; the code lives in :mod:`arlgym.serve.verifiers_env` (see its
docstring and docs/serving.md).
"""

from arlgym.serve.verifiers_env import (
    ArlgymData,
    ArlgymEnv,
    ArlgymEnvConfig,
    ArlgymTask,
    ArlgymTaskset,
    ArlgymTasksetConfig,
    NullHarness,
    NullHarnessConfig,
    load_environment,
)

__all__ = ["ArlgymTasksetConfig", "ArlgymData", "ArlgymTask", "ArlgymTaskset",
           "ArlgymEnvConfig", "ArlgymEnv", "NullHarness", "NullHarnessConfig",
           "load_environment"]
