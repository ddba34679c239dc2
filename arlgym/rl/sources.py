"""Rollout sources: where the trainer's rollout batches come from.

The trainer asks a source for one rollout batch of whole groups at a time, tells it when the
weights changed, logs its counts and checkpoints it — and does not know whether the batch was
played in its own process (:class:`InProcessSource`, the synchronous trainer) or by worker
processes while it trained (:class:`AsyncSource`, ``async_rollouts``). A remote env server
would be a third source behind the same four calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from arlgym.policies import SamplingParams
from arlgym.policies.engine import EngineSpec
from arlgym.rl import metrics as M
from arlgym.rl.async_rollout import AsyncRollouts, WorkerSpec

__all__ = ["RolloutSource", "RolloutSampling", "AsyncSpec", "InProcessSource", "AsyncSource"]


@dataclass(frozen=True)
class RolloutSampling:
    """How a rank samples its rollouts: the config's decoding settings and one sampling seed
    per (step, attempt, rank), so a step's draws do not depend on where it is played (the
    learner's collector, or an async worker playing that step's batch)."""

    seed: int
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    rank: int = 0

    @classmethod
    def of(cls, cfg: Any, rank: int) -> RolloutSampling:
        return cls(seed=cfg.seed, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                   max_new_tokens=cfg.max_new_tokens, rank=rank)

    def __call__(self, step: int, attempt: int = 0) -> SamplingParams:
        seed = (self.seed * 7919 + step * 104_729 + attempt * 1_299_709
                + self.rank * 15_485_863) % 2**31
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_new_tokens=self.max_new_tokens, seed=seed)

    def kwargs(self, task: int) -> dict[str, Any]:
        """An async job's sampling (job ``task`` is step ``task``'s batch), as plain kwargs."""
        return asdict(self(task, 0))


@dataclass(frozen=True)
class AsyncSpec:
    """Everything :class:`AsyncSource` needs to start its workers (plain data).

    Attributes:
        worker: the workers' engine and env settings.
        num_workers: rollout worker processes.
        max_staleness, staleness_policy: the bound and how it is kept (:mod:`arlgym.rl.staleness`).
        sampling: the rank's rollout sampling.
    """

    worker: WorkerSpec
    num_workers: int
    max_staleness: int
    staleness_policy: str
    sampling: RolloutSampling

    @classmethod
    def of(cls, cfg: Any, engine: EngineSpec, sampling: RolloutSampling, *, num_tasks: int,
           env_seed: int, collector: dict[str, Any]) -> AsyncSpec:
        """The spec of a run's config; ``num_tasks``/``env_seed``: the rank's task stream;
        ``collector``: extra collector kwargs (env servers)."""
        worker = WorkerSpec(model=cfg.model, seed=cfg.seed, env_id=cfg.env_id,
                            env_kwargs=dict(cfg.env_kwargs), group_size=cfg.group_size,
                            num_tasks=num_tasks, env_seed=env_seed,
                            generation_batch_size=cfg.generation_batch_size,
                            torch_threads=cfg.torch_threads, engine=engine,
                            extra={"collector": collector})
        return cls(worker=worker, num_workers=cfg.rollout_workers,
                   max_staleness=cfg.max_staleness, staleness_policy=cfg.staleness_policy,
                   sampling=sampling)


class RolloutSource(Protocol):
    """What the trainer needs from a rollout source."""

    def batch(self, step: int, attempt: int) -> list[Any]:
        """One rollout batch (trajectories of whole groups) for ``step``'s ``attempt``-th
        rollout (dynamic sampling rolls more than one)."""

    def updated(self, weights: Callable[[], dict[str, Any]]) -> None:
        """The learner finished an update; ``weights()`` gives its state dict if needed."""

    def pop_metrics(self) -> dict[str, float]:
        """Counts since the last call (metric vocabulary keys)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class InProcessSource:
    """The synchronous source: the trainer's collector plays the batch with the live policy.

    Args:
        collector: the :class:`~arlgym.rollout.RolloutCollector` (its policy samples from the
            live model, or from an engine that ``push`` refreshes).
        sampling: ``(step, attempt) -> SamplingParams`` (a :class:`RolloutSampling`).
        push: called after each update when the engine keeps its own weights (vLLM).
    """

    def __init__(self, collector: Any, sampling: Callable[[int, int], Any],
                 push: Callable[[], None] | None = None) -> None:
        self.collector = collector
        self.sampling = sampling
        self.push = push

    def batch(self, step: int, attempt: int) -> list[Any]:
        return self.collector.collect(sampling=self.sampling(step, attempt))

    def updated(self, weights: Callable[[], dict[str, Any]]) -> None:
        if self.push is not None:
            self.push()

    def pop_metrics(self) -> dict[str, float]:
        return self.collector.pop_metrics()

    def state_dict(self) -> dict[str, Any]:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.collector.load_state_dict(state)

    def close(self) -> None:
        self.collector.close()


class AsyncSource:
    """``async_rollouts``: batches come from :class:`~arlgym.rl.async_rollout.AsyncRollouts`.

    The workers start at the first ``batch`` call, so that a resumed run hands them its
    weights, step and task stream. ``pop_metrics`` adds the learner's wait for rollouts
    (``time/learner_wait_s``) to the workers' counts.

    Args:
        collector: the in-process collector, kept for its checkpoint fields (a run can switch
            ``async_rollouts`` off on resume) and closed with the source.
        spec: the workers' settings.
        weights: the learner's current weights (what the workers start with).
    """

    def __init__(self, collector: Any, spec: AsyncSpec,
                 weights: Callable[[], dict[str, Any]]) -> None:
        self.collector = collector
        self.spec = spec
        self.weights = weights
        self.rollouts: Any = None
        self._state: dict[str, Any] | None = None
        self._wait = 0.0

    def batch(self, step: int, attempt: int) -> list[Any]:
        if self.rollouts is None:
            s = self.spec
            self.rollouts = AsyncRollouts(
                s.worker, self.weights(), num_workers=s.num_workers,
                max_staleness=s.max_staleness, policy=s.staleness_policy,
                sampling=s.sampling.kwargs, version=step, state=self._state)
        t0 = time.perf_counter()
        trajs, _staleness, _task = self.rollouts.next_batch()
        self._wait += time.perf_counter() - t0
        return trajs

    def updated(self, weights: Callable[[], dict[str, Any]]) -> None:
        if self.rollouts is not None:
            self.rollouts.push(weights())

    def pop_metrics(self) -> dict[str, float]:
        out = self.collector.pop_metrics()
        if self.rollouts is not None:
            for key, val in self.rollouts.pop_metrics().items():
                out[key] = out.get(key, 0.0) + val
        out[M.TIME_WAIT], self._wait = self._wait, 0.0
        return out

    def state_dict(self) -> dict[str, Any]:
        state = self.collector.state_dict()
        state["async"] = self.rollouts.state_dict() if self.rollouts is not None else self._state
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.collector.load_state_dict(state)
        self._state = state.get("async")

    def close(self) -> None:
        self.collector.close()
        if self.rollouts is not None:
            self.rollouts.close()
            self.rollouts = None
