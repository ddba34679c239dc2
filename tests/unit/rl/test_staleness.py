"""The staleness bookkeeping under random worker and learner timings (hypothesis): no consumed
group is more than k versions old, none is consumed twice, drop never trains a dropped group,
withhold loses no task, pace discards nothing and never deadlocks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlgym.errors import ConfigError
from arlgym.rl.staleness import StalenessScheduler


def simulate(policy, k, batch, workers, schedule, fail_at=()):
    """Drive the scheduler with an event order: each entry names who acts next — a worker
    (starts a group if idle and allowed, else delivers the one it holds) or the learner (takes a
    batch and updates if it can). ``fail_at``: event indices where the acting worker dies."""
    s = StalenessScheduler(max_staleness=k, policy=policy, batch_groups=batch)
    holding = [None] * workers
    consumed, stale, dropped_gids = [], [], set()
    for n, who in enumerate(schedule):
        if who < workers:
            gid = holding[who]
            if gid is None:
                if s.may_start():
                    holding[who] = s.start()[0]
            elif n in fail_at:
                s.fail(gid)
                holding[who] = None
            else:
                s.finish(gid)
                holding[who] = None
        else:
            before = {g.gid for g in s.queue}
            got = s.take()
            dropped_gids |= before - {g.gid for g in s.queue} - {g.gid for g in got or []}
            if got is None:
                continue
            stale += s.staleness(got)
            consumed += [(g.gid, g.task) for g in got]
            s.updated()
    return s, holding, consumed, stale, dropped_gids


def drain(s, holding):
    """Let everything in flight finish, then run the learner while it can."""
    for gid in holding:
        if gid is not None:
            s.finish(gid)


events = st.lists(st.integers(0, 3), min_size=1, max_size=300)
params = dict(k=st.integers(0, 3), batch=st.integers(1, 3), workers=st.integers(1, 3))


@settings(max_examples=600, deadline=None)
@given(policy=st.sampled_from(["drop", "withhold", "pace"]), schedule=events, **params)
def test_no_group_is_consumed_beyond_k_or_twice(policy, k, batch, workers, schedule):
    schedule = [w % (workers + 1) for w in schedule]
    s, holding, consumed, stale, dropped = simulate(policy, k, batch, workers, schedule)
    assert all(0 <= x <= k for x in stale)
    gids = [g for g, _ in consumed]
    assert len(gids) == len(set(gids))
    if policy == "drop":
        assert not dropped & set(gids) and s.dropped == len(dropped)
    if policy == "pace":
        assert s.dropped == s.withheld == 0 and not dropped


@settings(max_examples=300, deadline=None)
@given(schedule=events, fails=st.sets(st.integers(0, 299), max_size=20), **params)
def test_withhold_loses_no_task(k, batch, workers, schedule, fails):
    schedule = [w % (workers + 1) for w in schedule]
    s, holding, consumed, stale, _ = simulate("withhold", k, batch, workers, schedule, fails)
    assert all(0 <= x <= k for x in stale)
    pending = ([g.task for g in s.queue] + [t for t, _ in s.in_flight.values()] + list(s.replay))
    trained = [t for _, t in consumed]
    # every task the stream handed out is trained once or still on its way; none twice
    assert sorted(trained + pending) == list(range(s.next_task))


@settings(max_examples=200, deadline=None)
@given(schedule=events, fails=st.sets(st.integers(0, 299), max_size=20), **params)
def test_pace_never_deadlocks(k, batch, workers, schedule, fails):
    """From any reachable state (worker deaths included), finishing the groups in flight and
    starting new ones lets the learner take its next batch; nothing beyond k on the way."""
    schedule = [w % (workers + 1) for w in schedule]
    s, holding, _, stale, _ = simulate("pace", k, batch, workers, schedule, fails)
    assert all(0 <= x <= k for x in stale) and s.dropped == s.withheld == 0
    drain(s, holding)
    version = s.version
    for _ in range(4 * batch * (k + 2)):
        if s.take() is not None:
            s.updated()
            break
        if s.may_start():
            s.finish(s.start()[0])
    assert s.version == version + 1


def test_k0_pace_is_the_synchronous_schedule():
    s = StalenessScheduler(max_staleness=0, policy="pace", batch_groups=2)
    assert [s.start()[2] for _ in range(2)] == [0, 0] and not s.may_start()
    s.finish(1)
    assert s.take() is None  # one group is not a batch
    s.finish(0)
    batch = s.take()
    assert [g.gid for g in batch] == [0, 1] and s.staleness(batch) == [0, 0]
    s.updated()
    assert s.may_start() and s.start()[2] == 1


def test_drop_and_withhold_count_what_they_discard():
    for policy in ("drop", "withhold"):
        s = StalenessScheduler(max_staleness=0, policy=policy, batch_groups=1)
        a, b = s.start()[0], s.start()[0]
        s.finish(a)
        assert [g.gid for g in s.take()] == [a]
        s.updated()
        s.finish(b)  # sampled at version 0, the learner is at 1
        assert s.take() is None
        assert (s.dropped, s.withheld) == ((1, 0) if policy == "drop" else (0, 1))
        assert list(s.replay) == ([] if policy == "drop" else [1])


def test_bad_settings_name_the_fix():
    with pytest.raises(ConfigError, match="staleness_policy='wait'"):
        StalenessScheduler(max_staleness=1, policy="wait", batch_groups=1)
    with pytest.raises(ConfigError, match="max_staleness must be >= 0"):
        StalenessScheduler(max_staleness=-1, policy="pace", batch_groups=1)


def test_pace_waits_for_a_slow_group_that_would_fall_behind():
    """k=1, one group per update: a slow group sampled at version 0 must be trained by the
    update from version 1 at the latest, so the learner waits for it there."""
    s = StalenessScheduler(max_staleness=1, policy="pace", batch_groups=1)
    slow, fast = s.start()[0], s.start()[0]
    s.finish(fast)
    assert [g.gid for g in s.take()] == [fast]
    s.updated()
    g2 = s.start()[0]
    s.finish(g2)
    assert s.take() is None  # training g2 now would leave `slow` 2 versions behind
    s.finish(slow)
    batch = s.take()
    assert [g.gid for g in batch] == [slow] and s.staleness(batch) == [1]
