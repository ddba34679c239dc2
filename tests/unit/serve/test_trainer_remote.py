"""The trainer on remote envs (``env_servers``): one step on two loopback servers equals the
step on in-process envs — same metrics, same weights — for the in-process and (slow) the async
rollout source."""

from __future__ import annotations

import pytest

from arlgym.serve.server import EnvServer

torch = pytest.importorskip("torch")


def _step(tmp_path, name, servers: str, extra: list[str] = (), during=None):
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--model", "tiny", "--num_tasks", "2", "--group_size", "2",
                              "--max_new_tokens", "12", "--env_kwargs", '{"max_steps": 3}',
                              "--log_with", "none", "--torch_threads", "1", "--seed", "4",
                              "--env_servers", servers, "--output_dir", str(tmp_path / name),
                              *extra])
    trainer = Trainer(cfg)
    try:
        metrics = trainer.train_step()
        weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        if during is not None:
            during()
    finally:
        trainer.close()
    return metrics, weights


def _check_equal(local, remote):
    (m_l, w_l), (m_r, w_r) = local, remote
    for key in ("env/success_rate", "env/episode_return", "env/turns", "samples", "tokens", "loss"):
        assert m_r[key] == m_l[key], key
    for name, w in w_l.items():
        assert torch.equal(w, w_r[name]), name


def test_a_step_on_two_env_servers_equals_the_in_process_step(tmp_path):
    with EnvServer({"arl/Sokoban-v0": {"max_steps": 3}}) as a, \
            EnvServer({"arl/Sokoban-v0": {"max_steps": 3}}) as b:
        def spread():  # two groups, one on each server, two sessions each
            assert len(a.app.sessions) == 2 and len(b.app.sessions) == 2

        remote = _step(tmp_path, "remote", f"{a.url},{b.url}", during=spread)
    local = _step(tmp_path, "local", "")
    _check_equal(local, remote)


@pytest.mark.slow
def test_async_workers_take_their_envs_from_the_servers(tmp_path):
    async_args = ["--async_rollouts", "true", "--max_staleness", "0", "--staleness_policy", "pace"]
    with EnvServer({"arl/Sokoban-v0": {"max_steps": 3}}) as a:
        remote = _step(tmp_path, "remote", a.url, async_args,
                       during=lambda: len(a.app.sessions) == 4 or pytest.fail("no sessions"))
    local = _step(tmp_path, "local", "")
    _check_equal(local, remote)
