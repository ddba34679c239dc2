"""A loopback HTTP server that answers the routes TRL 1.16's ``VLLMClient`` calls, backed by a
real tiny transformers model — so the client, its retries and its response parsing run for
real on CPU, and only the engine behind the routes is ours.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (token-id prompts, ``n``,
``temperature``/``top_p``/``top_k``/``max_tokens``/``seed``, ``logprobs=0``,
``return_token_ids``, ``return_tokens_as_token_ids``: vLLM's response fields ``prompt_token_ids``,
``token_ids``, ``logprobs.tokens`` as ``"token_id:<id>"``, ``token_logprobs``, ``top_logprobs``,
``finish_reason``), ``GET /server_info`` (``weight_transfer_config: null``: a server started
without the NCCL weight-transfer engine), ``GET /get_world_size`` and ``POST
/reset_prefix_cache``. Sampling is the HF policy's (ancestral, processed log-probs after
temperature) with the request's seed; every request is recorded for the tests.

What it cannot tell: the real vLLM server's numerics, and the NCCL weight transfer (it needs
CUDA on both sides; bench/gpu_check.py is where that runs when a GPU is lent).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from arlgym.policies import SamplingParams
from arlgym.policies.hf import HFPolicy


class LoopbackVLLM:
    """``with LoopbackVLLM(model, tokenizer) as server: server.url ...``"""

    def __init__(self, model: Any, tokenizer: Any, name: str = "tiny") -> None:
        self.policy = HFPolicy(model, tokenizer=tokenizer, batch_size=64)
        self.name = name
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()  # one generate at a time: the model is not thread-safe
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackVLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        n = int(body.get("n", 1))
        temperature = float(body.get("temperature", 1.0))
        sampling = SamplingParams(temperature=temperature, top_p=float(body.get("top_p", 1.0)),
                                  top_k=max(0, int(body.get("top_k", 0))),
                                  max_new_tokens=int(body.get("max_tokens", 16)))
        prompts = [list(p) for p in body["prompt"] for _ in range(n)]  # prompt-major
        with self.lock, torch.random.fork_rng(), torch.inference_mode():
            if body.get("seed") is not None:
                torch.manual_seed(int(body["seed"]))
            done = self.policy._generate_batch(prompts, sampling)
        choices = []
        for i, (ids, c) in enumerate(zip(prompts, done, strict=True)):
            choices.append({
                "index": i, "text": c.text, "prompt_token_ids": ids,
                "token_ids": c.response_token_ids, "finish_reason": c.finish_reason,
                "logprobs": None if body.get("logprobs") is None else {
                    "tokens": [f"token_id:{t}" for t in c.response_token_ids],
                    "token_logprobs": list(c.logprobs),
                    "top_logprobs": [None] * len(c.response_token_ids)},
            })
        return {"id": "cmpl-loopback", "object": "text_completion", "model": self.name,
                "choices": choices}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, payload: Any, status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                with server.lock:
                    server.requests.append((path, {}))
                if path == "/health":
                    self._reply({})
                elif path == "/v1/models":
                    self._reply({"object": "list", "data": [{"id": server.name, "object": "model"}]})
                elif path == "/server_info":
                    self._reply({"weight_transfer_config": None})
                elif path == "/get_world_size":
                    self._reply({"world_size": 1})
                else:
                    self._reply({"detail": "Not Found"}, 404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                with server.lock:
                    server.requests.append((path, body))
                if path == "/v1/completions":
                    self._reply(server.complete(body))
                elif path == "/reset_prefix_cache":
                    self._reply({"success": True})
                else:
                    self._reply({"detail": "Not Found"}, 404)

        return Handler
