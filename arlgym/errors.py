"""The exception types a user of arlgym can meet.

Every error a user can cause derives from :class:`ArlgymError`, so callers can catch one type,
and every message names the bad value, the valid options and what to do about it.
"""

from __future__ import annotations


class ArlgymError(Exception):
    """Base class of every error arlgym raises on purpose."""


class ConfigError(ArlgymError, ValueError):
    """A keyword argument or config value is out of range or of the wrong kind."""


class ResetNeeded(ArlgymError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class LevelFormatError(ArlgymError, ValueError):
    """A level or task file could not be parsed (e.g. malformed XSB)."""


class UnsolvableError(ArlgymError, ValueError):
    """A given level has no solution, or generation could not find a solvable one."""


class UnknownPolicyError(ArlgymError, ValueError):
    """A policy spec string names no known policy."""


class TaskNotFound(ArlgymError, KeyError):
    """A ``task_id`` is not in the env's task list for the requested split."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class ModelNotFound(ArlgymError, ValueError):
    """A model name is no alias, no local directory and no cached Hugging Face hub id."""


class MissingDependency(ArlgymError, ImportError):
    """An optional extra (e.g. ``arlgym[vllm]``) is needed but not installed."""


class PolicyRequestError(ArlgymError, RuntimeError):
    """A remote policy endpoint kept failing after all retries."""


class WorkerError(ArlgymError, RuntimeError):
    """A vector worker process died, stopped answering, or its env raised.

    ``worker`` is the worker's index, ``env_indices`` the envs it hosts, ``cause`` what happened.
    """

    def __init__(self, message: str, *, worker: int | None = None,
                 env_indices: list[int] | None = None, cause: str = "") -> None:
        super().__init__(message)
        self.worker = worker
        self.env_indices = list(env_indices or [])
        self.cause = cause


class EnvCrashed(WorkerError):
    """A process an env drives (a browser, a simulator) died or stopped answering mid-episode.

    The episode is lost (the process held its state), but the env is not: its next ``reset()``
    starts a new process. ``env`` names the env, ``task_id`` the task, ``cause`` what happened.
    An async vector with ``restart=True`` treats it like a dead worker: it raises
    ``WorkerRestarted`` for that worker's envs, so the rollout collector replays their groups.
    """

    def __init__(self, message: str, *, env: str = "", task_id: str | None = None,
                 cause: str = "", worker: int | None = None,
                 env_indices: list[int] | None = None) -> None:
        super().__init__(message, worker=worker, env_indices=env_indices, cause=cause)
        self.env = env
        self.task_id = task_id
