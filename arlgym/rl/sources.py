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
from typing import Any, Protocol

from arlgym.rl import metrics as M

__all__ = ["RolloutSource", "InProcessSource", "AsyncSource"]


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
        sampling: ``(step, attempt) -> SamplingParams``.
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
        start: ``(version, state) -> AsyncRollouts`` (the learner's step and a checkpoint's
            task stream, or None).
    """

    def __init__(self, collector: Any, start: Callable[[int, dict[str, Any] | None], Any]) -> None:
        self.collector = collector
        self.start = start
        self.rollouts: Any = None
        self._state: dict[str, Any] | None = None
        self._wait = 0.0

    def batch(self, step: int, attempt: int) -> list[Any]:
        if self.rollouts is None:
            self.rollouts = self.start(step, self._state)
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
