"""DAPO dynamic sampling: keep only task groups with a learning signal (paper §2.2 Eq. 7, §4.3).

A group of G rollouts of one task whose episode returns are all equal (all solved, all failed)
has zero group-relative advantage, so it only dilutes the batch. :func:`dynamic_sampling` is the
pure filter; :class:`DynamicSampler` is the small stateful loop a trainer runs each step:

1. while ``step < cold_start_steps`` (the first N trainer steps, ARLArena: 15 on ALFWorld,
   5 on WebShop) roll once and keep everything;
2. otherwise roll, keep the informative groups, and roll again until ``target_groups`` are
   kept or ``max_tries`` rollouts were made (Table 6 "N oversample" = 3, verl
   ``max_num_gen_batches``);
3. if still short, back-fill with uniform groups (ARLArena; ``backfill=False`` returns the
   short batch, as upstream verl-agent would keep the unfiltered batch instead);
4. truncate to ``target_groups`` whole groups.

Metrics (detached tensors): ``filter/kept_group_fraction`` (informative / all groups rolled this
step), ``filter/num_tries``, ``filter/num_groups`` (returned), ``filter/backfilled_groups``,
``filter/cold_start`` (1 while filtering is skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.registry import FILTERS, register

__all__ = ["dynamic_sampling", "DynamicSampler", "episode_return_of"]

Metrics = dict[str, Tensor]
G = TypeVar("G")


@register("filter", "dynamic_sampling")
def dynamic_sampling(
    group_returns: Sequence[Sequence[float]], *, atol: float = 0.0
) -> tuple[list[bool], Metrics]:
    """Which groups to keep: those whose returns are not all equal (paper Eq. 7).

    Args:
        group_returns: per group, the episode returns of its members (ARLArena filters on the
            env return without the format penalty; pass success flags to filter on success).
        atol: returns within ``atol`` of each other count as equal (max − min ≤ atol).

    Returns:
        (keep, metrics): ``keep[g]`` is True iff max − min > ``atol`` (a one-member group is
        never informative); ``filter/kept_group_fraction`` = kept / groups (0 for no groups).
    """
    if atol < 0:
        raise ConfigError(f"atol must be >= 0, got {atol}")
    keep = [len(r) > 0 and (max(r) - min(r)) > atol for r in group_returns]
    frac = sum(keep) / len(keep) if keep else 0.0
    return keep, {M.FILTER_KEPT: torch.tensor(frac)}


def episode_return_of(member: Any) -> float:
    """Default return reader: ``member.episode_return`` or ``member["episode_return"]``."""
    if isinstance(member, Mapping):
        return float(member["episode_return"])
    return float(member.episode_return)


@dataclass
class DynamicSampler(Generic[G]):
    """Accumulates informative groups across rollout tries (DAPO dynamic sampling).

    Args:
        target_groups: task groups wanted per trainer step (Table 6 "User Prompt Number").
        max_tries: rollouts per step at most, the first included (Table 6 "N oversample": 3).
        cold_start_steps: the first N trainer steps (0-based ``step`` < N) skip filtering.
        backfill: on running out of tries, top up with uniform groups (ARLArena).
        atol: equality tolerance of the filter.
        returns_of: reads one member's episode return (default: ``episode_return``).
        filter: name in the ``filter`` registry.

    Example:
        >>> sampler = DynamicSampler(target_groups=16, max_tries=3, cold_start_steps=15)
        >>> groups, metrics = sampler.sample(collect_groups, step)  # doctest: +SKIP

    ``collect_groups()`` returns a list of groups (each a sequence of trajectories of one
    task); it is called up to ``max_tries`` times and must draw fresh tasks each call.
    """

    target_groups: int
    max_tries: int = 3
    cold_start_steps: int = 0
    backfill: bool = True
    atol: float = 0.0
    returns_of: Callable[[Any], float] = episode_return_of
    filter: str = "dynamic_sampling"
    last_metrics: Metrics = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target_groups < 1:
            raise ConfigError(f"target_groups must be >= 1, got {self.target_groups}")
        if self.max_tries < 1:
            raise ConfigError(f"max_tries must be >= 1 (Table 6: 3), got {self.max_tries}")
        if self.cold_start_steps < 0:
            raise ConfigError(f"cold_start_steps must be >= 0, got {self.cold_start_steps}")
        FILTERS.get(self.filter)  # fail at construction on an unknown name

    def _returns(self, groups: Sequence[Sequence[Any]]) -> list[list[float]]:
        return [[self.returns_of(m) for m in g] for g in groups]

    def sample(self, rollout: Callable[[], Sequence[G]], step: int) -> tuple[list[G], Metrics]:
        """Roll and filter groups for trainer step ``step`` (0-based).

        Returns:
            (groups, metrics): at most ``target_groups`` groups (all groups of the single
            rollout during cold start) and the ``filter/`` metrics (also in ``last_metrics``).
        """
        filt = FILTERS.get(self.filter)
        if step < self.cold_start_steps:
            groups = list(rollout())
            _, m = filt(self._returns(groups), atol=self.atol)
            metrics = {
                M.FILTER_KEPT: torch.tensor(1.0 if groups else 0.0),
                M.FILTER_INFORMATIVE: m[M.FILTER_KEPT],
                M.FILTER_TRIES: torch.tensor(1.0),
                M.FILTER_GROUPS: torch.tensor(float(len(groups))),
                M.FILTER_BACKFILLED: torch.tensor(0.0),
                M.FILTER_COLD_START: torch.tensor(1.0),
            }
            self.last_metrics = metrics
            return groups, metrics

        kept: list[G] = []
        uniform: list[G] = []
        rolled = tries = 0
        while tries < self.max_tries and len(kept) < self.target_groups:
            groups = list(rollout())
            tries += 1
            rolled += len(groups)
            keep, _ = filt(self._returns(groups), atol=self.atol)
            for g, k in zip(groups, keep, strict=True):
                (kept if k else uniform).append(g)
        informative = len(kept)
        batch = kept[: self.target_groups]
        backfilled = 0
        if self.backfill and len(batch) < self.target_groups:
            extra = uniform[: self.target_groups - len(batch)]
            backfilled = len(extra)
            batch.extend(extra)
        metrics = {
            M.FILTER_KEPT: torch.tensor(informative / rolled if rolled else 0.0),
            M.FILTER_INFORMATIVE: torch.tensor(informative / rolled if rolled else 0.0),
            M.FILTER_TRIES: torch.tensor(float(tries)),
            M.FILTER_GROUPS: torch.tensor(float(len(batch))),
            M.FILTER_BACKFILLED: torch.tensor(float(backfilled)),
            M.FILTER_COLD_START: torch.tensor(0.0),
        }
        self.last_metrics = metrics
        return batch, metrics
