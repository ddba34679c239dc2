"""The RL algorithm layer: advantages, policy losses, aggregation, filters, presets (docs/architecture.md,
"The RL algorithm layer").

Pure functions in registries, chosen by name. ``import arlgym`` does not import this package
(it needs torch); import it explicitly::

    from arlgym.rl import compute_advantages, policy_loss, get_preset

    preset = get_preset("sampo")
    adv = compute_advantages(**advantage_kwargs(preset), samples=samples)      # (N,)
    loss, metrics = policy_loss(**policy_loss_kwargs(preset), logp=logp, old_logp=old_logp,
                                advantages=adv, mask=mask, ref_logp=ref_logp)

See docs/algorithms.md for each method's formula and preset values.
"""

from arlgym.rl.registry import (  # noqa: I001  (registries first: modules below register into them)
    ADVANTAGES,
    AGGREGATIONS,
    FILTERS,
    LOSSES,
    MODIFIERS,
    REGISTRIES,
    Registry,
    RegistryError,
    get,
    register,
)
from arlgym.rl.aggregation import AGGREGATION_MODES, aggregate, masked_mean
from arlgym.rl.advantages import (
    NORM_MODES,
    TurnSample,
    advantage_metrics,
    compute_advantages,
    discounted_returns,
    group_normalise,
    samples_from_trajectories,
    step_group_metrics,
)
from arlgym.rl.losses import kl_k3, loss_knobs, policy_loss, seq_mask
from arlgym.rl.filtering import DynamicSampler, dynamic_sampling
from arlgym.rl.presets import (
    ENVS,
    PRESETS,
    advantage_kwargs,
    get_preset,
    make_sampler,
    policy_loss_kwargs,
)

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "AGGREGATION_MODES",
    "DynamicSampler",
    "ENVS",
    "FILTERS",
    "LOSSES",
    "MODIFIERS",
    "NORM_MODES",
    "PRESETS",
    "REGISTRIES",
    "Registry",
    "RegistryError",
    "TurnSample",
    "advantage_kwargs",
    "advantage_metrics",
    "aggregate",
    "compute_advantages",
    "discounted_returns",
    "dynamic_sampling",
    "get",
    "get_preset",
    "group_normalise",
    "kl_k3",
    "loss_knobs",
    "make_sampler",
    "masked_mean",
    "policy_loss",
    "policy_loss_kwargs",
    "register",
    "samples_from_trajectories",
    "seq_mask",
    "step_group_metrics",
]
