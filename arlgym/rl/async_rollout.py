"""Asynchronous rollouts: worker processes play rollout batches while the learner trains.

The synchronous trainer alternates — collect a batch (the learner idles), update (the sampler
idles). With ``async_rollouts: true`` the rollout side runs in ``rollout_workers`` processes,
each with its own copy of the weights, its own HF engine (CPU) and its own env vector. The unit
of work is a *job*: one rollout batch of the rank's ``num_tasks`` whole groups, exactly what the
synchronous collector plays per step (same task seeds, same sampling seeds), so a job sampled by
the learner's current weights is the synchronous batch, bit for bit.

Flow (one learner process, a controller thread inside it, N worker processes):

* the controller admits jobs under a :class:`~arlgym.rl.staleness.StalenessScheduler`
  (``max_staleness``, ``staleness_policy``) and sends each to an idle worker with the weight
  version it must be sampled with at least;
* a worker takes the newest weights it has been sent, plays the job and returns its
  trajectories, every turn stamped with ``policy_version``;
* the learner takes the next job (oldest first), trains on it, and pushes the new weights to
  every worker (``push``) — versioned, so a worker never samples with weights older than the
  version its job was admitted at;
* a worker that dies is replaced (with a warning); its job's task is played again.

The learner's idle time waiting for a job (``time/learner_wait_s``) and the workers' busy
fraction (``async/rollout_busy_frac``) are logged each step.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from arlgym.errors import ConfigError, WorkerError
from arlgym.policies import SamplingParams
from arlgym.policies.engine import EngineSpec, make_engine
from arlgym.rl import metrics as M
from arlgym.rl.staleness import StalenessScheduler
from arlgym.rollout import RolloutCollector

__all__ = ["AsyncRollouts", "Job", "WorkerSpec", "job_seed", "worker_engine"]


def job_seed(base: int, task: int, num_tasks: int) -> int:
    """The env seed of rollout job ``task``: the synchronous collector's ``task``-th batch."""
    return base + task * num_tasks


@dataclass
class Job:
    """One rollout batch for a worker: admission id, task index (the synchronous step whose
    batch it is), the least weight version to sample with, and the sampling parameters."""

    gid: int
    task: int
    version: int
    sampling: dict[str, Any]


@dataclass
class _Worker:
    index: int
    process: Any
    jobs: Any
    weights: Any
    job: Job | None = None
    started_at: float = 0.0


@dataclass
class WorkerSpec:
    """What a worker process needs to build its engine and env vector (picklable).

    ``engine`` says what it samples with (:func:`arlgym.policies.engine.make_engine`; None:
    an HF copy of ``model``, or the settings of ``extra["engine"]``, a dict of
    :class:`~arlgym.policies.engine.EngineSpec` fields); ``extra["collector"]``: more
    collector kwargs (env servers).
    """

    model: str
    seed: int
    env_id: str
    env_kwargs: dict[str, Any]
    group_size: int
    num_tasks: int
    env_seed: int
    generation_batch_size: int
    torch_threads: int
    extra: dict[str, Any] = field(default_factory=dict)
    engine: EngineSpec | None = None

    def __post_init__(self) -> None:
        if self.engine is None:
            given = dict(self.extra.get("engine") or {})
            max_len = given.pop("engine_kwargs", {}).get("max_model_len", 0)
            self.engine = EngineSpec(**{"model": self.model, "seed": self.seed,
                                        "generation_batch_size": self.generation_batch_size,
                                        "max_model_len": max_len, **given,
                                        "urls": tuple(given.get("urls", ()))})


#: the old name of :class:`WorkerSpec`
_Spec = WorkerSpec


def worker_engine(spec: WorkerSpec, index: int) -> tuple[Any, Any]:
    """Worker ``index``'s policy and its weight loader ``load(version, state_dict)``
    (:func:`arlgym.policies.engine.make_engine`: an HF copy, a vLLM engine of its own, or
    vLLM server ``urls[index]`` with its own NCCL port)."""
    return make_engine(spec.engine, index=index)


def _worker_main(spec: WorkerSpec, jobs: Any, weights: Any, results: Any, index: int = 0) -> None:
    """A rollout worker's loop (runs in its own process)."""
    if spec.torch_threads:
        torch.set_num_threads(spec.torch_threads)
    policy, load = worker_engine(spec, index)
    # the vector's mode as in the synchronous trainer ("auto"): envs that are not thread-safe
    # (ALFWorld) step and reset in their own processes, off the worker's sampling thread, on
    # whatever core is free — the learner's idle time included
    collector = RolloutCollector(spec.env_id, policy, group_size=spec.group_size,
                                 num_tasks=spec.num_tasks, env_kwargs=spec.env_kwargs,
                                 seed=spec.env_seed, progress=False,
                                 **{"mode": "auto", **spec.extra.get("collector", {})})
    version = -1

    def newest(block: bool) -> None:
        nonlocal version
        while True:
            try:
                v, state = weights.get(block=block)
            except queue.Empty:
                return
            if v > version:
                load(v, state)
                version = v
            block = False

    try:
        while True:
            job = jobs.get()
            if job is None:
                return
            newest(block=False)
            while version < job.version:  # the push of this job's version is on its way
                newest(block=True)
            collector.load_state_dict({"next_seed": job_seed(spec.env_seed, job.task,
                                                             spec.num_tasks),
                                       "batches": job.task})
            t0 = time.perf_counter()
            trajs = collector.collect(sampling=SamplingParams(**job.sampling))
            busy = time.perf_counter() - t0
            for traj in trajs:  # vision turns keep their image inputs: the learner trains on them
                for step in traj.steps:
                    step.policy_version = version
            results.put((job.gid, version, trajs, busy, collector.pop_metrics()))
    finally:
        collector.close()


class AsyncRollouts:
    """The learner side of asynchronous rollouts: workers, controller thread, weight pushes.

    Args:
        spec: the workers' engine and env settings.
        weights: the learner's initial weights (version 0).
        num_workers: rollout worker processes.
        max_staleness, policy: the bound and how it is kept (:mod:`arlgym.rl.staleness`).
        sampling: ``task -> SamplingParams kwargs`` (the synchronous step's sampling seed).
        max_restarts: worker replacements allowed over the run; one more raises WorkerError.
        version: the learner's version of ``weights`` (its step; > 0 on resume).
        state: a :meth:`state_dict` to continue (resume), or None for a fresh task stream.
    """

    def __init__(self, spec: WorkerSpec, weights: dict[str, torch.Tensor], *, num_workers: int,
                 max_staleness: int, policy: str, sampling: Any, max_restarts: int = 5,
                 version: int = 0, state: dict[str, Any] | None = None) -> None:
        if num_workers < 1:
            raise ConfigError(f"rollout_workers must be >= 1, got {num_workers}")
        self.spec = spec
        self.sampling = sampling
        self.max_restarts = max_restarts
        self.restarts = 0  # since the last pop_metrics
        self.total_restarts = 0
        self._ctx = torch.multiprocessing.get_context("spawn")
        self.results = self._ctx.Queue()
        self.sched = StalenessScheduler(max_staleness=max_staleness, policy=policy,
                                        batch_groups=1, capacity=num_workers + max_staleness + 1)
        # resume: the tasks admitted but not trained are played first
        self.sched.resume(version, next_task=int(state["next_task"]) if state else None,
                          pending=[int(t) for t in state["pending"]] if state else ())
        self._latest = (version, _clone(weights))
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._busy = 0.0
        self._since = time.perf_counter()
        self._metrics: dict[str, float] = {}
        self.workers = [self._spawn(i) for i in range(num_workers)]
        self._thread = threading.Thread(target=self._control, name="arlgym-async-rollouts",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ workers
    def _spawn(self, index: int) -> _Worker:
        jobs, weights = self._ctx.Queue(), self._ctx.Queue()
        weights.put(self._latest)
        proc = self._ctx.Process(target=_worker_main,
                                 args=(self.spec, jobs, weights, self.results, index),
                                 name=f"arlgym-rollout-{index}", daemon=False)
        proc.start()
        return _Worker(index, proc, jobs, weights)

    def _replace_dead(self) -> None:
        for i, w in enumerate(self.workers):
            if w.process.is_alive():
                continue
            self.restarts += 1
            self.total_restarts += 1
            lost = f" with job {w.job.task} in flight (played again)" if w.job else ""
            warnings.warn(f"async rollouts: worker {w.index} died (exit code "
                          f"{w.process.exitcode}){lost}; replacing it", stacklevel=2)
            if w.job is not None:
                self.sched.fail(w.job.gid)
            if self.total_restarts > self.max_restarts:
                raise WorkerError(f"async rollouts: {self.total_restarts} worker deaths (more than "
                                  f"{self.max_restarts}); something is wrong for good")
            self.workers[i] = self._spawn(w.index)

    # ------------------------------------------------------------------ controller thread
    def _control(self) -> None:
        try:
            while not self._closed:
                with self._cond:
                    self._replace_dead()
                    for w in self.workers:
                        if w.job is None and self.sched.may_start():
                            gid, task, version = self.sched.start()
                            w.job = Job(gid, task, version, self.sampling(task))
                            w.started_at = time.perf_counter()
                            w.jobs.put(w.job)
                try:
                    gid, version, trajs, busy, health = self.results.get(timeout=0.1)
                except queue.Empty:
                    continue
                with self._cond:
                    for w in self.workers:
                        if w.job is not None and w.job.gid == gid:
                            w.job = None
                    if self.sched.is_in_flight(gid):
                        self.sched.finish(gid, trajs, version=version)
                    self._busy += busy
                    for k, v in health.items():
                        self._metrics[k] = self._metrics.get(k, 0.0) + v
                    self._cond.notify_all()
        except BaseException as e:  # surfaced to the learner by next_batch
            with self._cond:
                self._error = e
                self._cond.notify_all()

    # ------------------------------------------------------------------ learner side
    def next_batch(self, timeout: float = 600.0) -> tuple[list[Any], int, int]:
        """The next job's trajectories, its staleness and its task index (blocks)."""
        deadline = time.perf_counter() + timeout
        with self._cond:
            while True:
                if self._error is not None:
                    raise WorkerError(f"async rollouts failed: {self._error!r}") from self._error
                batch = self.sched.take()
                if batch is not None:
                    (group,) = batch
                    staleness = self.sched.staleness(batch)[0]
                    self._cond.notify_all()
                    return group.payload, staleness, group.task
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise WorkerError(f"async rollouts: no rollout batch within {timeout:.0f} s")
                self._cond.wait(timeout=min(left, 1.0))

    def push(self, weights: dict[str, torch.Tensor]) -> int:
        """The learner finished an update: send the new weights (next version) to every worker,
        then advance the scheduler's version (in that order: a job admitted at the new version
        always finds its weights on the way)."""
        with self._cond:
            version = self.sched.version + 1
            self._latest = (version, _clone(weights))
            for w in self.workers:
                w.weights.put(self._latest)
            self.sched.updated()
            self._cond.notify_all()
            return version

    def pop_metrics(self) -> dict[str, float]:
        """Counts since the last call: dropped/withheld jobs, worker restarts, rollout busy
        fraction of the workers' wall time, the workers' env health counts."""
        with self._cond:
            now = time.perf_counter()
            wall = max(1e-9, (now - self._since) * len(self.workers))
            dropped, withheld = self.sched.pop_counts()
            out = {M.ASYNC_DROPPED: float(dropped), M.ASYNC_WITHHELD: float(withheld),
                   M.ASYNC_RESTARTS: float(self.restarts),
                   M.ASYNC_BUSY: min(1.0, self._busy / wall),
                   **self._metrics}
            self.restarts = 0
            self._busy, self._since, self._metrics = 0.0, now, {}
            return out

    def state_dict(self) -> dict[str, Any]:
        """The task stream's position: the next new task and every task admitted but not yet
        trained (in flight, queued, or withheld); a resume plays those again first."""
        with self._cond:
            return {"next_task": self.sched.next_task, "pending": self.sched.pending()}

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=5)
        for w in self.workers:
            try:
                w.jobs.put(None)
            except (OSError, ValueError):
                pass
        # drain the results queue meanwhile: a worker that put a batch nobody will train on
        # cannot exit before its queue's feeder thread has flushed it
        deadline = time.perf_counter() + 10
        while any(w.process.is_alive() for w in self.workers) and time.perf_counter() < deadline:
            try:
                self.results.get(timeout=0.1)
            except queue.Empty:
                pass
            except (OSError, EOFError):
                # a batch whose sender already exited: its tensors were shared through that
                # process's file descriptors and cannot be rebuilt — nobody trains on it anyway
                pass
        for w in self.workers:
            if w.process.is_alive():
                w.process.kill()
            w.process.join(timeout=5)


def _clone(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU copies: the queue pickles in a feeder thread, after the learner may already
    have changed the live tensors."""
    return {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
