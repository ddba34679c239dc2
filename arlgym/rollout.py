"""The one rollout collector, shared by SFT collection, RL training and evaluation.

It plays groups of episodes (``num_tasks`` tasks × ``group_size`` copies) on a
:func:`~arlgym.core.vector.make_group_vec` vector with one policy. Each turn it prompts only the
envs whose episode is still running, in one batched ``generate`` call, so finished envs are
never prompted and model policies batch across all live episodes. Every turn becomes a
:class:`StepRecord` carrying what the trainer needs (docs/architecture.md, "Data flow"): group ``uid``, ``traj_id``,
``step``, ``anchor`` of the state the prompt was made in, rewards, format flags and, for model
policies, the exact token ids and log-probs that were sampled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from arlgym.core.validation import check_int
from arlgym.core.vector import GroupVecEnv, WorkerRestarted, make_group_vec
from arlgym.errors import ConfigError
from arlgym.policies.base import Policy, SamplingParams, prompt_image, prompt_text

__all__ = [
    "StepRecord",
    "Trajectory",
    "RolloutCollector",
    "collect",
    "save_jsonl",
    "load_jsonl",
    "iter_jsonl",
]


@dataclass(slots=True)
class StepRecord:
    """One turn of one episode: the prompt shown, the response given, what followed.

    ``anchor`` is the anchor of the state in which the prompt was made (GiGPO groups turns by
    it), ``step`` the 0-based turn index. ``step_reward`` is the env's reward (task reward
    minus format penalty); the two parts are kept too so the trainer can re-weight them.
    ``won``/``score`` describe the state after the turn. Vision turns also keep the image the
    prompt showed (``image``, uint8 H×W×3) and, for model policies, the exact image tensors the
    model read (``image_inputs``, see :class:`~arlgym.policies.base.Completion`); neither is
    written to JSONL (:data:`NOT_SERIALISED`). ``policy_version`` is the learner version whose
    weights sampled the turn (asynchronous rollouts; None when the sampler is the live model).
    """

    uid: str
    traj_id: str
    step: int
    task_id: str
    task_type: str
    prompt: str
    response: str
    anchor: str
    step_reward: float
    task_reward: float
    format_penalty: float
    format_valid: bool
    action_valid: bool
    action: str | None
    executed_action: str | None
    terminated: bool
    truncated: bool
    won: bool
    score: float
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    image: Any | None = None
    image_inputs: dict[str, Any] | None = None
    policy_version: int | None = None

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


#: StepRecord fields left out of JSONL (arrays/tensors: the env regenerates the image).
NOT_SERIALISED = ("image", "image_inputs")


@dataclass(slots=True)
class Trajectory:
    """One episode; ``steps`` in order. Summary fields are filled when the episode ends."""

    uid: str
    traj_id: str
    env_id: str
    task_id: str
    task_type: str
    group_index: int
    member: int
    policy: str = ""
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1].won

    @property
    def score(self) -> float:
        return self.steps[-1].score if self.steps else 0.0

    @property
    def episode_return(self) -> float:
        return float(sum(s.step_reward for s in self.steps))

    @property
    def task_return(self) -> float:
        return float(sum(s.task_reward for s in self.steps))

    @property
    def truncated(self) -> bool:
        return bool(self.steps) and self.steps[-1].truncated

    @property
    def format_valid_ratio(self) -> float:
        return sum(s.format_valid for s in self.steps) / max(1, len(self.steps))

    @property
    def action_valid_ratio(self) -> float:
        return sum(s.action_valid for s in self.steps) / max(1, len(self.steps))

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "steps"}
        out["steps"] = [{k: v for k, v in asdict(replace(s, image=None, image_inputs=None)).items()
                         if k not in NOT_SERIALISED} for s in self.steps]
        out["summary"] = {
            "won": self.won,
            "score": self.score,
            "length": self.length,
            "episode_return": self.episode_return,
            "format_valid_ratio": self.format_valid_ratio,
            "action_valid_ratio": self.action_valid_ratio,
        }
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data.pop("summary", None)
        steps = [StepRecord(**s) for s in data.pop("steps", [])]
        return cls(**data, steps=steps)


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path, append: bool = False) -> None:
    """Write one trajectory per line (flushed and fsynced so a crash loses nothing written)."""
    import os

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for traj in trajectories:
            fh.write(json.dumps(traj.to_dict(), ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def iter_jsonl(path: str | Path) -> Iterator[Trajectory]:
    """Read trajectories back; a torn line (crash mid-write) is skipped. A file that is not
    UTF-8, or a JSON line that is no trajectory, raises ConfigError naming file and line."""
    n = 0
    try:
        with Path(path).open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):  # noqa: B007 - n is read in the except clause
                line = line.strip()
                if not line:
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    continue
                try:
                    traj = Trajectory.from_dict(data)
                except (TypeError, ValueError, AttributeError) as e:
                    raise ConfigError(f"{path}:{n}: not a trajectory written by arlgym ({e}). Fix: "
                                      "give an episodes JSONL of `arlgym eval` / save_jsonl") from None
                yield traj
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason}, after line {n}). Fix: give an "
                          "episodes JSONL of `arlgym eval` / save_jsonl") from None


def load_jsonl(path: str | Path) -> list[Trajectory]:
    return list(iter_jsonl(path))


class RolloutCollector:
    """Plays task groups with one policy and returns :class:`Trajectory` objects.

    Args:
        env_id: registered env id.
        policy: any :class:`~arlgym.policies.base.Policy`.
        group_size: rollouts per task (GRPO's G); members share the task and first anchor.
        num_tasks: task groups per ``collect`` call (the vector is built once and reused).
        sampling: sampling parameters passed to every ``generate`` call.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        mode: vector mode (``"sync"``, ``"async"``, ``"auto"``).
        seed: base seed of the first ``collect``; later calls continue with fresh tasks.
        progress: show a progress bar over finished episodes.
        restart: async vectors: replace a worker that dies or hangs and replay the groups it
            interrupted from reset, so every returned group is complete (default True).
        worker_timeout: async vectors: seconds a worker may take per reply before it counts as
            hung (``None``: wait for ever).
        max_group_retries: replays allowed per group and ``collect``; a group interrupted more
            often is dropped whole (never returned half-played). Counted in :meth:`pop_metrics`.
        max_worker_restarts: worker replacements allowed over the collector's life; one more
            failure raises :class:`~arlgym.errors.WorkerError` (something is wrong for good).
        servers: env server URLs (``arlgym serve``) to play on instead of local envs; a failed
            server's groups move to the others and are replayed (docs/serving.md).
        server_token: the servers' access token, if they have one.
    """

    def __init__(
        self,
        env_id: str,
        policy: Policy,
        *,
        group_size: int = 1,
        num_tasks: int = 1,
        sampling: SamplingParams | None = None,
        env_kwargs: dict[str, Any] | None = None,
        mode: str = "auto",
        seed: int = 0,
        num_workers: int | None = None,
        progress: bool = True,
        restart: bool = True,
        worker_timeout: float | None = 300.0,
        max_group_retries: int = 2,
        max_worker_restarts: int = 10,
        servers: list[str] | None = None,
        server_token: str | None = None,
    ) -> None:
        self.env_id = env_id
        self.policy = policy
        self.sampling = sampling or SamplingParams()
        self.progress = progress
        self.vec: GroupVecEnv = make_group_vec(
            env_id, num_tasks, group_size, seed, mode=mode, num_workers=num_workers,
            restart=restart, timeout=worker_timeout, max_restarts=max_worker_restarts,
            servers=servers, server_token=server_token, **(env_kwargs or {}),
        )
        self.max_group_retries = check_int("max_group_retries", max_group_retries, min=0)
        #: groups replayed / dropped after a worker failure, since the last ``pop_metrics``
        self.groups_retried = 0
        self.groups_dropped = 0
        self._handles = self.vec.handles()
        self._batches = 0
        #: number of ``generate`` calls and prompts sent, for tests and throughput logs
        self.generate_calls = 0
        self.prompts_sent = 0

    def close(self) -> None:
        self.vec.close()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to continue this collector's stream exactly: the vector's
        task-stream position and the number of batches played (part of every group ``uid``)."""
        return {**self.vec.state_dict(), "batches": self._batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (a checkpoint of the same configuration)."""
        self.vec.load_state_dict(state)
        self._batches = int(state["batches"])

    def pop_metrics(self) -> dict[str, float]:
        """``rollout/groups_retried`` and ``rollout/groups_dropped`` since the last call (the
        trainer logs them every step), then reset the counts."""
        out = {"rollout/groups_retried": float(self.groups_retried),
               "rollout/groups_dropped": float(self.groups_dropped)}
        self.groups_retried = self.groups_dropped = 0
        return out

    def __enter__(self) -> RolloutCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def collect(
        self,
        *,
        seed: int | None = None,
        task_ids: Sequence[str] | None = None,
        options: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
    ) -> list[Trajectory]:
        """Play one episode in every env of the vector; returns ``num_envs`` trajectories, less
        the groups dropped after repeated worker failures (see ``max_group_retries``)."""
        from tqdm.auto import tqdm

        vec = self.vec
        sampling = sampling or self.sampling
        obs, infos = vec.reset(seed=seed, task_ids=task_ids, options=options)
        batch = self._batches
        self._batches += 1
        trajs: list[Trajectory] = []
        for i, info in enumerate(infos):
            g, member = vec.group_of(i), i % vec.group_size
            uid = f"b{batch}-g{g}-{info['task_id']}"
            trajs.append(Trajectory(uid=uid, traj_id=f"{uid}-m{member}", env_id=self.env_id,
                                    task_id=info["task_id"], task_type=info["task_type"],
                                    group_index=g, member=member,
                                    policy=getattr(self.policy, "name", "")))
        active = [True] * vec.num_envs
        bar = tqdm(total=vec.num_envs, desc=f"rollout {self.env_id}", unit="ep",
                   disable=not self.progress, leave=False)
        wins = finished = 0
        turn = 0
        retries = [0] * vec.num_tasks
        dropped: set[int] = set()

        def replay(failure: WorkerRestarted) -> set[int]:
            """Restart the groups whose live episodes the failed worker held (or drop them)."""
            groups = {vec.group_of(i) for i in failure.env_indices if active[i]}
            for g in sorted(groups):
                members = list(range(g * vec.group_size, (g + 1) * vec.group_size))
                retries[g] += 1
                if retries[g] > self.max_group_retries:
                    dropped.add(g)
                    self.groups_dropped += 1
                    for i in members:
                        active[i] = False
                    continue
                self.groups_retried += 1
                group_obs, group_infos = vec.reset_envs(members)
                for i, o, inf in zip(members, group_obs, group_infos, strict=True):
                    obs[i], infos[i], active[i] = o, inf, True
                    trajs[i].steps.clear()
            return groups

        try:
            while any(active):
                live = [i for i, a in enumerate(active) if a]
                # a seeded sampler gets a different (still deterministic) seed every turn, so
                # the sampling noise of consecutive turns is not the same random stream
                turn_sampling = (sampling if sampling.seed is None
                                 else replace(sampling, seed=sampling.seed + 7919 * turn))
                turn += 1
                try:
                    completions = self.policy.generate(
                        [obs[i] for i in live], turn_sampling, envs=[self._handles[i] for i in live]
                    )
                except WorkerRestarted as failure:  # a policy asked a worker that then failed
                    replay(failure)
                    continue
                self.generate_calls += 1
                self.prompts_sent += len(live)
                actions: list[str | None] = [None] * vec.num_envs
                for i, comp in zip(live, completions, strict=True):
                    actions[i] = comp.text
                try:
                    next_obs, rewards, terminated, truncated, next_infos = vec.step(actions)
                    lost: set[int] = set()
                except WorkerRestarted as failure:  # keep the healthy envs' steps, replay the rest
                    results = failure.results or [None] * vec.num_envs
                    next_obs = [r[0] if r else None for r in results]
                    rewards = [r[1] if r else 0.0 for r in results]
                    terminated = [r[2] if r else False for r in results]
                    truncated = [r[3] if r else False for r in results]
                    next_infos = [r[4] if r else None for r in results]
                    lost = replay(failure)
                for i, comp in zip(live, completions, strict=True):
                    if vec.group_of(i) in lost:
                        continue
                    info, prev = next_infos[i], infos[i]
                    assert info is not None and prev is not None
                    trajs[i].steps.append(StepRecord(
                        uid=trajs[i].uid, traj_id=trajs[i].traj_id, step=int(prev["step"]),
                        task_id=trajs[i].task_id, task_type=trajs[i].task_type,
                        prompt=prompt_text(obs[i]), response=comp.text, anchor=prev["anchor"],
                        step_reward=float(rewards[i]), task_reward=float(info["task_reward"]),
                        format_penalty=float(info["format_penalty"]),
                        format_valid=bool(info["format_valid"]),
                        action_valid=bool(info["action_valid"]), action=info["action"],
                        executed_action=info["executed_action"],
                        terminated=bool(terminated[i]), truncated=bool(truncated[i]),
                        won=bool(info["won"]), score=float(info["score"]),
                        prompt_token_ids=comp.prompt_token_ids,
                        response_token_ids=comp.response_token_ids, logprobs=comp.logprobs,
                        finish_reason=comp.finish_reason, image=prompt_image(obs[i]),
                        image_inputs=getattr(comp, "image_inputs", None),
                    ))
                    obs[i], infos[i] = next_obs[i], info
                    if terminated[i] or truncated[i]:
                        active[i] = False
                        wins += bool(info["won"])
                        finished += 1
                        bar.update(1)
                        bar.set_postfix(success=f"{wins / finished:.2f}")
        finally:
            bar.close()
        if dropped:
            return [t for t in trajs if t.group_index not in dropped]
        return trajs


def collect(
    env_id: str,
    policy: Policy,
    *,
    num_tasks: int = 1,
    group_size: int = 1,
    seed: int = 0,
    task_ids: Sequence[str] | None = None,
    sampling: SamplingParams | None = None,
    env_kwargs: dict[str, Any] | None = None,
    mode: str = "auto",
    progress: bool = False,
) -> list[Trajectory]:
    """One-shot helper: build a collector, play ``num_tasks × group_size`` episodes, close."""
    with RolloutCollector(env_id, policy, group_size=group_size, num_tasks=num_tasks,
                          sampling=sampling, env_kwargs=env_kwargs, mode=mode, seed=seed,
                          progress=progress) as collector:
        return collector.collect(seed=seed, task_ids=task_ids)
