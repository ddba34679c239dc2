"""Async vector envs under faults: a worker killed between steps or mid-step, or SIGSTOPped.

Each case ends either recovered (the worker replaced, the group replayed) or in a clear
``WorkerError`` naming the worker, its envs and the cause, and never in a desync: the replies
that follow are compared with a sync twin driven through the same operations.
Workers use the ``fork`` start method here (fast); the ``__main__``-guard case uses ``spawn``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

from arlgym.core import procfs
from arlgym.core.vector import (
    AsyncGroupVecEnv,
    EnvFactory,
    SyncGroupVecEnv,
    WorkerError,
    WorkerRestarted,
)
from arlgym.policies.base import Completion
from arlgym.rollout import RolloutCollector

OK = "<think>t</think><action>{}</action>"
MOVES = ["up", "left", "down", "right"]
ENV = "arl/Sokoban-v0"


class _SlowOnRequest(gym.Wrapper):
    """Sokoban whose ``step`` sleeps 2 s when the action text contains ``SLOW``."""

    def step(self, action):
        if "SLOW" in action:
            time.sleep(2.0)
        return super().step(action.replace("SLOW", ""))


class _SlowFactory(EnvFactory):
    def __call__(self):
        return _SlowOnRequest(super().__call__())


def _pair(num_tasks=2, group_size=2, **kw):
    """An async vector (2 workers: worker 0 holds group 0, worker 1 group 1) and its sync twin."""
    factories = [_SlowFactory(ENV, {}) for _ in range(num_tasks * group_size)]
    asyn = AsyncGroupVecEnv(factories, num_tasks, group_size, seed=3, num_workers=2,
                            context="fork", **kw)
    sync = SyncGroupVecEnv(factories, num_tasks, group_size, seed=3)
    return asyn, sync


def _actions(n, k, skip=()):
    return [None if i in skip else OK.format(MOVES[(i + k) % 4]) for i in range(n)]


def _same_step(a, b):
    assert a[0] == b[0]
    assert list(a[1]) == list(b[1]) and list(a[2]) == list(b[2]) and list(a[3]) == list(b[3])
    assert [i and i["anchor"] for i in a[4]] == [i and i["anchor"] for i in b[4]]


def _kill_later(pid, delay, sig=signal.SIGKILL):
    t = threading.Timer(delay, os.kill, (pid, sig))
    t.start()
    return t




def test_killed_between_steps_raises_worker_error_and_survivors_stay_in_step():
    asyn, sync = _pair()
    try:
        assert asyn.reset()[0] == sync.reset()[0]
        _same_step(asyn.step(_actions(4, 0)), sync.step(_actions(4, 0)))
        os.kill(asyn.worker_pid(1), signal.SIGKILL)
        with pytest.raises(WorkerError) as info:
            asyn.step(_actions(4, 1))
        err = info.value
        assert err.worker == 1 and err.env_indices == [2, 3]
        assert "worker 1" in str(err) and "envs 2-3" in str(err) and "SIGKILL" in str(err)
        assert "restart=True" in str(err)
        sync.step(_actions(4, 1, skip=(2, 3)))  # the healthy worker did take that step
        # the survivor answers its own requests, not a leftover reply of the failed step
        assert asyn.call_one(0, "to_xsb") == sync.envs[0].unwrapped.to_xsb()
        assert asyn.call_one(1, "to_xsb") == sync.envs[1].unwrapped.to_xsb()
        _same_step(asyn.step(_actions(4, 2, skip=(2, 3))), sync.step(_actions(4, 2, skip=(2, 3))))
        with pytest.raises(WorkerError, match="worker 1"):  # the dead worker's envs stay unusable
            asyn.step(_actions(4, 3))
    finally:
        asyn.close()


def test_killed_mid_step_with_restart_replays_the_group():
    asyn, sync = _pair(restart=True)
    try:
        asyn.reset(), sync.reset()
        _same_step(asyn.step(_actions(4, 0)), sync.step(_actions(4, 0)))
        actions = _actions(4, 1)
        actions[2] = actions[2].replace("<action>", "<action>SLOW")
        timer = _kill_later(asyn.worker_pid(1), 0.4)
        with pytest.raises(WorkerRestarted) as info:
            asyn.step(actions)
        timer.join()
        err = info.value
        assert err.env_indices == [2, 3] and asyn.restarts == 1
        twin = sync.step(_actions(4, 1, skip=(2, 3)))  # the healthy worker's step is kept
        assert [r[0] for r in err.results[:2]] == twin[0][:2]
        assert [r[1] for r in err.results[:2]] == list(twin[1][:2])
        assert err.results[2:] == [None, None]
        # the group is replayed from reset: same first state as the twin's group
        obs_a, infos_a = asyn.reset_envs([2, 3])
        obs_s, infos_s = sync.reset_envs([2, 3])
        assert obs_a == obs_s and [i["anchor"] for i in infos_a] == [i["anchor"] for i in infos_s]
        for k in range(3):
            _same_step(asyn.step(_actions(4, k)), sync.step(_actions(4, k)))
        assert asyn.call("to_xsb") == sync.call("to_xsb")
    finally:
        asyn.close()


def test_sigstopped_worker_times_out_with_clear_error():
    asyn, sync = _pair(timeout=2.0)
    pid = asyn.worker_pid(0)
    try:
        asyn.reset(), sync.reset()
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            asyn.step(_actions(4, 0))
        assert time.monotonic() - t0 < 2.0 * 10  # the timeout ends it; the bound only catches a hang
        msg = str(info.value)
        assert "worker 0" in msg and "envs 0-1" in msg and "timeout=2" in msg and "stopped" in msg
        sync.step(_actions(4, 0, skip=(0, 1)))
        assert asyn.call_one(3, "to_xsb") == sync.envs[3].unwrapped.to_xsb()
    finally:
        asyn.close()
    assert not procfs.alive(pid), "the stopped worker survived close()"


def test_sigstopped_worker_is_replaced_with_restart():
    asyn, sync = _pair(timeout=2.0, restart=True)
    try:
        asyn.reset(), sync.reset()
        os.kill(asyn.worker_pid(0), signal.SIGSTOP)
        with pytest.raises(WorkerRestarted) as info:
            asyn.step(_actions(4, 0))
        assert info.value.env_indices == [0, 1] and "stopped" in str(info.value)
        sync.step(_actions(4, 0, skip=(0, 1)))
        assert asyn.reset_envs([0, 1])[0] == sync.reset_envs([0, 1])[0]
        _same_step(asyn.step(_actions(4, 1)), sync.step(_actions(4, 1)))
    finally:
        asyn.close()


def test_reset_recovers_by_itself_and_restarts_are_bounded():
    asyn, sync = _pair(restart=True, max_restarts=1)
    try:
        asyn.reset(), sync.reset()
        os.kill(asyn.worker_pid(1), signal.SIGKILL)
        assert asyn.reset()[0] == sync.reset()[0]  # a reset needs no replay: it just completes
        os.kill(asyn.worker_pid(1), signal.SIGKILL)
        with pytest.raises(WorkerError, match="max_restarts=1"):
            asyn.step(_actions(4, 0))
    finally:
        asyn.close()


def test_a_stale_reply_is_never_taken_for_a_fresh_one():
    asyn, sync = _pair()
    try:
        asyn.reset(), sync.reset()
        asyn._send(0, "call_one", (0, "to_xsb", (), {}))  # a request whose reply nobody reads
        asyn.step(_actions(4, 0)), sync.step(_actions(4, 0))
        assert asyn.call_one(0, "to_xsb") == sync.envs[0].unwrapped.to_xsb()
    finally:
        asyn.close()


class _CyclePolicy:
    """Deterministic: the move depends on the turn only; kills a worker once on turn ``kill_at``."""

    name = "cycle"

    def __init__(self, kill=None, kill_at=2):
        self.kill, self.kill_at, self.turn = kill, kill_at, 0

    def generate(self, prompts, sampling=None, *, envs=None):
        self.turn += 1
        if self.kill is not None and self.turn == self.kill_at:
            self.kill()
        return [Completion(OK.format(MOVES[self.turn % 4])) for _ in prompts]


@pytest.fixture(autouse=True)
def _fork_workers(monkeypatch):
    monkeypatch.setattr("arlgym.core.vector.DEFAULT_CONTEXT", "fork")


def _collector(policy, **kw):
    return RolloutCollector(ENV, policy, group_size=2, num_tasks=2, mode="async", num_workers=2,
                            seed=5, progress=False, env_kwargs={"max_steps": 4}, **kw)


def test_collector_replays_an_interrupted_group_and_counts_it():
    reference = RolloutCollector(ENV, _CyclePolicy(), group_size=2, num_tasks=2, mode="sync",
                                 seed=5, progress=False, env_kwargs={"max_steps": 4})
    want = reference.collect()
    policy = _CyclePolicy()
    with _collector(policy) as coll:
        policy.kill = lambda: os.kill(coll.vec.worker_pid(1), signal.SIGKILL)
        got = coll.collect()
        assert coll.vec.restarts == 1
        assert coll.pop_metrics() == {"rollout/groups_retried": 1.0, "rollout/groups_dropped": 0.0}
        assert coll.pop_metrics()["rollout/groups_retried"] == 0.0
    assert len(got) == 4
    # group 0 is untouched; group 1 was replayed from reset, so it is whole and starts alike
    assert [s.response for s in got[0].steps] == [s.response for s in want[0].steps]
    for t, w in zip(got, want, strict=True):
        assert t.task_id == w.task_id and t.steps[0].anchor == w.steps[0].anchor
        assert t.steps[-1].done and [s.step for s in t.steps] == list(range(len(t.steps)))


def test_collector_drops_a_group_whole_after_its_retries():
    policy = _CyclePolicy()
    with _collector(policy, max_group_retries=0) as coll:
        policy.kill = lambda: os.kill(coll.vec.worker_pid(1), signal.SIGKILL)
        got = coll.collect()
        assert coll.pop_metrics() == {"rollout/groups_retried": 0.0, "rollout/groups_dropped": 1.0}
    assert [t.group_index for t in got] == [0, 0]
    assert all(t.steps[-1].done for t in got)


def test_missing_main_guard_gives_a_clear_error(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent("""
        from arlgym import make_group_vec
        vec = make_group_vec("arl/Sokoban-v0", 1, 1, mode="async", num_workers=1)
        vec.close()
    """))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("arlgym.errors.WorkerError") and "__main__" in last, proc.stderr[-2000:]
    assert "EOFError" not in proc.stderr.split("WorkerError")[-1]


def test_eval_reports_dropped_episodes_and_resumes(tmp_path, monkeypatch):
    """A group dropped after worker failures is missing from eval: a clear WorkerError that
    says to rerun; the rerun resumes from the episodes already written."""
    import arlgym.evaluation.runner as runner
    from arlgym.policies import make_policy

    class DropsFirstGroupOnce(RolloutCollector):
        dropped = False

        def collect(self, **kw):
            trajs = super().collect(**kw)
            if not DropsFirstGroupOnce.dropped:
                DropsFirstGroupOnce.dropped = True
                self.groups_dropped += 1
                return [t for t in trajs if t.group_index != 0]
            return trajs

    monkeypatch.setattr(runner, "RolloutCollector", DropsFirstGroupOnce)
    out = tmp_path / "ev.jsonl"
    kw = {"episodes": 3, "out": out, "progress": False, "env_kwargs": {"max_steps": 4}}
    with pytest.raises(WorkerError, match="1 of 3 episodes were dropped") as info:
        runner.evaluate(ENV, make_policy("expert"), **kw)
    assert "rerun" in str(info.value)
    summary, trajs = runner.evaluate(ENV, make_policy("expert"), **kw)
    assert summary["episodes"] == 3 and len(trajs) == 3
