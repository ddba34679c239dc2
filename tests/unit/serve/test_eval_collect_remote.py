"""``arlgym eval`` and ``arlgym-sft collect`` on env servers (``--env-servers``): the files they
write equal the in-process run's for the same seeds, the servers are not a recorded setting (a
run resumes on other servers or on local envs), and the scripted policies that read the env's
true state (expert, greedy) ask the server for their answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arlgym.cli import main as arlgym_main
from arlgym.serve.server import EnvServer
from arlgym.sft.cli import main as sft_main

ENV = "arl/Sokoban-v0"
KWARGS = {"max_steps": 8}  # short episodes: the greedy teacher loses some, so both outcomes count


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def servers():
    with EnvServer({ENV: KWARGS}) as a, EnvServer({ENV: KWARGS}) as b:
        yield a, b


def _eval(out: Path, episodes: int, servers: str = "", policy: str = "greedy") -> None:
    argv = ["eval", "--env", ENV, "--policy", policy, "--episodes", str(episodes),
            "--batch-size", "3", "--env-kwarg", "max_steps=8", "--out", str(out),
            "--no-progress"]
    assert arlgym_main(argv + (["--env-servers", servers] if servers else [])) == 0


def test_eval_on_two_servers_equals_the_local_eval(tmp_path, servers):
    a, b = servers
    _eval(tmp_path / "local.jsonl", 6)
    _eval(tmp_path / "remote.jsonl", 6, f"{a.url},{b.url}")
    local, remote = lines(tmp_path / "local.jsonl"), lines(tmp_path / "remote.jsonl")
    assert len(local) == 6 and remote == local
    assert {t["task_id"] for t in local} == {t["task_id"] for t in remote}
    assert 0 < sum(t["steps"][-1]["won"] for t in local) < 6  # both outcomes compared
    summary = json.loads((tmp_path / "remote.summary.json").read_text())
    assert summary["settings"] == json.loads((tmp_path / "local.summary.json").read_text())[
        "settings"] and "env_servers" not in summary["settings"]


def test_eval_resumes_across_servers_and_local_envs(tmp_path, servers):
    """Placement is not a recorded setting: 3 episodes on one server, then 6 in process into
    the same file, gives the file of the same resumed run in process (and the reverse)."""
    a, _ = servers
    _eval(tmp_path / "mixed.jsonl", 3, a.url)
    _eval(tmp_path / "mixed.jsonl", 6)
    _eval(tmp_path / "reverse.jsonl", 3)
    _eval(tmp_path / "reverse.jsonl", 6, a.url)
    _eval(tmp_path / "local.jsonl", 3)
    _eval(tmp_path / "local.jsonl", 6)
    local = lines(tmp_path / "local.jsonl")
    assert len(local) == 6
    assert lines(tmp_path / "mixed.jsonl") == local == lines(tmp_path / "reverse.jsonl")


def _collect(out: Path, servers: str = "") -> dict:
    argv = ["collect", "--env", ENV, "--policy", "expert", "--episodes", "6", "--batch-tasks",
            "3", "--min-score", "-100", "--env-kwarg", "max_steps=8", "--out", str(out),
            "--no-progress"]
    assert sft_main(argv + (["--env-servers", servers] if servers else [])) == 0
    return json.loads((out / "meta.json").read_text())


def test_sft_collect_on_servers_equals_the_local_collect(tmp_path, servers):
    a, b = servers
    meta_local = _collect(tmp_path / "local")
    meta_remote = _collect(tmp_path / "remote", f"{a.url},{b.url}")
    assert meta_remote == meta_local and "env_servers" not in meta_remote["identity"]
    for name in ("samples.jsonl", "episodes.jsonl"):
        local, remote = lines(tmp_path / "local" / name), lines(tmp_path / "remote" / name)
        assert remote == local and local, name
    assert len(lines(tmp_path / "local" / "episodes.jsonl")) == 6


def test_bad_env_servers_exit_2_with_one_line(tmp_path, capsys):
    rc = arlgym_main(["eval", "--env", ENV, "--episodes", "1", "--out",
                      str(tmp_path / "e.jsonl"), "--env-servers", "node1:8000"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "--env-servers entry 'node1:8000' is invalid" in err and "http://" in err
    rc = sft_main(["collect", "--episodes", "1", "--workers", "2", "--env-servers",
                   "http://127.0.0.1:9", "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 2 and "--workers and --env-servers exclude each other" in err


def test_unreachable_server_is_named(tmp_path, capsys):
    rc = arlgym_main(["eval", "--env", ENV, "--episodes", "1", "--out",
                      str(tmp_path / "e.jsonl"), "--env-servers", "http://127.0.0.1:9",
                      "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "env server http://127.0.0.1:9 cannot be reached" in err


def test_expert_of_an_env_without_one_is_a_clear_error(servers):
    """The scripted answer is computed on the server; an env without that policy says so."""
    from arlgym.errors import ConfigError
    from arlgym.serve.client import RemoteEnv

    with EnvServer({"arl/TIRMath-v0": {}}) as srv:
        env = RemoteEnv(srv.url, "arl/TIRMath-v0")
        env.reset(seed=0)
        with pytest.raises(ConfigError, match="has no teacher policy"):
            env.teacher_response()
        env.close()
    env = RemoteEnv(servers[0].url, ENV)
    from arlgym.errors import ResetNeeded

    with pytest.raises(ResetNeeded, match="send reset first"):
        env.expert_response()
    env.close()


@pytest.mark.parametrize("env_id", [ENV, "arl/ALFWorld-v0"])  # a thread host, a process host
def test_tasks_route_lists_what_the_env_lists(env_id):
    import gymnasium as gym

    from arlgym.errors import ConfigError
    from arlgym.serve.client import server_tasks

    local = gym.make(env_id)
    want = local.unwrapped.list_tasks("test", 5)
    local.close()
    with EnvServer({env_id: {}}, workers=1) as srv:
        assert server_tasks(srv.url, env_id, "test", 5) == want
        assert len(srv.app.sessions) == 0  # a temporary env, no session
        with pytest.raises(ConfigError, match="is not hosted here"):
            server_tasks(srv.url, "arl/WebShop-v0", "test", 5)
        with pytest.raises(ConfigError, match="limit='0' is invalid"):
            server_tasks(srv.url, env_id, "test", 0)


def test_eval_on_servers_needs_no_local_env(tmp_path, servers, monkeypatch):
    """The task list comes from the server and the episodes run there: no env is made here."""
    import arlgym.evaluation.runner as runner

    def refuse(*args, **kwargs):
        raise AssertionError("a local env was made")

    monkeypatch.setattr(runner, "make_checked_env", refuse)
    _eval(tmp_path / "remote.jsonl", 3, servers[0].url)
    assert len(lines(tmp_path / "remote.jsonl")) == 3
