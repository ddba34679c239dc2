"""Advantage estimators: GRPO, GiGPO and EMPG (paper §2.2, Table 1, Appendix A.3).

Every estimator maps a batch of **turn samples** (one per (prompt, response) turn, docs/architecture.md, "Data flow")
to one advantage per sample, in the order given. A sample is any object with these attributes,
or a mapping with these keys:

==================  ========================================================================
``uid``             task group id: the G rollouts of one task share it
``traj_id``         trajectory (episode) id, unique within its group
``step``            0-based turn index inside the trajectory (explicit, never parsed from text)
``anchor``          hashable id of the environment state the prompt was made in (GiGPO)
``step_reward``     the env reward of this turn (task reward − format penalty)
``episode_return``  the return of the whole episode (the same on every turn of a trajectory)
``entropy``         mean token entropy of this turn's response (EMPG only)
``format_penalty``  optional, default 0: the penalty already inside ``step_reward`` (GiGPO)
==================  ========================================================================

:class:`arlgym.rollout.StepRecord` has all of them but ``episode_return`` and ``entropy``;
build samples with :func:`samples_from_trajectories`, which fills ``episode_return`` from the
:class:`~arlgym.rollout.Trajectory` and takes per-turn entropies from the trainer.

Group normalisation (``norm``), as verl-agent's ``mean_norm`` / ``mean_std_norm``:
``mean_norm``: x − μ; ``mean_std_norm``: (x − μ)/(σ + eps) with the unbiased σ. A group of one
keeps its raw value for the episode-level advantage (verl: μ = 0, σ = 1) and gets 0 as a GiGPO
step group.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.registry import ADVANTAGES, register

__all__ = [
    "TurnSample",
    "compute_advantages",
    "samples_from_trajectories",
    "group_normalise",
    "discounted_returns",
    "grpo",
    "gigpo",
    "empg",
    "advantage_metrics",
    "step_group_metrics",
    "NORM_MODES",
]

NORM_MODES = ("mean_std_norm", "mean_norm")
_FIELDS = ("uid", "traj_id", "step", "anchor", "step_reward", "episode_return")


@dataclass(frozen=True, slots=True)
class TurnSample:
    """One turn as the advantage estimators see it (see the module table)."""

    uid: str
    traj_id: str
    step: int
    anchor: Hashable
    step_reward: float
    episode_return: float
    entropy: float | None = None
    format_penalty: float = 0.0


def _read(sample: Any, key: str, default: Any = inspect.Parameter.empty) -> Any:
    if isinstance(sample, Mapping):
        if key in sample:
            return sample[key]
    elif hasattr(sample, key):
        return getattr(sample, key)
    if default is not inspect.Parameter.empty:
        return default
    hint = (
        " (StepRecord has no episode_return: build samples with "
        "arlgym.rl.samples_from_trajectories)"
        if key == "episode_return"
        else ""
    )
    raise ConfigError(f"turn sample {type(sample).__name__} has no field {key!r}{hint}")


def _as_turn(sample: Any) -> TurnSample:
    if isinstance(sample, TurnSample):
        return sample
    values = {k: _read(sample, k) for k in _FIELDS}
    anchor = values["anchor"]
    if not isinstance(anchor, Hashable):
        raise ConfigError(
            f"anchor must be hashable (a state digest string), got {type(anchor).__name__}"
        )
    return TurnSample(
        uid=values["uid"],
        traj_id=values["traj_id"],
        step=int(values["step"]),
        anchor=anchor,
        step_reward=float(values["step_reward"]),
        episode_return=float(values["episode_return"]),
        entropy=_read(sample, "entropy", None),
        format_penalty=float(_read(sample, "format_penalty", 0.0) or 0.0),
    )


def samples_from_trajectories(
    trajectories: Iterable[Any],
    *,
    entropies: Sequence[float] | None = None,
    episode_return: str | Callable[[Any], float] = "episode_return",
) -> list[TurnSample]:
    """Flatten trajectories into turn samples for :func:`compute_advantages`.

    Args:
        trajectories: :class:`~arlgym.rollout.Trajectory`-like objects with ``uid``, ``traj_id``
            and ``steps`` (StepRecord-like: ``step``, ``anchor``, ``step_reward``, optional
            ``format_penalty``).
        entropies: per-turn mean response entropy, aligned with the output order (trajectory
            order, then turn order); needed by EMPG only.
        episode_return: trajectory attribute name (``"episode_return"``: Σ step rewards incl.
            format penalties; ``"task_return"``: without them, as verl-agent's filter and score)
            or a function of the trajectory.

    Returns:
        One :class:`TurnSample` per turn, trajectories in order, turns in order.
    """
    get_return = (
        episode_return if callable(episode_return) else (lambda tr: getattr(tr, episode_return))
    )
    out: list[TurnSample] = []
    for traj in trajectories:
        ret = float(get_return(traj))
        for rec in traj.steps:
            out.append(
                TurnSample(
                    uid=traj.uid,
                    traj_id=traj.traj_id,
                    step=int(rec.step),
                    anchor=rec.anchor,
                    step_reward=float(rec.step_reward),
                    episode_return=ret,
                    format_penalty=float(getattr(rec, "format_penalty", 0.0) or 0.0),
                )
            )
    if entropies is not None:
        if len(entropies) != len(out):
            raise ConfigError(f"got {len(entropies)} entropies for {len(out)} turns")
        out = [replace(s, entropy=float(h)) for s, h in zip(out, entropies, strict=True)]
    return out


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def group_normalise(
    values: Tensor, norm: str = "mean_std_norm", *, eps: float = 1e-6, singleton: str = "keep"
) -> Tensor:
    """Normalise one group's values, (n,) → (n,).

    ``mean_norm``: x − μ; ``mean_std_norm``: (x − μ)/(σ + eps), σ unbiased (torch.std). A group
    of one returns the value itself (``singleton="keep"``, verl's μ = 0, σ = 1) or 0
    (``singleton="zero"``, GiGPO step groups).
    """
    if norm not in NORM_MODES:
        raise ConfigError(f"unknown norm {norm!r}; options: {', '.join(NORM_MODES)}")
    if values.numel() == 1:
        return values.clone() if singleton == "keep" else torch.zeros_like(values)
    centred = values - values.mean()
    if norm == "mean_norm":
        return centred
    return centred / (values.std() + eps)


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """R_k = Σ_{m ≥ k} γ^{m−k} r_m for one trajectory's rewards in turn order, (K,) → (K,)."""
    out = torch.empty_like(rewards)
    running = rewards.new_zeros(())
    for k in range(rewards.numel() - 1, -1, -1):
        running = rewards[k] + gamma * running
        out[k] = running
    return out


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    table: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        table.setdefault(key, []).append(i)
    return table


def _trajectories(turns: Sequence[TurnSample]) -> dict[tuple[Any, Any], list[int]]:
    """(uid, traj_id) → sample indices sorted by ``step``; duplicate steps raise."""
    table = _groups([(t.uid, t.traj_id) for t in turns])
    for key, idx in table.items():
        idx.sort(key=lambda i: turns[i].step)
        steps = [turns[i].step for i in idx]
        if len(set(steps)) != len(steps):
            raise ConfigError(f"trajectory {key} has duplicate step indices {steps}")
    return table


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------


@register("advantage", "grpo")
def grpo(
    turns: Sequence[TurnSample],
    *,
    norm: str = "mean_std_norm",
    cross_steps: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO group-relative episode advantage (paper Table 1; Eq. 23), one per turn sample.

    A_i = (R(τ_i) − mean_j R(τ_j)) / F_norm within each task group ``uid``.
    ``cross_steps=False`` (Table 1's GRPO; verl ``vanilla_grpo``): one value per trajectory,
    μ and σ over the group's G trajectories, every turn gets its trajectory's advantage.
    ``cross_steps=True`` (verl-agent's ``compute_mean_std_cross_steps``): μ and σ over all turn
    samples of the group, so longer trajectories weigh more.
    """
    out = torch.zeros(len(turns), dtype=torch.float64)
    returns = torch.tensor([t.episode_return for t in turns], dtype=torch.float64)
    for idx in _groups([t.uid for t in turns]).values():
        if cross_steps:
            out[idx] = group_normalise(returns[idx], norm, eps=eps)
            continue
        by_traj = _groups([turns[i].traj_id for i in idx])
        traj_idx = list(by_traj.values())
        traj_ret = torch.stack([returns[[idx[j] for j in members]].mean() for members in traj_idx])
        traj_adv = group_normalise(traj_ret, norm, eps=eps)
        for adv, members in zip(traj_adv, traj_idx, strict=True):
            out[[idx[j] for j in members]] = adv
    return out.float()


def _step_returns(turns: Sequence[TurnSample], gamma: float, discount_penalty: bool) -> Tensor:
    out = torch.zeros(len(turns), dtype=torch.float64)
    for idx in _trajectories(turns).values():
        pen = torch.tensor([turns[i].format_penalty for i in idx], dtype=torch.float64)
        rew = torch.tensor([turns[i].step_reward for i in idx], dtype=torch.float64)
        if discount_penalty:
            out[idx] = discounted_returns(rew, gamma)
        else:  # verl-agent: discount the task reward, then subtract this turn's penalty once
            out[idx] = discounted_returns(rew + pen, gamma) - pen
    return out


@register("advantage", "gigpo")
def gigpo(
    turns: Sequence[TurnSample],
    *,
    norm: str = "mean_std_norm",
    gamma: float = 0.95,
    step_weight: float = 1.0,
    cross_steps: bool = True,
    discount_penalty: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO: episode advantage + ω · anchor-state step advantage (Feng et al. 2025; Eqs. 23–27).

    * Episode part: :func:`grpo` with ``cross_steps`` (verl-agent default True).
    * Step returns: R_{i,k} = Σ_{m ≥ k} γ^{m−k} r_{i,m} inside each trajectory (Eq. 25), turns
      ordered by ``step``. With ``discount_penalty=False`` (verl-agent) the format penalty
      inside ``step_reward`` is not discounted backwards: R_k = Σ γ^{m−k}(r_m + p_m) − p_k.
      Samples without ``format_penalty`` are unaffected.
    * Step groups: samples of one task group ``uid`` with equal ``anchor``, from any turn of any
      trajectory (Eq. 24); A_step normalises R within its step group (Eq. 26); a step group of
      one gets A_step = 0.
    * A' = A_episode + ω · A_step (Eq. 27), ω = ``step_weight`` (Table 6: 1).
    """
    if step_weight < 0:
        raise ConfigError(f"step_weight (ω) must be >= 0, got {step_weight}")
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    episode = grpo(turns, norm=norm, cross_steps=cross_steps, eps=eps).double()
    step_ret = _step_returns(turns, gamma, discount_penalty)
    step_adv = torch.zeros(len(turns), dtype=torch.float64)
    for idx in _groups([(t.uid, t.anchor) for t in turns]).values():
        step_adv[idx] = group_normalise(step_ret[idx], norm, eps=eps, singleton="zero")
    return (episode + step_weight * step_adv).float()


@register("advantage", "empg")
def empg(
    turns: Sequence[TurnSample],
    *,
    norm: str = "mean_std_norm",
    cross_steps: bool = False,
    empg_k: float = 1.0,
    empg_k_future: float = 1.0,
    empg_zeta: float = 0.05,
    eps: float = 1e-6,
) -> Tensor:
    """EMPG entropy-modulated advantage on top of GRPO (Wang et al. 2025a; Eqs. 28–31).

    1. A_i from :func:`grpo` (``norm``, ``cross_steps``).
    2. H̃ = (H − min H)/(max H − min H + 1e-8), min/max over the whole batch of turns.
    3. g(H̃) = exp(−k·H̃) / mean_batch exp(−k·H̃)  (self-calibrated: mean g = 1, Eq. 30).
    4. f(H̃) = exp(−k'·H̃) (future clarity, Eq. 31), taken at the *next turn* of the same
       trajectory (``step`` + 1); the last turn (or a turn whose successor is not in the
       batch) gets no bonus.
    5. A_mod = g(H̃_t)·A + ζ·f(H̃_{t+1})  (Eq. 29), then the batch mean is subtracted.

    Table 6: k = k' = 1.0, ζ = 0.05.
    """
    if any(t.entropy is None for t in turns):
        raise ConfigError(
            "empg needs an 'entropy' (mean token entropy of the turn) on every sample"
        )
    if not turns:
        return torch.zeros(0)
    base = grpo(turns, norm=norm, cross_steps=cross_steps, eps=eps).double()
    ent = torch.tensor([float(t.entropy) for t in turns], dtype=torch.float64)
    ent_n = (ent - ent.min()) / (ent.max() - ent.min() + 1e-8)
    scale = torch.exp(-empg_k * ent_n)
    scale = scale / scale.mean()
    clarity = torch.exp(-empg_k_future * ent_n)
    bonus = torch.zeros(len(turns), dtype=torch.float64)
    position = {(t.uid, t.traj_id, t.step): i for i, t in enumerate(turns)}
    for i, t in enumerate(turns):
        nxt = position.get((t.uid, t.traj_id, t.step + 1))
        if nxt is not None:
            bonus[i] = clarity[nxt]
    modulated = scale * base + empg_zeta * bonus
    return (modulated - modulated.mean()).float()


# --------------------------------------------------------------------------------------------
# Public entry and telemetry
# --------------------------------------------------------------------------------------------


def compute_advantages(
    name: str,
    samples: Sequence[Any],
    *,
    norm: str = "mean_std_norm",
    gamma: float = 0.95,
    step_weight: float = 1.0,
    **extra: Any,
) -> Tensor:
    """One advantage per turn sample with the registered estimator ``name``.

    Args:
        name: ``grpo | gigpo | empg`` (or any registered estimator).
        samples: turn records (objects or mappings, see the module table), any order.
        norm: ``mean_std_norm`` or ``mean_norm`` (Table 6: mean_std_norm).
        gamma: step-return discount γ (GiGPO; Table 6: 0.95). Ignored by estimators without it.
        step_weight: ω of the step advantage (GiGPO; Table 6: 1). Ignored likewise.
        **extra: the estimator's own knobs: ``cross_steps``, ``eps`` (all);
            ``discount_penalty`` (gigpo); ``empg_k``, ``empg_k_future``, ``empg_zeta`` (empg).

    Returns:
        (N,) float32 tensor aligned with ``samples``.

    Raises:
        RegistryError: unknown estimator. ConfigError: unknown knob, missing sample field.
    """
    fn = ADVANTAGES.get(name)
    params = {
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    common = {"norm": norm, "gamma": gamma, "step_weight": step_weight}
    unknown = sorted(set(extra) - (params - set(common)))
    if unknown:
        raise ConfigError(
            f"unknown keyword(s) {unknown} for advantage {name!r}; its knobs are "
            f"{sorted(params - set(common))} (plus norm, gamma, step_weight)"
        )
    if norm not in NORM_MODES:
        raise ConfigError(f"unknown norm {norm!r}; options: {', '.join(NORM_MODES)}")
    turns = [_as_turn(s) for s in samples]
    kwargs = {k: v for k, v in common.items() if k in params}
    return fn(turns, **kwargs, **extra)


def advantage_metrics(advantages: Tensor) -> dict[str, Tensor]:
    """``adv/mean|std|min|max|zero_frac`` of a (N,) advantage tensor (detached)."""
    a = advantages.detach().float()
    if a.numel() == 0:
        zero = torch.zeros(())
        return {k: zero for k in (M.ADV_MEAN, M.ADV_STD, M.ADV_MIN, M.ADV_MAX, M.ADV_ZERO_FRAC)}
    return {
        M.ADV_MEAN: a.mean(),
        M.ADV_STD: a.std() if a.numel() > 1 else torch.zeros(()),
        M.ADV_MIN: a.min(),
        M.ADV_MAX: a.max(),
        M.ADV_ZERO_FRAC: (a == 0).float().mean(),
    }


def step_group_metrics(samples: Sequence[Any]) -> dict[str, Tensor]:
    """GiGPO anchor-group telemetry: ``adv/step_group_size_mean``, ``adv/step_singleton_frac``
    (fraction of samples whose step group has one member, hence A_step = 0)."""
    turns = [_as_turn(s) for s in samples]
    sizes = [len(v) for v in _groups([(t.uid, t.anchor) for t in turns]).values()]
    if not sizes:
        return {
            M.ADV_STEP_GROUP_SIZE: torch.zeros(()),
            M.ADV_STEP_SINGLETON: torch.zeros(()),
        }
    singletons = sum(1 for s in sizes if s == 1)
    return {
        M.ADV_STEP_GROUP_SIZE: torch.tensor(sum(sizes) / len(sizes)),
        M.ADV_STEP_SINGLETON: torch.tensor(singletons / len(turns)),
    }
