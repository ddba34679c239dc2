"""The 13 methods of ARLArena as plain parameter dicts (paper Table 1, Table 6, Appendix B).

``PRESETS[name]`` holds the ALFWorld settings; :func:`get_preset` returns a deep copy, for
another env with ``env="webshop" | "sokoban" | "tir_math"`` (Table 6's per-task columns).
Each preset has the same keys:

* ``advantage``: ``{"name": grpo|gigpo|empg, **kwargs of compute_advantages}``
* ``loss``: ``{"name": ppo_clip|gspo|sapo|cispo, "clip_low", "clip_high", **loss knobs}``
* ``aggregation``: a loss-aggregation name (paper Eqs. 10–13)
* ``seq_mask``: ``{"enabled", "delta"}``;  ``filter``: ``{"enabled", "name", "max_tries",
  "cold_start_steps"}``
* ``kl_coef``, ``entropy_coef`` and the run settings of Table 6 (``lr``, ``group_size``,
  ``tasks_per_step``, ``mini_batch_size``, lengths, sampling, ...).

:func:`policy_loss_kwargs`, :func:`advantage_kwargs` and :func:`make_sampler` turn a preset into
the arguments of :func:`~arlgym.rl.policy_loss`, :func:`~arlgym.rl.compute_advantages` and a
:class:`~arlgym.rl.DynamicSampler`. Sources are cited on each value: "T6" = ARLArena paper
Table 6, "T1" = its Table 1, "Eq. n" = its equation n; where the paper is silent, the released
code, cited by what it is:

* "code:losses": ARLArena's ``verl/trainer/ppo/core_algos.py`` (SAMPO and the baseline losses)
  and verl's trainer config defaults;
* "code:scripts": ARLArena's released training scripts (per env and method);
* "code:gigpo": verl-agent's ``gigpo/core_gigpo.py`` (identical in ARLArena's
  ``recipe/*/ppo/core_algos.py``);
* "code:empg": ARLArena's ``compute_EMPG_advantage``;
* "code:env": verl-agent's env managers (the format penalty).

Values marked "assumed" are given by neither. docs/algorithms.md tabulates the choices.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import ConfigError
from arlgym.rl.filtering import DynamicSampler

__all__ = [
    "preset_list",
    "EPISODE_NORM",
    "PRESETS",
    "ENVS",
    "ENV_SETTINGS",
    "get_preset",
    "policy_loss_kwargs",
    "advantage_kwargs",
    "make_sampler",
]

ENVS = ("alfworld", "webshop", "sokoban", "tir_math")

# Per-task rows of Table 6 shared by every method ("Model and Environment", "Training
# Optimization", "Rollout and Inference", "Training and Batching").
ENV_SETTINGS: dict[str, dict[str, Any]] = {
    "alfworld": {
        "base_model": "Qwen3-4B-RFT",  # T6
        "max_steps": 50,  # T6 max interaction steps
        "history_length": 2,  # T6 memory context window (turns)
        "context_window_tokens": None,  # T6 (turn window instead)
        "group_size": 8,  # T6 group rollout size
        "max_prompt_len": 2048,  # T6
        "max_response_len": 512,  # T6
        "format_penalty": 0.1,  # T6
        "lr": 1e-6,  # T6
        "mini_batch_size": 256,  # T6
        "kl_coef": 0.01,  # T6
        "temperature": 1.0,  # T6 training
        "val_temperature": 0.6,  # T6
        "val_top_p": 0.95,  # T6
        "val_top_k": 20,  # T6
        "tasks_per_step": 16,  # T6 user prompt number
        "val_batch_size": 128,  # T6
        "epochs": 200,  # T6 total epochs
    },
    "webshop": {
        "base_model": "Qwen3-4B-RFT",
        "max_steps": 15,
        "history_length": 2,
        "context_window_tokens": None,
        "group_size": 8,
        "max_prompt_len": 4096,
        "max_response_len": 512,
        "format_penalty": 0.1,
        "lr": 1e-6,
        "mini_batch_size": 128,
        "kl_coef": 0.01,
        "temperature": 1.0,
        "val_temperature": 0.6,
        "val_top_p": 0.95,
        "val_top_k": 20,
        "tasks_per_step": 16,
        "val_batch_size": 128,
        "epochs": 200,
    },
    "sokoban": {
        "base_model": "Qwen3-4B-VL-Instruct-RFT",
        "max_steps": 15,
        "history_length": 2,
        "context_window_tokens": None,
        "group_size": 8,
        "max_prompt_len": 1024,
        "max_response_len": 512,
        "format_penalty": 0.1,
        "lr": 1e-6,
        "mini_batch_size": 64,
        "kl_coef": 0.01,
        "temperature": 1.0,
        "val_temperature": 0.7,
        "val_top_p": 0.95,
        "val_top_k": 20,
        "tasks_per_step": 32,
        "val_batch_size": 128,
        "epochs": 200,
    },
    "tir_math": {
        "base_model": "Qwen3-4B-Base",
        "max_steps": 5,
        "history_length": None,  # full history, bounded by tokens
        "context_window_tokens": 8196,  # T6 (as printed)
        "group_size": 5,
        "max_prompt_len": 8196,
        "max_response_len": 4096,
        "format_penalty": 0.1,
        "lr": 1e-6,
        "mini_batch_size": 128,
        "kl_coef": 0.0,  # T6: no KL on TIR Math
        "temperature": 1.0,
        "val_temperature": 0.6,
        "val_top_p": 0.95,
        "val_top_k": 20,
        "tasks_per_step": 512,
        "val_batch_size": 128,
        "epochs": 17,
    },
}

# Settings Table 6 does not list but the released scripts fix for every method (code:losses, code:scripts).
_COMMON: dict[str, Any] = {
    "entropy_coef": 0.001,  # code:losses: verl config default, active in the SAMPO scripts (assumed for all)
    "grad_clip": 1.0,  # code:losses
    "ppo_epochs": 1,  # code:losses
}


def _ppo(clip_low: float, clip_high: float) -> dict[str, Any]:
    # dual_clip 3.0: verl compute_policy_loss_vanilla's clip_ratio_c default (code:losses)
    return {"name": "ppo_clip", "clip_low": clip_low, "clip_high": clip_high, "dual_clip": 3.0}


#: The one switch of the episode advantage's group statistics, shared by every preset so that
#: two presets differ only in the dimension they study ("GiGPO vs GRPO" changes the advantage
#: design and nothing else). ``"turns"``: the group mean/std are taken over every turn sample
#: of the group (longer trajectories weigh more) — verl-agent's
#: ``compute_mean_std_cross_steps=True``, the config default that the released ARLArena
#: scripts run for GRPO, GiGPO, EMPG, DAPO and SAMPO alike (code:gigpo). ``"trajectories"``: one
#: value per trajectory, as Table 1 writes GRPO's r_i and verl's ``vanilla_grpo`` computes it.
#: ``TrainConfig.episode_norm`` overrides it per run.
EPISODE_NORM = "turns"
_CROSS_STEPS = EPISODE_NORM == "turns"

_GRPO_ADV = {
    "name": "grpo",
    "norm": "mean_std_norm",  # T6
    "cross_steps": _CROSS_STEPS,  # EPISODE_NORM (released scripts; T1 writes per trajectory)
}
_GIGPO_ADV = {
    "name": "gigpo",
    "norm": "mean_std_norm",  # T6 group normalization mode
    "gamma": 0.95,  # T6 γ
    "step_weight": 1.0,  # T6 ω
    "cross_steps": _CROSS_STEPS,  # EPISODE_NORM; code:gigpo: compute_mean_std_cross_steps=True
    "discount_penalty": False,  # code:env: penalty subtracted after discounting
}
_EMPG_ADV = {
    "name": "empg",
    "norm": "mean_std_norm",  # T6
    "cross_steps": _CROSS_STEPS,  # EPISODE_NORM; code:empg: EMPG modulates GRPO advantages
    "empg_k": 1.0,  # T6 k
    "empg_k_future": 1.0,  # T6 k'
    "empg_zeta": 0.05,  # T6 ζ
}
_NO_MASK = {"enabled": False, "delta": None}
_MASK = {"enabled": True, "delta": 3e-3}  # code:scripts: δ = 3e-3 in the ARLArena seq_mask scripts
_NO_FILTER = {"enabled": False, "name": "dynamic_sampling", "max_tries": 1, "cold_start_steps": 0}
_FILTER = {
    "enabled": True,
    "name": "dynamic_sampling",
    "max_tries": 3,  # T6 DAPO "N oversample"
    "cold_start_steps": 15,  # code:scripts: DAPO and SAMPO ALFWorld scripts
}
_GSPO_CLIPS = {  # T6 GSPO (ε_low, ε_high) per task
    "alfworld": (3e-3, 4e-3),
    "webshop": (3e-2, 4e-2),
    "sokoban": (3e-3, 4e-3),
    "tir_math": (3e-4, 4e-4),
}


def _preset(
    *,
    advantage: dict[str, Any],
    loss: dict[str, Any],
    aggregation: str,
    seq_mask: dict[str, Any] = _NO_MASK,
    filter: dict[str, Any] = _NO_FILTER,
    description: str,
) -> dict[str, Any]:
    return {
        "description": description,
        "advantage": dict(advantage),
        "loss": dict(loss),
        "aggregation": aggregation,
        "seq_mask": dict(seq_mask),
        "filter": dict(filter),
        **copy.deepcopy(ENV_SETTINGS["alfworld"]),
        **_COMMON,
    }


#: ALFWorld presets of the 13 methods; use :func:`get_preset` (deep copy, other envs).
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": _preset(
        description="GRPO: PPO token clip, token-mean, group-normalised episode advantage (T1)",
        advantage=_GRPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 GRPO ε_low, ε_high
        aggregation="token-mean",  # T1 1/ΣT_i
    ),
    "grpo_st": _preset(
        description="GRPO with seq-mean-token-mean aggregation (T1 GRPO_ST, §4.4)",
        advantage=_GRPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 GRPO
        aggregation="seq-mean-token-mean",  # T1 1/G Σ 1/T_i
    ),
    "grpo_sm": _preset(
        description="GRPO with sequence masking of off-policy negative sequences (T1 GRPO_SM)",
        advantage=_GRPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 GRPO
        aggregation="token-mean",  # T1
        seq_mask=_MASK,
    ),
    "sapo": _preset(
        description="SAPO soft-gated token IS (T1, App. A.2.3)",
        advantage=_GRPO_ADV,
        loss={
            "name": "sapo",
            "clip_low": 0.2,  # diagnostic band only (code:losses, SAPO's pg_clipfrac)
            "clip_high": 0.2,
            "sapo_tau_pos": 1.0,  # T6 τ_pos
            "sapo_tau_neg": 1.05,  # T6 τ_neg
        },
        aggregation="token-mean",  # T1; code:losses
    ),
    "sapo_sm": _preset(
        description="SAPO + sequence masking (§4.1, Table 4)",
        advantage=_GRPO_ADV,
        loss={
            "name": "sapo",
            "clip_low": 0.2,
            "clip_high": 0.2,
            "sapo_tau_pos": 1.0,  # T6
            "sapo_tau_neg": 1.05,  # T6
        },
        aggregation="token-mean",
        seq_mask=_MASK,
    ),
    "cispo": _preset(
        description="CISPO: stop-grad two-sided clipped IS weight × log-prob (T1, App. A.2.2)",
        advantage=_GRPO_ADV,
        loss={"name": "cispo", "clip_low": 1.0, "clip_high": 0.2},  # T6 CISPO ε_low, ε_high
        aggregation="token-mean",  # T1
    ),
    "cispo_sm": _preset(
        description="CISPO + sequence masking (§4.1, Table 4)",
        advantage=_GRPO_ADV,
        loss={"name": "cispo", "clip_low": 1.0, "clip_high": 0.2},  # T6
        aggregation="token-mean",
        seq_mask=_MASK,
    ),
    "gspo": _preset(
        description="GSPO: sequence-level ratio clipping (T1, App. A.2.4)",
        advantage=_GRPO_ADV,
        loss={"name": "gspo", "clip_low": 3e-3, "clip_high": 4e-3},  # T6 GSPO ALFWorld
        aggregation="seq-mean-token-mean",  # code:losses: verl's GSPO forces it (T1 writes 1/ΣT_i)
    ),
    "gigpo": _preset(
        description="GiGPO: episode + anchor-state step advantage, PPO token clip (T1, App. A.3.1)",
        advantage=_GIGPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 GiGPO ε
        aggregation="token-mean",  # T1
    ),
    "empg": _preset(
        description="EMPG: entropy-modulated GRPO advantage, PPO token clip (T1, App. A.3.2)",
        advantage=_EMPG_ADV,
        loss=_ppo(0.2, 0.2),  # T6 EMPG ε
        aggregation="token-mean",  # T1
    ),
    "dapo_grpo": _preset(
        description="GRPO + DAPO dynamic sampling (T1 DAPO, §4.3)",
        advantage=_GRPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 DAPO ε_low, ε_high (no clip-higher except TIR Math)
        aggregation="token-mean",  # T1
        filter=_FILTER,
    ),
    "dapo_gigpo": _preset(
        description="GiGPO + DAPO dynamic sampling (§4.3)",
        advantage=_GIGPO_ADV,
        loss=_ppo(0.2, 0.2),  # T6 DAPO
        aggregation="token-mean",  # T1
        filter=_FILTER,
    ),
    "sampo": _preset(
        description="SAMPO = GiGPO advantage + GSPO sequence clipping + dynamic filtering (Eq. 8)",
        advantage=_GIGPO_ADV,  # Eq. 8 A'_{i,k}; code:scripts
        loss={"name": "gspo", "clip_low": 3e-3, "clip_high": 4e-3},  # code:scripts = T6 GSPO
        aggregation="seq-mean-token-mean",  # code:scripts loss_agg_mode (Eq. 8 writes 1/ΣT_i)
        filter={**_FILTER, "cold_start_steps": 15},  # code:scripts: 15 ALFWorld / 5 WebShop
    ),
}

# Methods Table 6 / Table 3 mark "–" (not applicable) for a task.
_NOT_APPLICABLE = {"tir_math": {"gigpo", "empg", "dapo_gigpo", "sampo"}}


def _env_overrides(name: str, preset: dict[str, Any], env: str) -> None:
    """Apply Table 6's per-task column for ``env`` in place."""
    preset.update(copy.deepcopy(ENV_SETTINGS[env]))
    loss = preset["loss"]
    if loss["name"] == "gspo":
        loss["clip_low"], loss["clip_high"] = _GSPO_CLIPS[env]  # T6 GSPO row
    elif env == "tir_math" and loss["name"] in ("ppo_clip", "cispo"):
        loss["clip_high"] = 0.28  # T6 GRPO / CISPO / DAPO ε_high on TIR Math
    if name == "sampo" and env == "webshop":
        preset["filter"]["cold_start_steps"] = 5  # code:scripts


def get_preset(name: str, env: str = "alfworld") -> dict[str, Any]:
    """A deep copy of method ``name``'s preset with Table 6's column for ``env``.

    Raises:
        ConfigError: unknown method or env (message lists them), or a method Table 6 marks
            "–" for that env (GiGPO-based methods and EMPG on TIR Math).
    """
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    if env not in ENVS:
        raise ConfigError(f"unknown env {env!r} for presets; envs: {', '.join(ENVS)}")
    if name in _NOT_APPLICABLE.get(env, ()):
        raise ConfigError(
            f"preset {name!r} is not applicable to {env!r} (paper Table 6 '–': no anchor states "
            "/ step entropy grouping there); pick one of "
            f"{', '.join(n for n in PRESETS if n not in _NOT_APPLICABLE[env])}"
        )
    preset = copy.deepcopy(PRESETS[name])
    preset["method"] = name
    preset["env"] = env
    _env_overrides(name, preset, env)
    return preset


def policy_loss_kwargs(preset: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`~arlgym.rl.policy_loss` from a preset (``name`` included):
    ``policy_loss(**kw, logp=..., old_logp=..., advantages=..., mask=..., ref_logp=...)``."""
    kw = dict(preset["loss"])
    kw["aggregation"] = preset["aggregation"]
    kw["seq_mask_delta"] = preset["seq_mask"]["delta"] if preset["seq_mask"]["enabled"] else None
    kw["kl_coef"] = preset["kl_coef"]
    kw["entropy_coef"] = preset["entropy_coef"]
    if preset["aggregation"] == "seq-mean-token-sum-norm":
        kw["max_len"] = preset["max_response_len"]
    return kw


def advantage_kwargs(preset: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`~arlgym.rl.compute_advantages` (``name`` included)."""
    return dict(preset["advantage"])


def make_sampler(preset: dict[str, Any], target_groups: int | None = None,
                 returns_of: Callable[[Any], float] | None = None) -> DynamicSampler | None:
    """The preset's :class:`~arlgym.rl.DynamicSampler`, or None when filtering is off.

    ``target_groups`` defaults to the preset's ``tasks_per_step``; ``returns_of`` reads the
    return a group is filtered on (default: the member's ``episode_return``).
    """
    f = preset["filter"]
    if not f["enabled"]:
        return None
    extra = {"returns_of": returns_of} if returns_of is not None else {}
    return DynamicSampler(
        target_groups=target_groups or preset["tasks_per_step"],
        max_tries=f["max_tries"],
        cold_start_steps=f["cold_start_steps"],
        filter=f["name"],
        **extra,
    )


def preset_list(flag: str, text: str, prog: str) -> list[str]:
    """``"grpo,sampo"`` -> ``["grpo", "sampo"]``; an unknown preset is one line naming it with a
    did-you-mean and the presets."""
    names = [a.strip().lower() for a in text.split(",") if a.strip()]
    if not names:
        raise ConfigError(f"{flag} {text!r} names no preset. Fix: e.g. {flag} grpo,sampo "
                          f"(presets: {', '.join(PRESETS)})")
    for name in names:
        if name not in PRESETS:
            raise ConfigError(f"{flag} {text!r}: unknown preset {name!r}"
                              f"{did_you_mean(name, PRESETS)}; presets: {', '.join(PRESETS)}. "
                              f"See `{prog} --help`")
    return names
