"""Remote envs in arlgym's own stack (``make_group_vec(..., servers=[...])``) and the faults of a
server process: killed mid-episode or stopped (SIGSTOP) gives a clear error in bounded time,
for arlgym's client and for OpenEnv's."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from openenv.core.generic_client import GenericEnvClient

from arlgym.core.vector import make_group_vec
from arlgym.errors import ConfigError
from arlgym.serve.client import RemoteEnv, RemoteEnvError
from arlgym.serve.server import EnvServer

ROOT = Path(__file__).resolve().parents[3]
GOOD = "<think>t</think><action>{}</action>"


def policy(infos, rng: random.Random) -> list[str | None]:
    out = []
    for info in infos:
        if info is None:
            out.append(None)
        elif rng.random() < 0.1:
            out.append("no tags at all")
        else:
            out.append(GOOD.format(rng.choice(info["admissible_actions"])))
    return out


def test_remote_group_vec_equals_in_process_over_two_servers():
    with EnvServer({"arl/Sokoban-v0": {}}) as a, EnvServer({"arl/Sokoban-v0": {}}) as b:
        local = make_group_vec("arl/Sokoban-v0", num_tasks=4, group_size=2, seed=3)
        remote = make_group_vec("arl/Sokoban-v0", num_tasks=4, group_size=2, seed=3,
                                servers=[a.url, b.url])
        with local, remote:
            for _ in range(2):  # two batches: the seeds continue alike
                obs_l, infos_l = local.reset()
                obs_r, infos_r = remote.reset()
                assert len(a.app.sessions) == 4 and len(b.app.sessions) == 4  # groups spread
                assert obs_l == obs_r and infos_l == infos_r
                rng_l, rng_r = random.Random(5), random.Random(5)
                done = np.zeros(8, bool)
                for _ in range(12):
                    act_l = [None if d else a for d, a in zip(done, policy(infos_l, rng_l), strict=True)]
                    act_r = [None if d else a for d, a in zip(done, policy(infos_r, rng_r), strict=True)]
                    out_l, out_r = local.step(act_l), remote.step(act_r)
                    assert out_l[0] == out_r[0] and out_l[4] == out_r[4]
                    for x, y in zip(out_l[1:4], out_r[1:4], strict=True):
                        np.testing.assert_array_equal(x, y)
                    infos_l = [i if i is not None else p for i, p in zip(out_l[4], infos_l, strict=True)]
                    infos_r = [i if i is not None else p for i, p in zip(out_r[4], infos_r, strict=True)]
                    done |= out_l[2] | out_l[3]


def test_remote_env_vision_image_is_exact():
    import gymnasium as gym

    with EnvServer({"arl/SokobanVision-v0": {}}) as srv:
        env = gym.make("arl/SokobanVision-v0")
        remote = RemoteEnv(srv.url, "arl/SokobanVision-v0", {})
        obs, info = env.reset(seed=2)
        robs, rinfo = remote.reset(seed=2)
        assert robs["text"] == obs["text"] and rinfo == info
        np.testing.assert_array_equal(robs["image"], obs["image"])
        step = GOOD.format("left")
        obs, *_ = env.step(step)
        robs, *_ = remote.step(step)
        np.testing.assert_array_equal(robs["image"], obs["image"])
        remote.close()


def test_remote_env_checks_env_and_kwargs():
    with EnvServer({"arl/Sokoban-v0": {"dim_room": (7, 7)}}) as srv:
        with pytest.raises(ConfigError, match="does not host"):
            RemoteEnv(srv.url, "arl/TIRMath-v0")
        with pytest.raises(ConfigError, match="differ"):
            make_group_vec("arl/Sokoban-v0", 1, 1, servers=[srv.url])
        with make_group_vec("arl/Sokoban-v0", 1, 1, servers=[srv.url], dim_room=(7, 7)) as vec:
            assert "7x7" in vec.reset(seed=0)[1][0]["task_id"]
    with pytest.raises(RemoteEnvError, match="cannot be reached"):
        RemoteEnv("http://127.0.0.1:9", "arl/Sokoban-v0")
    with pytest.raises(ConfigError, match="servers"):
        make_group_vec("arl/Sokoban-v0", 1, 1, servers="http://127.0.0.1:9")


@pytest.fixture
def server_process():
    """``arlgym serve`` in its own process (the CLI), killed at the end whatever happened."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "arlgym.cli", "serve", "--env",
                             "arl/Sokoban-v0", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
    assert match, line
    yield proc, match.group(1)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
    proc.wait(timeout=10)


def test_killed_server_gives_a_clear_error_fast(server_process):
    proc, url = server_process
    # timeouts far above the bounds below: an error that waited for one fails the test, a busy
    # machine does not
    remote = RemoteEnv(url, "arl/Sokoban-v0", {}, timeout=120)
    client = GenericEnvClient(base_url=url, message_timeout_s=120).sync()
    client.connect()
    _, info = remote.reset(seed=0)
    client.reset(seed=0)
    remote.step(GOOD.format("up"))
    proc.kill()
    proc.wait(timeout=10)
    t0 = time.monotonic()
    with pytest.raises(RemoteEnvError, match=re.escape(url)) as exc:
        remote.step(GOOD.format("up"))
    assert exc.value.server == url and time.monotonic() - t0 < 30
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - OpenEnv's client: websockets' ConnectionClosed
        client.step({"response": GOOD.format("up")})
    assert time.monotonic() - t0 < 30


def test_stopped_server_gives_a_clear_error_within_the_timeout(server_process):
    proc, url = server_process
    vec = make_group_vec("arl/Sokoban-v0", num_tasks=2, group_size=2, seed=0, servers=[url],
                         timeout=1.5)
    client = GenericEnvClient(base_url=url, message_timeout_s=1.5).sync()
    client.connect()
    client.reset(seed=0)
    _, infos = vec.reset()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(RemoteEnvError, match="no reply .* within timeout=1.5") as exc:
            vec.step([GOOD.format("up")] * 4)
        assert time.monotonic() - t0 < 1.5 * 10  # ended by the timeout; the bound catches a hang
        assert exc.value.env_indices == [0, 1, 2, 3] and exc.value.server == url
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            client.step({"response": GOOD.format("up")})
        assert time.monotonic() - t0 < 1.5 * 10
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def test_rollout_collector_on_servers_equals_local():
    """The collector (random policy, which asks the env for admissible actions) plays the
    same trajectories through two servers as in process."""
    from dataclasses import asdict

    from arlgym.policies import make_policy
    from arlgym.rollout import RolloutCollector

    def collect(**kw):
        with RolloutCollector("arl/Sokoban-v0", make_policy("random", seed=7), group_size=2,
                              num_tasks=3, seed=11, progress=False, **kw) as c:
            return [asdict(t) for t in c.collect() + c.collect()]

    with EnvServer({"arl/Sokoban-v0": {}}) as a, EnvServer({"arl/Sokoban-v0": {}}) as b:
        remote = collect(servers=[a.url, b.url])
    local = collect(mode="sync")
    assert len(local) == 12 and remote == local


def test_failed_server_groups_move_and_replay(server_process):
    """restart=True: a killed server's envs move to the live server; a step raises
    WorkerRestarted for exactly those envs, whose groups then replay from the same first state."""
    from arlgym.core.vector import WorkerRestarted

    proc, url = server_process
    with EnvServer({"arl/Sokoban-v0": {}}) as live:
        vec = make_group_vec("arl/Sokoban-v0", num_tasks=2, group_size=2, seed=4,
                             servers=[url, live.url], timeout=5, restart=True)
        with vec:
            obs0, infos0 = vec.reset()
            vec.step([GOOD.format("up")] * 4)
            proc.kill()
            proc.wait(timeout=10)
            with pytest.raises(WorkerRestarted, match=re.escape(url)) as exc:
                vec.step([GOOD.format("down")] * 4)
            assert exc.value.env_indices == [0, 1]  # group 0 lived on the killed server
            assert exc.value.results[2] is not None and exc.value.results[0] is None
            assert all(env.url == live.url for env in vec.envs) and url in vec.dead
            obs, infos = vec.reset_envs([0, 1])
            assert obs == obs0[:2] and [i["anchor"] for i in infos] == [
                i["anchor"] for i in infos0[:2]]
            out = vec.step([GOOD.format("up")] * 4)
            assert all(info is not None for info in out[4])
