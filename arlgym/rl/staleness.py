"""Bounded staleness between rollout workers and the learner: the pure bookkeeping.

Versions count learner updates: the learner is at version ``L`` after ``L`` updates, and a
group sampled with weights of version ``v`` is *consumed* by the update that starts from
``L``; its staleness is ``L − v`` (0: on-policy, the synchronous trainer). A worker swaps
weights only between groups, so a whole group has one version. ``max_staleness = k`` bounds the
staleness of every consumed group; ``staleness_policy`` says how the bound is kept:

``pace``
    The rollout side waits. A worker may start a group only while fewer than
    ``(L + k + 1) · B`` groups were started (``B`` groups per update, the admission rule of
    AReaL's ``max_head_offpolicyness``), the learner takes the oldest groups first, and it does
    not update while a group in flight would be more than ``k`` versions old when consumed
    later — it waits for that group. Nothing is discarded. With ``k = 0`` every group is sampled
    by the learner's current weights: the synchronous schedule.
``drop``
    Nobody waits for staleness (workers only stop at the queue's capacity). A group that
    reaches the learner more than ``k`` versions old is discarded and the batch is filled with
    other groups; its task is not played again. Counted in ``dropped``.
``withhold``
    As ``drop``, but the over-stale group's *task* is withheld from the task stream's future
    and handed to the next worker that starts, which plays it again with current weights: no
    task is lost (each task started is eventually trained, on samples at most ``k`` old); the
    stale samples themselves are not trained. Counted in ``withheld``.

Guarantees (property-tested over random worker and learner timings in
``tests/unit/rl/test_staleness.py``): no consumed group is more than ``k`` versions old; no
group is consumed twice; ``drop`` never consumes a dropped group; ``withhold`` loses no task;
``pace`` discards nothing and never deadlocks.

The class holds no threads, queues of processes or clocks: the async trainer's queue and
workers call it under one lock, and the property test drives it directly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M

__all__ = ["POLICIES", "Group", "StalenessScheduler", "check_staleness", "staleness_metrics"]

POLICIES = ("drop", "withhold", "pace")


def check_staleness(max_staleness: int, policy: str) -> None:
    """The one check of ``max_staleness`` and ``staleness_policy`` (the config's and the
    scheduler's): a ConfigError naming the setting and its fix."""
    if policy not in POLICIES:
        raise ConfigError(f"staleness_policy={policy!r} is unknown: expected one of "
                          f"{', '.join(POLICIES)}. Fix: --staleness_policy pace")
    if max_staleness < 0:
        raise ConfigError(f"max_staleness must be >= 0, got {max_staleness}. Fix: "
                          "--max_staleness 1 (0: every group sampled by the current weights)")


def staleness_metrics(staleness: list[int], k: int) -> dict[str, float]:
    """Mean, max and histogram (``staleness/hist_0..k``) of the trained turns' staleness."""
    out = {M.STALENESS_MEAN: float(sum(staleness) / len(staleness)) if staleness else 0.0,
           M.STALENESS_MAX: float(max(staleness)) if staleness else 0.0}
    for i in range(k + 1):
        out[f"{M.STALENESS_HIST}{i}"] = float(sum(1 for x in staleness if x == i))
    return out


@dataclass
class Group:
    """One collected group: its id (admission order), task, sampling version, payload."""

    gid: int
    task: int
    version: int
    payload: Any = None


@dataclass
class StalenessScheduler:
    """Admission, queueing and consumption of groups under ``max_staleness`` (module doc).

    Args:
        max_staleness: k, updates a consumed group may lag the learner (>= 0).
        policy: ``pace | drop | withhold``.
        batch_groups: B, groups per update.
        capacity: most groups queued or in flight at once (>= B; default 2·B + k·B).
    """

    max_staleness: int
    policy: str
    batch_groups: int
    capacity: int = 0
    version: int = 0
    started: int = 0
    #: groups admitted and not lost to a worker failure (pace's admission count)
    admitted: int = 0
    next_task: int = 0
    dropped: int = 0
    withheld: int = 0
    queue: deque[Group] = field(default_factory=deque)
    in_flight: dict[int, tuple[int, int]] = field(default_factory=dict)  # gid -> (task, version)
    replay: deque[int] = field(default_factory=deque)

    def __post_init__(self) -> None:
        check_staleness(self.max_staleness, self.policy)
        if self.batch_groups < 1:
            raise ConfigError(f"batch_groups must be >= 1, got {self.batch_groups}")
        if not self.capacity:
            self.capacity = (2 + self.max_staleness) * self.batch_groups
        if self.capacity < self.batch_groups:
            raise ConfigError(f"queue capacity {self.capacity} < {self.batch_groups} groups per "
                              "update: the learner could never fill a batch")

    def resume(self, version: int, next_task: int | None = None,
                pending: Sequence[int] = ()) -> None:
        """Continue at learner version ``version`` (a resumed run's step): ``pace`` counts its
        admissions from there; the task stream goes on at ``next_task`` (default: ``version``)
        and plays the ``pending`` tasks (admitted, never trained) first."""
        self.version = version
        self.started = self.admitted = version
        self.next_task = version if next_task is None else next_task
        self.replay.extend(pending)

    def pending(self) -> list[int]:
        """Every task admitted but not yet trained (in flight, queued or withheld), sorted."""
        return sorted([g.task for g in self.queue] + [t for t, _ in self.in_flight.values()]
                      + list(self.replay))

    def pop_counts(self) -> tuple[int, int]:
        """Groups dropped and withheld since the last call."""
        out = (self.dropped, self.withheld)
        self.dropped = self.withheld = 0
        return out

    # ------------------------------------------------------------------ rollout side
    def may_start(self) -> bool:
        """Whether a worker may start a group now (capacity, and for ``pace`` admission)."""
        if len(self.queue) + len(self.in_flight) >= self.capacity:
            return False
        if self.policy == "pace":
            return self.admitted < (self.version + self.max_staleness + 1) * self.batch_groups
        return True

    def start(self) -> tuple[int, int, int]:
        """Admit one group: ``(gid, task, version)`` — a withheld task first, else the next
        task of the stream; sampled with the learner's current weights."""
        if not self.may_start():
            raise RuntimeError("start() while may_start() is False")
        task = self.replay.popleft() if self.replay else self._new_task()
        gid = self.started
        self.started += 1
        self.admitted += 1
        self.in_flight[gid] = (task, self.version)
        return gid, task, self.version

    def _new_task(self) -> int:
        self.next_task += 1
        return self.next_task - 1

    def is_in_flight(self, gid: int) -> bool:
        return gid in self.in_flight

    def finish(self, gid: int, payload: Any = None, version: int | None = None) -> None:
        """A worker delivered group ``gid``, sampled with weights of ``version`` (default: the
        version it was admitted at; a worker may have had newer weights by then)."""
        task, admitted_at = self.in_flight.pop(gid)
        self.queue.append(Group(gid, task, admitted_at if version is None else version, payload))

    def fail(self, gid: int) -> None:
        """A worker died with group ``gid`` in flight: its task is played again (any policy)."""
        task, _ = self.in_flight.pop(gid)
        self.replay.appendleft(task)
        self.admitted -= 1  # its replay takes the admission slot it held

    # ------------------------------------------------------------------ learner side
    def _too_old(self, version: int, at: int) -> bool:
        return at - version > self.max_staleness

    def take(self) -> list[Group] | None:
        """The next batch of ``B`` groups for the update from the current version, oldest
        first; ``None`` when the learner must wait (not enough groups, or under ``pace`` a
        group in flight that this update would leave behind over-stale)."""
        if self.policy != "pace":
            kept: deque[Group] = deque()
            for g in self.queue:
                if not self._too_old(g.version, self.version):
                    kept.append(g)
                elif self.policy == "drop":
                    self.dropped += 1
                else:
                    self.withheld += 1
                    self.replay.append(g.task)
            self.queue = kept
        if len(self.queue) < self.batch_groups:
            return None
        order = sorted(self.queue, key=lambda g: (g.version, g.gid))
        batch, rest = order[: self.batch_groups], order[self.batch_groups:]
        if self.policy == "pace":
            after = self.version + 1
            if any(self._too_old(v, after) for _, v in self.in_flight.values()):
                return None
            assert not any(self._too_old(g.version, after) for g in rest), "admission rule broken"
        self.queue = deque(sorted(rest, key=lambda g: g.gid))
        return batch

    def updated(self) -> int:
        """The learner finished the update of the batch it took: the version advances."""
        self.version += 1
        return self.version

    def staleness(self, batch: list[Group]) -> list[int]:
        """Each group's staleness for the update from the current version."""
        return [self.version - g.version for g in batch]
