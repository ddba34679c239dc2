"""``arlgym-sft collect``: resumable, exactly-once collection of step-level chat samples.

On disk (``out`` folder):

* ``samples.jsonl`` — one line per kept step: ``{"messages": [user prompt, assistant response],
  "env_id", "task_id", "task_type", "split", "episode", "step", "num_steps", "score", "won",
  "policy"}``.
* vision envs (``{"text", "image"}`` observations): ``images/<episode>-<step>.png``, the image
  each kept prompt showed, and the sample's user content is a list in HF's multimodal chat
  format — the text split at ``<image>`` around ``{"type": "image"}`` — with
  ``"images": ["images/<episode>-<step>.png"]`` (paths relative to the folder), the layout of
  TRL's VLM datasets. A PNG is written (atomically) before its sample line, so the
  exactly-once guarantee below covers images too.
* ``episodes.jsonl`` — the write-ahead log: one line per finished episode (kept or not), written
  *after* that episode's samples are fsynced.
* ``meta.json`` — the run's arguments; a resumed run must match them.
* ``held_out.json`` — how many tasks of the env's held-out panels (the first 200 of ``test``
  and of ``val``) the episodes played, by content (:mod:`arlgym.evaluation.held_out`; must be
  0 unless ``--split`` is a held-out one).
* ``README.md`` — the dataset card.

Crash safety: an episode counts as done only once its log line is on disk. On resume, samples of
episodes without a log line (a kill between the two writes) and torn last lines are dropped,
and the remaining work is redone, so the final files equal those of an uninterrupted run.
Episode ``e`` is member ``e % group_size`` of task group ``e // group_size``, whose env is reset
with seed ``seed + e // group_size`` — the same prompt ``gymnasium.make(env_id).reset(seed=...)``
gives.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arlgym.envs.servers import env_server_kwargs
from arlgym.errors import ConfigError
from arlgym.evaluation.held_out import format_held_out, held_out_report
from arlgym.policies.base import Policy, SamplingParams
from arlgym.policies.hf import vision_messages
from arlgym.policies.spec import seeded_policy
from arlgym.rollout import RolloutCollector, Trajectory
from arlgym.rundir import PLACEMENT_NOT_SETTINGS, check_settings, settings_of

__all__ = ["CollectConfig", "collect_sft", "message_text", "read_jsonl_lines",
           "write_dataset_card"]


@dataclass
class CollectConfig:
    """What to collect. Field meanings match the CLI flags of ``arlgym-sft collect``."""

    env_id: str = "arl/Sokoban-v0"
    policy: str = "expert"
    episodes: int = 200
    group_size: int = 1
    temperature: float = 0.0
    max_new_tokens: int = 256
    min_score: float | None = None  # None: keep won episodes only
    split: str = "train"
    seed: int = 0
    batch_tasks: int = 32
    workers: int | None = None
    env_kwargs: dict[str, Any] | None = None
    env_servers: str = ""  # comma-separated `arlgym serve` URLs; empty: local envs

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ConfigError(f"--episodes must be >= 1, got {self.episodes}")
        if self.group_size < 1:
            raise ConfigError(f"--group-size must be >= 1, got {self.group_size}")
        if self.episodes % self.group_size:
            raise ConfigError(
                f"--episodes ({self.episodes}) must be a multiple of --group-size ({self.group_size})"
            )
        if self.batch_tasks < 1:
            raise ConfigError(f"--batch-tasks must be >= 1, got {self.batch_tasks}")

    def keeps(self, traj: Trajectory) -> bool:
        return traj.won if self.min_score is None else traj.score >= self.min_score

    def identity(self) -> dict[str, Any]:
        """The fields that define the data (a resumed run must not change them); where the envs
        run is not among them (:data:`arlgym.rundir.PLACEMENT_NOT_SETTINGS`)."""
        out = asdict(self)
        for volatile in ("episodes", "workers", "batch_tasks", *PLACEMENT_NOT_SETTINGS):
            out.pop(volatile)
        return out


def read_jsonl_lines(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines of ``path``; a torn (unparsable) line ends the read."""
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return out


def _append(path: Path, lines: list[dict[str, Any]]) -> None:
    """One write of whole lines, then fsync: a kill leaves at most one torn last line."""
    if not lines:
        return
    data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(path: Path, lines: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _recover(out: Path) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Done episodes from the log, and the samples that belong to them (file repaired)."""
    episodes_path, samples_path = out / "episodes.jsonl", out / "samples.jsonl"
    episodes = {int(e["episode"]): e for e in read_jsonl_lines(episodes_path)}
    if episodes_path.exists():
        _rewrite(episodes_path, sorted(episodes.values(), key=lambda e: e["episode"]))
    raw = read_jsonl_lines(samples_path) if samples_path.exists() else []
    samples = [s for s in raw if int(s["episode"]) in episodes]
    if samples_path.exists() and (len(samples) != len(raw) or _has_torn_tail(samples_path)):
        _rewrite(samples_path, samples)
    return episodes, samples


def _has_torn_tail(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return False
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def _write_png(path: Path, image: Any) -> None:
    """``image`` (uint8 H×W×3) as a PNG, via a temporary file and one rename."""
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".png.tmp")
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(tmp, format="PNG")
    os.replace(tmp, path)


def _user_message(s: Any, episode: int, out: Path | None) -> tuple[dict[str, Any], list[str]]:
    """The user message of a step (multimodal for a vision step, its PNG written) and the
    image paths relative to ``out``."""
    if s.image is None or out is None:
        return {"role": "user", "content": s.prompt}, []
    rel = f"images/{episode:07d}-{s.step:03d}.png"
    _write_png(out / rel, s.image)
    return vision_messages({"text": s.prompt})[0], [rel]


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or HF's list of typed parts)."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _samples_of(traj: Trajectory, episode: int, cfg: CollectConfig,
                out: Path | None = None) -> list[dict[str, Any]]:
    rows = []
    for s in traj.steps:
        user, images = _user_message(s, episode, out)
        row = {"messages": [user, {"role": "assistant", "content": s.response}]}
        if images:
            row["images"] = images
        rows.append(row)
    return [
        {
            **row,
            "env_id": cfg.env_id,
            "task_id": traj.task_id,
            "task_type": traj.task_type,
            "split": cfg.split,
            "episode": episode,
            "step": s.step,
            "num_steps": traj.length,
            "score": traj.score,
            "won": traj.won,
            "policy": cfg.policy,
        }
        for row, s in zip(rows, traj.steps, strict=True)
    ]


def _finished(out: Path, cfg: CollectConfig) -> bool:
    """Whether ``out`` holds this whole collection: every episode in the log, and the dataset
    card (written last). Reads only: a finished folder is not touched again."""
    logged = {int(e["episode"]) for e in read_jsonl_lines(out / "episodes.jsonl")}
    return logged >= set(range(cfg.episodes)) and (out / "README.md").is_file()


def collect_sft(cfg: CollectConfig, out: str | Path, policy: Policy | None = None,
                progress: bool = True, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Collect (or resume collecting) ``cfg.episodes`` episodes into ``out``.

    A folder holding this very collection, finished, is not touched (no policy is loaded);
    one holding part of it continues (``say`` gets the one line that tells so); one of other
    settings is refused.

    Returns:
        Statistics of the whole dataset (also written to the dataset card), with ``run``:
        ``"new"``, ``"continued"`` or ``"finished"`` (nothing was collected).
    """
    from tqdm.auto import tqdm

    out = Path(out)
    meta_path = out / "meta.json"
    resumed = meta_path.exists()
    if resumed:
        old = json.loads(meta_path.read_text()).get("identity") or {}
        check_settings(meta_path, settings_of(cfg.identity()), what="SFT data", flag="--out",
                       folder=out, old=settings_of(old))
        if _finished(out, cfg):
            return {**dataset_stats(out), "run": "finished"}
    out.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps({"identity": cfg.identity(), "episodes": cfg.episodes},
                                    indent=2))
    episodes, _ = _recover(out)
    done_before = sum(1 for e in episodes if e < cfg.episodes)
    if resumed:
        say(f"continuing the collection in {out}: {done_before}/{cfg.episodes} episodes done")
    policy = policy or seeded_policy(cfg.policy, cfg.seed)
    sampling = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                              seed=cfg.seed)
    num_groups = cfg.episodes // cfg.group_size
    env_kwargs = dict(cfg.env_kwargs or {})
    remote = env_server_kwargs(cfg.env_servers, "--env-servers")
    bar = tqdm(total=cfg.episodes, initial=sum(1 for e in episodes if e < cfg.episodes),
               desc=f"collect {cfg.env_id}", unit="ep", disable=not progress)
    collectors: dict[int, RolloutCollector] = {}
    try:
        for first in range(0, num_groups, cfg.batch_tasks):
            groups = range(first, min(num_groups, first + cfg.batch_tasks))
            wanted = [g * cfg.group_size + m for g in groups for m in range(cfg.group_size)]
            if all(e in episodes for e in wanted):
                continue
            n = len(groups)
            if n not in collectors:
                collectors[n] = RolloutCollector(
                    cfg.env_id, policy, group_size=cfg.group_size, num_tasks=n,
                    sampling=sampling, env_kwargs=env_kwargs,
                    mode="async" if cfg.workers else "auto", num_workers=cfg.workers,
                    progress=False, **remote)
            trajs = collectors[n].collect(seed=cfg.seed + first,
                                          options={"split": cfg.split})
            for episode, traj in zip(wanted, trajs, strict=True):
                if episode in episodes:
                    continue
                kept = cfg.keeps(traj)
                samples = _samples_of(traj, episode, cfg, out) if kept else []
                _append(out / "samples.jsonl", samples)
                record = {"episode": episode, "task_id": traj.task_id, "won": traj.won,
                          "score": traj.score, "steps": traj.length, "kept": kept,
                          "samples": len(samples)}
                _append(out / "episodes.jsonl", [record])
                episodes[episode] = record
                bar.update(1)
            done = [episodes[e] for e in episodes]
            bar.set_postfix(success=f"{sum(e['won'] for e in done) / len(done):.2f}",
                            kept=sum(e["kept"] for e in done))
    finally:
        bar.close()
        for c in collectors.values():
            c.close()
    stats = dataset_stats(out)
    # what SFT on this data trains on, against the panels evals play (must be 0)
    stats["held_out"] = held_out_report(
        cfg.env_id, env_kwargs, [e["task_id"] for e in read_jsonl_lines(out / "episodes.jsonl")])
    (out / "held_out.json").write_text(json.dumps(stats["held_out"], indent=2))
    write_dataset_card(out, cfg, stats)
    return {**stats, "run": "continued" if resumed else "new"}


def dataset_stats(out: Path, tokenizer: Any = None) -> dict[str, Any]:
    """Counts, success and length statistics of a collected dataset."""
    episodes = read_jsonl_lines(out / "episodes.jsonl")
    samples = read_jsonl_lines(out / "samples.jsonl")
    kept = [e for e in episodes if e["kept"]]
    stats: dict[str, Any] = {
        "episodes": len(episodes),
        "kept_episodes": len(kept),
        "samples": len(samples),
        "success_rate": sum(e["won"] for e in episodes) / max(1, len(episodes)),
        "mean_score": sum(e["score"] for e in episodes) / max(1, len(episodes)),
        "mean_steps_kept": statistics.mean(e["steps"] for e in kept) if kept else 0.0,
    }
    if samples:
        p_chars = [len(message_text(s["messages"][0]["content"])) for s in samples]
        r_chars = [len(message_text(s["messages"][1]["content"])) for s in samples]
        images = sum(len(s.get("images", [])) for s in samples)
        if images:
            stats["images"] = images
        stats.update(prompt_chars_mean=statistics.mean(p_chars), prompt_chars_max=max(p_chars),
                     response_chars_mean=statistics.mean(r_chars), response_chars_max=max(r_chars))
        if tokenizer is not None:
            p_tok = [len(tokenizer(message_text(s["messages"][0]["content"]))["input_ids"])
                     for s in samples]
            r_tok = [len(tokenizer(message_text(s["messages"][1]["content"]))["input_ids"])
                     for s in samples]
            stats.update(prompt_tokens_mean=statistics.mean(p_tok), prompt_tokens_max=max(p_tok),
                         response_tokens_mean=statistics.mean(r_tok),
                         response_tokens_max=max(r_tok), tokens_total=sum(p_tok) + sum(r_tok))
    return stats


def write_dataset_card(out: Path, cfg: CollectConfig, stats: dict[str, Any]) -> None:
    """``README.md`` next to the data: source, env, counts, success, length stats."""
    rows = "\n".join(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |"
                     for k, v in stats.items() if k != "held_out")
    held_out = f"- {format_held_out(stats['held_out'])}\n" if "held_out" in stats else ""
    kept_rule = "won episodes" if cfg.min_score is None else f"episodes with score >= {cfg.min_score}"
    card = f"""# SFT data: {cfg.env_id} from `{cfg.policy}`

Step-level chat samples collected with `arlgym-sft collect` through arlgym's shared rollout
collector: each sample is one turn, the user message is exactly the prompt the env showed and
the assistant message the policy's response. Kept: {kept_rule}.

- env: `{cfg.env_id}` (kwargs {cfg.env_kwargs or {}}), split `{cfg.split}`
- source policy: `{cfg.policy}`, temperature {cfg.temperature}
- seeds: task group g uses env seed {cfg.seed} + g; group size {cfg.group_size}
{held_out}
| statistic | value |
|---|---|
{rows}

Files: `samples.jsonl` (HF `messages` format plus metadata), `episodes.jsonl` (one line per
episode, kept or not), `meta.json` (collection settings); vision envs: `images/*.png` (one per
sample, named in its `images` field; the user content marks where it goes).
"""
    (out / "README.md").write_text(card, encoding="utf-8")
