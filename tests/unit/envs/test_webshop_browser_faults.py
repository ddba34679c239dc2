"""``arl/WebShopBrowser-v0`` with its Chromium killed (real headless Chromium, no mocks).

Each case ends either recovered (a new browser, the episode replayed) or in a clear
``BrowserCrashed`` (an ``EnvCrashed``, so a ``WorkerError``) naming the env, the task and the
cause, and never in a desync: what follows is compared with a "twin" env that never crashed,
driven through the same task. Only the processes of the env under test are killed: the
descendants of its ChromeDriver (``env.driver_pid``), never a process found by name.
"""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.envs.webshop.browser import BrowserCrashed, process_group
from arlgym.errors import EnvCrashed, WorkerError

pytestmark = pytest.mark.usefixtures("chromium")


@pytest.fixture(autouse=True, scope="module")
def _own_cache(own_arlgym_cache):
    """Indexes and product stores go to a temporary cache, not the user's ~/.cache."""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def _kill_chromium(driver_pid: int) -> list[int]:
    """SIGKILL the Chromium process tree under ChromeDriver ``driver_pid`` (ChromeDriver lives)."""
    kids, tree, todo = _children(), [], list(_children().get(driver_pid, []))
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(kids.get(pid, []))
    assert tree, "the ChromeDriver has no browser to kill"
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return tree


def _gone(pgid: int, wait: float = 5.0) -> bool:
    """No live process is left in the browser's process group (Chromium's helpers included)."""
    deadline = time.monotonic() + wait
    while process_group(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return process_group(pgid) == []


def _make():
    return gym.make("arl/WebShopBrowser-v0").unwrapped


@pytest.fixture(scope="module")
def twin():
    """A browser env that never crashes: the reference every recovered env must match."""
    env = _make()
    yield env
    pgid = env.driver_pid
    env.close()
    assert _gone(pgid)


def _play_alike(env, twin, task_id):
    """Reset both on ``task_id`` and play the expert to the end: every reply must be equal."""
    assert env.reset(options={"task_id": task_id}) == twin.reset(options={"task_id": task_id})
    for _ in range(15):
        response = twin.expert_response()
        got, want = env.step(response), twin.step(response)
        assert got == want
        if want[2] or want[3]:
            return want
    raise AssertionError("the expert did not finish")


@pytest.mark.slow
def test_chromium_killed_between_steps_raises_browser_crashed_then_reset_plays_like_a_twin(twin):
    env = _make()
    pids = [env.driver_pid]
    try:
        env.reset(options={"task_id": "goal-0"})
        for _ in range(2):
            env.step(env.expert_response())
        old = env.driver_pid
        assert process_group(old)  # ChromeDriver leads the group its Chromium joined
        _kill_chromium(old)
        with pytest.raises(BrowserCrashed) as err:
            env.step(env.expert_response())
        e = err.value
        assert isinstance(e, EnvCrashed) and isinstance(e, WorkerError)
        assert e.env == "arl/WebShopBrowser-v0" and e.task_id == "goal-0" and "Chromium" in e.cause
        text = str(e)
        assert "goal-0" in text and "during step" in text and "reset()" in text and "new browser" in text
        assert e.__cause__ is None and e.__suppress_context__  # no Selenium traceback chained
        # the episode stays lost (no half-state is served) until reset; the old browser is gone
        with pytest.raises(BrowserCrashed):
            env.step(env.expert_response())
        assert env.driver is None and _gone(old)
        final = _play_alike(env, twin, "goal-0")
        assert final[4]["won"] and env.browser_restarts == 1 and env.driver_pid != old
        pids.append(env.driver_pid)
        _play_alike(env, twin, "goal-9")  # and stays in step on the next task
        assert env.browser_restarts == 1
    finally:
        env.close()
    assert all(_gone(pid) for pid in pids)


@pytest.mark.slow
def test_browser_killed_before_reset_is_replaced_by_reset_transparently(twin):
    env = _make()
    pids = [env.driver_pid]
    try:
        env.reset(options={"task_id": "goal-1"})
        _kill_chromium(env.driver_pid)  # Chromium dies; reset finds out while loading its page
        assert env.reset(options={"task_id": "goal-3"}) == twin.reset(options={"task_id": "goal-3"})
        assert env.browser_restarts == 1
        pids.append(env.driver_pid)
        os.killpg(env.driver_pid, signal.SIGKILL)  # ChromeDriver and Chromium together
        _play_alike(env, twin, "goal-5")
        assert env.browser_restarts == 2 and _gone(pids[-1])
        pids.append(env.driver_pid)
    finally:
        env.close()
    assert all(_gone(pid) for pid in pids)


def test_close_after_a_crash_does_not_raise_and_leaves_no_chromium():
    env = _make()
    pgid = env.driver_pid
    env.reset(options={"task_id": "goal-2"})
    _kill_chromium(pgid)
    env.close()  # the browser is dead: close() kills what is left, quietly
    assert env.driver is None and _gone(pgid)
    env.close()  # twice is fine


@pytest.mark.slow
def test_rollout_collector_replays_the_group_of_a_crashed_browser(monkeypatch):
    """In an async vector with restart=True a crashed browser is handled like a dead worker:
    ``WorkerRestarted``, its group replayed from reset, every returned group complete."""
    from arlgym.policies.scripted import ExpertPolicy
    from arlgym.rollout import RolloutCollector

    monkeypatch.setattr("arlgym.core.vector.DEFAULT_CONTEXT", "fork")

    class KillingExpert(ExpertPolicy):
        turn = 0

        def generate(self, prompts, sampling=None, *, envs=None):
            self.turn += 1
            if self.turn == 2:  # env 0's Chromium dies in its worker before the second step
                _kill_chromium(envs[0].unwrapped.driver_pid())
            return super().generate(prompts, sampling, envs=envs)

    with RolloutCollector("arl/WebShopBrowser-v0", KillingExpert(), group_size=2, num_tasks=1,
                          mode="async", num_workers=1, seed=0, progress=False) as coll:
        got = coll.collect(task_ids=["goal-0"])
        assert coll.vec.env_crashes == 1 and coll.vec.restarts == 0  # the worker was kept
        assert coll.pop_metrics()["rollout/groups_retried"] == 1.0
        assert coll.vec.call("browser_restarts") == [1, 0]
        pgids = coll.vec.call("driver_pid")
    assert all(_gone(pid) for pid in pgids)
    text = gym.make("arl/WebShop-v0").unwrapped  # the browser env's twin: the same pages
    prompts, responses = [text.reset(options={"task_id": "goal-0"})[0]], []
    while True:
        responses.append(text.expert_response())
        obs, _, terminated, truncated, info = text.step(responses[-1])
        prompts.append(obs)
        if terminated or truncated:
            break
    assert len(got) == 2 and info["won"]
    for t in got:  # replayed whole from the reset: the twin's episode, step for step
        assert [s.step for s in t.steps] == list(range(len(responses)))
        assert [s.response for s in t.steps] == responses and [s.prompt for s in t.steps] == prompts[:-1]
        assert t.steps[-1].done and t.steps[-1].won
