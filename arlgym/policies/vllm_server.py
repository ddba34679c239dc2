"""A policy that samples from a vLLM server through TRL's client (``trl.generation.vllm_client``).

The rollout engine for set-ups where generation runs on GPUs of its own: a server started with
``trl vllm-serve`` or ``vllm serve`` (TRL 1.16 speaks to vLLM's own OpenAI-compatible routes
plus its weight-transfer routes), and this policy in the rollout worker. Same contract as
:class:`~arlgym.policies.vllm.VLLMPolicy`: prompts are wrapped in the chat template and
tokenised by *our* code (:func:`arlgym.policies.hf.chat_prompt_ids`), sent as token ids
(``/v1/completions``), and each :class:`Completion` carries the prompt ids, the sampled ids and
each sampled token's log-prob (``logprobs=0``: the sampled token only). Start the server with
``--logprobs-mode processed_logprobs`` so those equal the HF policy's ``log_softmax(z / T)``.

Seeds: with ``sampling.seed``, the prompts are grouped by identical token ids and each group
is one request with ``n`` = its size and ``seed`` = ``sampling.seed`` + the index of its first
prompt — the members of a task group (one prompt, several rollouts) draw different samples,
and the result does not depend on the order in which the server answers. The requests of one
call run concurrently (the client's connection pool is sized for it).

Weight sync (:meth:`VLLMServerPolicy.sync_weights`) streams the tensors over the client's NCCL
weight-transfer group (``init_communicator`` once, then ``update_named_params`` inside one
``weight_update``) and resets the server's prefix cache. NCCL needs a CUDA device on this side,
so on a CPU machine the sync is refused with a message; generation works from any machine that
reaches the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from arlgym.errors import ConfigError, MissingDependency
from arlgym.policies.base import Completion, SamplingParams, prompt_image, prompt_text
from arlgym.policies.hf import chat_prompt_ids

__all__ = ["VLLMServerPolicy", "make_client"]


#: TRL's default port of the NCCL weight group; worker ``i`` uses ``GROUP_PORT + i`` so that
#: several workers on one node do not collide
GROUP_PORT = 51216


def make_client(base_url: str, connection_timeout: float = 0.0,
                group_port: int = GROUP_PORT) -> Any:
    """TRL's ``VLLMClient`` for ``base_url`` (it checks ``/health`` and reads the served model
    from ``/v1/models``); ``group_port`` is the port its NCCL weight group listens on."""
    try:
        from trl.generation.vllm_client import VLLMClient
    except ImportError as e:  # pragma: no cover - trl is a train dependency
        raise MissingDependency("the vLLM server policy needs TRL's client: "
                                "pip install 'arlgym[train]'") from e
    try:
        return VLLMClient(base_url=base_url, connection_timeout=connection_timeout,
                          group_port=group_port)
    except ImportError as e:
        raise MissingDependency(
            f"TRL's vLLM client refuses to start without vllm installed on this machine "
            f"({e}). Fix: pip install 'arlgym[vllm]' on the rollout worker's machine") from e
    except OSError as e:  # requests' ConnectionError after the client's retries
        raise ConfigError(f"vllm_server_url {base_url}: no vLLM server answers there ({e}). Fix: "
                          f"start one (trl vllm-serve --model <model>) or correct the URL") from e


class VLLMServerPolicy:
    """Sampling from a running vLLM server.

    Args:
        base_url: the server, e.g. ``http://gpu-node-3:8000``.
        tokenizer: the tokenizer of the served model (our chat template and ids go out, so it
            must be the model's own); ``arlgym.models.load_tokenizer(name)`` gives it.
        client: an already built ``VLLMClient`` (default: :func:`make_client`).
        eos_token_ids: ids that end a response (default: the tokenizer's EOS), to tell a
            ``stop`` from a ``length`` finish (the client does not pass vLLM's reason on).
        device: the CUDA device the weights are sent from (the NCCL group's rank 0).
        max_concurrency: requests in flight at once for one :meth:`generate` call.
        group_port: the port of the NCCL weight group (one per policy on a node).
    """

    def __init__(self, base_url: str, tokenizer: Any, *, client: Any = None,
                 eos_token_ids: Iterable[int] | None = None, device: Any = "cuda",
                 max_concurrency: int = 64, group_port: int = GROUP_PORT) -> None:
        self.client = client if client is not None else make_client(base_url,
                                                                   group_port=group_port)
        self.tokenizer = tokenizer
        self.name = f"vllm-server:{base_url}"
        eos = tokenizer.eos_token_id if eos_token_ids is None else None
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None
                                       else ([eos] if isinstance(eos, int) else eos or []))
        self.device = device
        self.max_concurrency = max_concurrency
        self._communicator_ready = False
        self.processor = None  # text models only: vision prompts are refused

    # ---------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        """One response per prompt, in order (``envs`` is ignored)."""
        sampling = sampling or SamplingParams()
        ids: list[list[int]] = []
        for p in prompts:
            if prompt_image(p) is not None:
                raise ConfigError("the vLLM server policy takes text prompts only; a vision "
                                  "env needs rollout_engine hf or vllm")
            ids.append(chat_prompt_ids(self.tokenizer, prompt_text(p)))
        groups: dict[tuple[int, ...], list[int]] = {}
        if sampling.seed is None:  # no seed to tell requests apart: one request for all
            requests = [(list(range(len(ids))), None)]
        else:
            for i, row in enumerate(ids):
                groups.setdefault(tuple(row), []).append(i)
            requests = [(rows, sampling.seed + rows[0]) for rows in groups.values()]

        def send(request: tuple[list[int], int | None]) -> tuple[list[int], dict[str, Any]]:
            rows, seed = request
            n = len(rows) if seed is not None else 1
            prompts_out = [ids[rows[0]]] if seed is not None else [ids[i] for i in rows]
            return rows, self.client.generate(prompts_out, n=n, **self._params(sampling, seed))

        out: list[Completion | None] = [None] * len(ids)
        workers = max(1, min(self.max_concurrency, len(requests)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for rows, result in pool.map(send, requests):
                for row, tokens, lps, lp_ids in zip(rows, result["completion_ids"],
                                                    result["logprobs"] or [None] * len(rows),
                                                    result["logprob_token_ids"] or [None] * len(rows),
                                                    strict=True):
                    out[row] = self._completion(ids[row], list(tokens), lps, lp_ids, sampling)
        return [c for c in out if c is not None]

    @staticmethod
    def _params(sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
        greedy = sampling.greedy
        extra = {"seed": seed} if seed is not None else {}
        return {"temperature": 0.0 if greedy else sampling.temperature,
                "top_p": 1.0 if greedy else sampling.top_p,
                "top_k": 0 if greedy or sampling.top_k <= 0 else sampling.top_k,
                "max_tokens": sampling.max_new_tokens, "logprobs": 0,
                "generation_kwargs": extra}

    def _completion(self, prompt_ids: list[int], tokens: list[int], lps: Any, lp_ids: Any,
                    sampling: SamplingParams) -> Completion:
        logprobs = None
        if lps is not None:
            # each position lists the sampled token among its top entries; take that one
            logprobs = [float(step[ids_.index(tok)]) for tok, step, ids_ in
                        zip(tokens, lps, lp_ids, strict=True)]
        ended = bool(tokens) and tokens[-1] in self.eos_token_ids
        finish = "stop" if ended or len(tokens) < sampling.max_new_tokens else "length"
        return Completion(text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                          prompt_token_ids=list(prompt_ids), response_token_ids=tokens,
                          logprobs=logprobs, finish_reason=finish, meta={"policy": self.name})

    # ---------------------------------------------------------------------------------------
    def sync_weights(self, state_dict_iter: Iterable[tuple[str, Any]]) -> None:
        """Stream ``(name, tensor)`` pairs (HF names) into the server's model, then reset its
        prefix cache so no KV entry of the old weights survives.

        Raises:
            ConfigError: no CUDA device here (the transfer is NCCL), or the server was
                started without a weight-transfer engine.
        """
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("weight sync to a vLLM server runs over NCCL and needs a CUDA "
                              "device on the sending side; this machine has none. Fix: run the "
                              "learner on a GPU, or use rollout_engine hf on CPU")
        if not self._communicator_ready:
            try:
                self.client.init_communicator(device=self.device)
            except RuntimeError as e:
                raise ConfigError(f"{self.name}: {e}") from e
            self._communicator_ready = True
        pairs = [(name, t.detach().to(self.device)) for name, t in state_dict_iter]
        metadata = [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in pairs]
        with self.client.weight_update():
            self.client.update_named_params(metadata, iter(pairs))
        self.client.reset_prefix_cache()

    def close(self) -> None:
        """Leave the weight-transfer group (the server would otherwise wait on it)."""
        if self._communicator_ready:
            self.client.close_communicator()
            self._communicator_ready = False
