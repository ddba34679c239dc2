"""The registry factory (docs/architecture.md, "Conventions"). Run: pytest tests/unit/rl/test_registry.py"""

import pytest

from arlgym.errors import ArlgymError, ConfigError
from arlgym.rl import LOSSES, REGISTRIES, Registry, RegistryError, get, register


def test_builtin_names():
    assert set(REGISTRIES["advantage"].names()) >= {"grpo", "gigpo", "empg"}
    assert set(REGISTRIES["loss"].names()) >= {"ppo_clip", "gspo", "sapo", "cispo"}
    assert set(REGISTRIES["aggregation"].names()) >= {
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    }
    assert "seq_mask" in REGISTRIES["modifier"]
    assert "dynamic_sampling" in REGISTRIES["filter"]


def test_duplicate_raises_and_unknown_lists_options():
    reg = Registry("thing")
    reg.register("a")(lambda: 1)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("a")(lambda: 2)
    with pytest.raises(RegistryError, match="registered: a") as err:
        reg.get("b")
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ArlgymError)
    with pytest.raises(RegistryError, match="Did you mean 'gspo'"):
        LOSSES.get("gsp0")
    with pytest.raises(RegistryError, match="kinds"):
        get("optimizer", "adam")


@pytest.fixture
def restore_losses():
    before = LOSSES.names()
    yield
    for name in set(LOSSES.names()) - set(before):
        LOSSES.unregister(name)
    assert LOSSES.names() == before


def test_extension_through_the_global_registry(restore_losses):
    with pytest.raises(RegistryError):
        register("loss", "ppo_clip")(lambda *a, **k: None)

    @register("loss", "test_only_loss")
    def fn(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2):
        return (logp * 0).sum() * 0 + logp * 0, {}

    assert get("loss", "test_only_loss") is fn
