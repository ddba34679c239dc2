"""The metric vocabulary: every key the trainer logs, defined once with its meaning and how it
combines across ranks; and the one reader of ``metrics.jsonl``.

Why one place: the trainer writes these keys, the collapse alarm and the arena report read
them, experiment scripts plot them. Spelled as string literals in each, a rename breaks the
readers silently; and how a value combines across ranks is a property of the key, not of the
code that happens to reduce it. ``env/turns`` (responses sampled on this rank) must be *added*
over ranks — the report sums it into the budget a run spent — while ``env/success_rate`` is a
mean and ``rollout/logprob_abs_diff_max`` a maximum.

Reductions (:data:`REDUCTIONS`):

* ``mean`` — a per-rank rate or average; ranks hold equal shares (whole groups, equal counts);
* ``sum`` — a per-rank count or a per-rank share of a global total (``loss``: each rank holds
  its share of the globally normalised loss);
* ``max`` — a worst case, or a wall-clock time (the step takes as long as its slowest rank);
* ``min`` — a worst case from below (the smallest IS ratio).

Keys with a variable part (``is_groups/<group>/tokens``) are *families*, matched by prefix.
A key in no entry and no family reduces by ``mean`` (:func:`reduction`), so a new loss metric
works before it is listed here; :func:`undefined` names such keys (a test keeps it empty for
everything the trainer emits).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arlgym.evaluation.metrics import FORMAT_VALID_RATIO as SUMMARY_FORMAT_VALID
from arlgym.evaluation.metrics import MEAN_SCORE as SUMMARY_MEAN_SCORE
from arlgym.evaluation.metrics import SUCCESS_RATE as SUMMARY_SUCCESS_RATE
from arlgym.evaluation.metrics import SUCCESS_SE as SUMMARY_SUCCESS_SE

__all__ = [
    "Metric", "METRICS", "FAMILIES", "REDUCTIONS", "reduction", "undefined", "reduce_across",
    "read_metrics_jsonl",
    # keys
    "STEP", "SUCCESS_RATE", "SCORE", "EPISODE_RETURN", "EPISODE_LENGTH", "FORMAT_VALID",
    "ACTION_VALID", "TURNS", "SAMPLES", "TOKENS", "RESPONSE_LENGTH", "TOKENS_PER_S",
    "TIME_ROLLOUT", "TIME_TRAIN", "TIME_STEP", "LOSS", "PG_LOSS", "GRAD_NORM", "LEARNING_RATE",
    "KL_REF", "ENTROPY", "IS_LOW_NEG", "IS_HIGH_POS", "IS_OUT", "IS_RATIO_MEAN", "IS_RATIO_MIN",
    "IS_RATIO_MAX", "PPO_KL", "PPO_KL_K3", "SEQ_MASKED", "CLIP_LOW", "CLIP_HIGH", "CLIP_REGION",
    "EVAL_SUCCESS", "EVAL_SUCCESS_SE", "EVAL_SCORE", "EVAL_FORMAT_VALID", "ALARM_COLLAPSE",
    "GROUPS_RETRIED", "GROUPS_DROPPED", "LOGPROB_DIFF_MEAN", "LOGPROB_DIFF_MAX",
    "PROB_DIFF_MEAN", "MISMATCH_KL", "MISMATCH_RATIO_Q", "MISMATCH_MASKED", "MISMATCH_WEIGHT",
    "STALENESS_MEAN", "STALENESS_MAX", "ASYNC_DROPPED", "ASYNC_WITHHELD", "ASYNC_RESTARTS",
    "ASYNC_BUSY", "TIME_WAIT", "IMAGE_SLOT_CUT", "CREDIT_TOKEN_FRAC", "CLIP_DUAL", "IS_SEQ_RATIO",
    "IS_SAPO_GATE", "IS_GROUPS", "ADV", "ADV_MEAN", "ADV_STD", "ADV_MIN", "ADV_MAX",
    "ADV_ZERO_FRAC", "ADV_STEP_GROUP_SIZE", "ADV_STEP_SINGLETON", "FILTER", "FILTER_KEPT",
    "FILTER_INFORMATIVE", "FILTER_TRIES", "FILTER_GROUPS", "FILTER_BACKFILLED",
    "FILTER_COLD_START", "MISMATCH_TRUNCATED", "is_group_key",
    "mismatch_quantile_key", "EVAL_OF_SUMMARY", "eval_metrics", "summary_of_eval_row",
    "SUMMARY_SUCCESS_RATE", "SUMMARY_SUCCESS_SE", "SUMMARY_MEAN_SCORE", "SUMMARY_FORMAT_VALID",
]

REDUCTIONS = ("mean", "sum", "max", "min")


@dataclass(frozen=True)
class Metric:
    """One logged key: its name, its reduction across ranks and what it means."""

    key: str
    reduce: str
    meaning: str


METRICS: dict[str, Metric] = {}
#: prefix -> Metric for keys with a variable part
FAMILIES: dict[str, Metric] = {}


def _m(key: str, reduce: str, meaning: str) -> str:
    assert reduce in REDUCTIONS and key not in METRICS, key
    METRICS[key] = Metric(key, reduce, meaning)
    return key


def _family(prefix: str, reduce: str, meaning: str) -> None:
    FAMILIES[prefix] = Metric(prefix + "*", reduce, meaning)


# ---------------------------------------------------------------- run
STEP = _m("step", "max", "trainer steps done (optimizer updates of the whole batch)")
# ---------------------------------------------------------------- env (every trajectory rolled)
SUCCESS_RATE = _m("env/success_rate", "mean", "fraction of rolled episodes won (T=rollout)")
SCORE = _m("env/score", "mean", "mean final env score of rolled episodes")
EPISODE_RETURN = _m("env/episode_return", "mean", "mean summed env reward (penalties included)")
EPISODE_LENGTH = _m("env/episode_length", "mean", "mean turns per rolled episode")
FORMAT_VALID = _m("env/format_valid_ratio", "mean", "turns whose response parsed (format valid)")
ACTION_VALID = _m("env/action_valid_ratio", "mean", "turns whose action was admissible")
TURNS = _m("env/turns", "sum", "responses sampled this step, kept or filtered (env steps spent)")
# ---------------------------------------------------------------- batch
SAMPLES = _m("samples", "sum", "turn samples trained on this step")
TOKENS = _m("tokens", "sum", "prompt + response tokens of the trained samples")
RESPONSE_LENGTH = _m("response_length", "mean", "mean response tokens per trained sample")
TOKENS_PER_S = _m("tokens_per_s", "sum", "trained tokens per second of update time, all ranks")
TIME_ROLLOUT = _m("time/rollout_s", "max", "seconds spent collecting (incl. dynamic sampling)")
TIME_TRAIN = _m("time/train_s", "max", "seconds spent in log-probs and the update")
TIME_STEP = _m("time/step_s", "max", "seconds of the whole step")
# ---------------------------------------------------------------- update
LOSS = _m("loss", "sum", "total loss; each rank holds its share of the global normalisation")
PG_LOSS = _m("pg_loss", "sum", "policy-gradient term of the loss (same sharing as loss)")
GRAD_NORM = _m("grad_norm", "mean", "gradient norm before clipping (mean over mini-batches)")
LEARNING_RATE = _m("learning_rate", "mean", "learning rate after the step")
KL_REF = _m("kl", "mean", "k3 KL(π_θ‖π_ref) per token")
ENTROPY = _m("entropy", "mean", "mean token entropy")
IS_LOW_NEG = _m("is/out_low_neg_adv_frac", "mean",
                "tokens with IS ratio < 1-ε and A < 0 (paper Fig. 3; the collapse alarm's signal)")
IS_HIGH_POS = _m("is/out_high_pos_adv_frac", "mean", "tokens with IS ratio > 1+ε and A > 0")
IS_OUT = _m("is/out_frac", "mean", "tokens with IS ratio outside [1-ε, 1+ε]")
IS_RATIO_MEAN = _m("is/ratio_mean", "mean", "mean token IS ratio π_θ/π_old")
IS_RATIO_MIN = _m("is/ratio_min", "min", "smallest token IS ratio")
IS_RATIO_MAX = _m("is/ratio_max", "max", "largest token IS ratio")
PPO_KL = _m("is/ppo_kl", "mean", "KL(π_old‖π_θ), k1 estimate")
PPO_KL_K3 = _m("is/ppo_kl_k3", "mean", "KL(π_old‖π_θ), k3 estimate (≥ 0)")
SEQ_MASKED = _m("seq_mask/masked_frac", "mean", "sequences the sequence mask dropped")
CLIP_LOW = _m("clip_ratio/low_mean", "mean", "tokens whose update the lower clip changed")
CLIP_HIGH = _m("clip_ratio/high_mean", "mean", "tokens whose update the upper clip changed")
CLIP_REGION = _m("clip_ratio/region_mean", "mean", "low + high clip fractions")
CLIP_DUAL = _m("clip_ratio/dual_mean", "mean", "tokens where PPO's dual clip was active")
IS_SEQ_RATIO = _m("is/seq_ratio_mean", "mean", "GSPO: mean sequence-level ratio")
IS_SAPO_GATE = _m("is/sapo_gate_mean", "mean", "SAPO: mean soft gate value")
IS_GROUPS = "is_groups/"  # family prefix: is_groups/<group>/{tokens,kl} (see is_group_key)
_family(IS_GROUPS, "mean", "paper Figs. 3c/d, 4: token share / KL share of an "
        "advantage-sign × ratio × entropy group")
# ---------------------------------------------------------------- advantages (rl/advantages.py)
ADV = "adv/"  # family prefix: the keys below, and any advantage statistic added later
_family(ADV, "mean", "advantage statistics (mean, std, min, max, zero fraction, GiGPO groups)")
ADV_MEAN = _m("adv/mean", "mean", "mean advantage of the trained samples")
ADV_STD = _m("adv/std", "mean", "standard deviation of the advantages (0: no learning signal)")
ADV_MIN = _m("adv/min", "mean", "smallest advantage")
ADV_MAX = _m("adv/max", "mean", "largest advantage")
ADV_ZERO_FRAC = _m("adv/zero_frac", "mean", "samples whose advantage is exactly 0")
ADV_STEP_GROUP_SIZE = _m("adv/step_group_size_mean", "mean",
                         "GiGPO: mean size of the anchor-state (step) groups")
ADV_STEP_SINGLETON = _m("adv/step_singleton_frac", "mean",
                        "GiGPO: samples whose step group has one member (their A_step = 0)")
# ---------------------------------------------------------------- dynamic sampling (rl/filtering.py)
FILTER = "filter/"  # family prefix: the keys below
_family(FILTER, "mean", "dynamic sampling: kept/informative group fraction, tries, groups")
FILTER_KEPT = _m("filter/kept_group_fraction", "mean",
                 "groups kept / groups rolled (paper Eq. 7: returns not all equal)")
FILTER_INFORMATIVE = _m("filter/informative_group_fraction", "mean",
                        "groups whose returns differ / groups rolled (during cold start too)")
FILTER_TRIES = _m("filter/num_tries", "mean", "rollout rounds dynamic sampling took this step")
FILTER_GROUPS = _m("filter/num_groups", "mean", "groups in the trained batch")
FILTER_BACKFILLED = _m("filter/backfilled_groups", "mean",
                       "uniform groups added to fill the batch (backfill)")
FILTER_COLD_START = _m("filter/cold_start", "mean", "1 while filtering is off (cold-start steps)")
# ---------------------------------------------------------------- rollout health
GROUPS_RETRIED = _m("rollout/groups_retried", "sum", "groups replayed after an env worker died")
GROUPS_DROPPED = _m("rollout/groups_dropped", "sum", "groups dropped after repeated failures")
LOGPROB_DIFF_MEAN = _m("rollout/logprob_abs_diff_mean", "mean",
                       "mean |sampler − learner| log-prob of the sampled tokens")
LOGPROB_DIFF_MAX = _m("rollout/logprob_abs_diff_max", "max",
                      "largest |sampler − learner| log-prob (a broken weight sync jumps here)")
PROB_DIFF_MEAN = _m("rollout/prob_abs_diff_mean", "mean", "mean |sampler − learner| probability")
IMAGE_SLOT_CUT = _m("rollout/image_slot_cut", "sum", "vision turns whose response held an "
                    "image-slot token and was trained only up to it (docs/scale.md)")
# ---------------------------------------------------------------- off-policy correction
MISMATCH_KL = _m("mismatch/kl", "mean", "k3 KL(π_sampler‖π_learner) per token: how far the "
                 "policy that sampled is from the one that learns (staleness + engine numerics)")
MISMATCH_RATIO_Q = "mismatch/ratio_q"  # family prefix: mismatch/ratio_q{05,50,95}
_family("mismatch/ratio_q", "mean", "quantiles of the token ratio π_learner/π_sampler")
MISMATCH_MASKED = _m("mismatch/masked_frac", "mean",
                     "tokens the rollout correction zeroed (MIS / IcePop; TIS: 0)")
MISMATCH_WEIGHT = _m("mismatch/weight_mean", "mean", "mean correction weight over tokens")
MISMATCH_TRUNCATED = _m("mismatch/truncated_frac", "mean",
                        "tokens (or sequences' tokens) whose TIS weight was capped")
# ---------------------------------------------------------------- credit (arlgym/rl/credit.py)
CREDIT_TOKEN_FRAC = _m("credit/token_frac", "mean", "share of response tokens that carry the "
                       "policy-gradient loss (credit action: the tokens after </think>)")
# ---------------------------------------------------------------- staleness (async rollouts)
STALENESS_MEAN = _m("staleness/mean", "mean", "mean updates between sampling and training")
STALENESS_MAX = _m("staleness/max", "max", "most updates between sampling and training")
STALENESS_HIST = "staleness/hist_"
_family(STALENESS_HIST, "sum", "turn samples trained on, by their staleness in updates")
ASYNC_DROPPED = _m("async/dropped_groups", "sum", "rollout jobs discarded as over-stale (drop)")
ASYNC_WITHHELD = _m("async/withheld_groups", "sum",
                    "rollout jobs whose task was replayed as over-stale (withhold)")
ASYNC_RESTARTS = _m("async/worker_restarts", "sum", "rollout workers that died and were replaced")
ASYNC_BUSY = _m("async/rollout_busy_frac", "mean",
                "fraction of the rollout workers' wall time spent playing jobs (1 − idle)")
TIME_WAIT = _m("time/learner_wait_s", "max", "seconds the learner waited for rollouts this step")
# ---------------------------------------------------------------- eval and alarm (rank 0)
EVAL_SUCCESS = _m("eval/success_rate", "mean", "success on the periodic eval list (greedy unless eval_temperature)")
EVAL_SUCCESS_SE = _m("eval/success_se", "mean", "its standard error")
EVAL_SCORE = _m("eval/score", "mean", "greedy mean score on the periodic eval list")
EVAL_FORMAT_VALID = _m("eval/format_valid_ratio", "mean", "greedy format validity")
ALARM_COLLAPSE = _m("alarm/collapse", "max", "1 once the online collapse alarm has fired")

#: the eval summary's key (:mod:`arlgym.evaluation.metrics`) -> the trainer's ``eval/`` key: the
#: one translation between the two vocabularies, used both ways
EVAL_OF_SUMMARY: dict[str, str] = {
    SUMMARY_SUCCESS_RATE: EVAL_SUCCESS,
    SUMMARY_SUCCESS_SE: EVAL_SUCCESS_SE,
    SUMMARY_MEAN_SCORE: EVAL_SCORE,
    SUMMARY_FORMAT_VALID: EVAL_FORMAT_VALID,
}


def eval_metrics(overall: Mapping[str, Any]) -> dict[str, Any]:
    """The ``eval/`` metrics of an eval summary's ``overall`` row (what the trainer logs)."""
    return {key: overall[name] for name, key in EVAL_OF_SUMMARY.items()}


def summary_of_eval_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """An eval summary's ``overall`` row rebuilt from a logged row's ``eval/`` metrics (those
    it holds; a missing mean score reads NaN)."""
    out = {name: row[key] for name, key in EVAL_OF_SUMMARY.items() if key in row}
    out.setdefault(SUMMARY_MEAN_SCORE, float("nan"))
    return out


def is_group_key(group: str, what: str) -> str:
    """``is_groups/<group>/<what>``: ``what`` is ``tokens`` (the group's token share) or ``kl``
    (its KL share), ``group`` one of :data:`arlgym.rl.losses.IS_GROUPS`."""
    return f"{IS_GROUPS}{group}/{what}"


def mismatch_quantile_key(q: float) -> str:
    """``mismatch/ratio_qNN`` for the quantile ``q`` (0.05 -> ``mismatch/ratio_q05``)."""
    return f"{MISMATCH_RATIO_Q}{round(100 * q):02d}"


def _lookup(key: str) -> Metric | None:
    if key in METRICS:
        return METRICS[key]
    for prefix, metric in FAMILIES.items():
        if key.startswith(prefix):
            return metric
    return None


def reduction(key: str) -> str:
    """How ``key`` combines across ranks: ``mean``, ``sum``, ``max`` or ``min`` (unknown:
    ``mean``)."""
    metric = _lookup(key)
    return metric.reduce if metric else "mean"


def undefined(keys: Any) -> list[str]:
    """The keys of ``keys`` that the vocabulary does not define (for tests)."""
    return sorted(k for k in keys if _lookup(k) is None)


def reduce_across(metrics: Mapping[str, float],
                  reduce: Callable[[list[float], str], list[float]]) -> dict[str, float]:
    """Combine one rank's ``metrics`` with the other ranks', each key by its reduction.

    ``reduce(values, how)`` is the collective (one call per reduction kind, in the fixed order
    of :data:`REDUCTIONS`, so every rank issues the same collectives); it gets this rank's values and
    returns the combined ones. Every rank must hold the same keys.
    """
    out: dict[str, float] = {}
    for how in REDUCTIONS:
        keys = sorted(k for k in metrics if reduction(k) == how)
        if not keys:
            continue
        values = reduce([float(metrics[k]) for k in keys], how)
        out.update(zip(keys, values, strict=True))
    return out


def read_metrics_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` (empty list if it does not exist).

    A line that is not JSON is skipped: a run killed while writing leaves a torn last line, and
    every reader — resume, the online alarm, the report — must read past it the same way.
    Rows that are not JSON objects are skipped too.
    """
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


# ---------------------------------------------------------------- the alarm's rollbacks
ALARM_ROLLBACKS = _m("alarm/rollbacks", "max",
                     "rollbacks so far (on_collapse rollback): 0 until the alarm first fires")
__all__ += ["ALARM_ROLLBACKS"]
