"""``OpenAIPolicy``: any OpenAI-compatible ``/v1/chat/completions`` endpoint.

This is how API models (the paper's GPT-4o / GPT-5.2 baselines) are evaluated and how teacher
models (e.g. a ``vllm serve`` of a large model) produce SFT data. It uses only the standard
library (``urllib``), sends one request per prompt with bounded concurrency, and retries
timeouts, connection errors, 429 and 5xx answers with exponential back-off; 4xx answers other
than 429 are the caller's mistake and fail at once with the server's message.

Tool calls (``tool_calls=True``, the spec ``openai-tools:<base_url>#<model>``): the model plays
by calling the env's ``act`` tool — the same tool, schema and semantics as the env server's MCP
``act`` (:mod:`arlgym.serve.mcp`) — instead of writing ``<think>/<action>`` text, as a
tool-calling agent does. What the env receives, and so the format penalty:

* ``act`` with ``action``: the move, stepped as ``<think></think><action>{action}</action>``,
  always well-formed — no format penalty, whatever the model wrote beside the call;
* ``act`` with ``response``: that text, parsed as any reply (the format and its penalty apply);
* a reply without an ``act`` call, or whose first ``act`` call has unreadable arguments
  (not JSON, neither or both of the two keys, not a string): an empty response, which the env
  counts as a format error (``format_valid`` false, the penalty applies, no move is made).

Only the first ``act`` call of a reply is played (one turn, one move). ``Completion.meta`` keeps
what the model sent: ``tool_call`` (name and arguments, or ``None``), ``content`` (its text)
and ``tool_format`` (``"action"``, ``"response"``, ``"no_tool_call"`` or ``"bad_arguments"``).
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from arlgym.errors import ConfigError, PolicyRequestError
from arlgym.policies.base import Completion, SamplingParams
from arlgym.policies.hf import vision_messages
from arlgym.serve.mcp import TOOLS

__all__ = ["OpenAIPolicy", "png_base64", "TOOL_SYSTEM_PROMPT", "tool_call_text"]

_RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}

#: the system message of the tool-call mode (unless ``system_prompt`` is given): the env's
#: prompt asks for ``<think>/<action>`` text, which the tool call replaces
TOOL_SYSTEM_PROMPT = ("You play an environment through the `act` tool. Each turn, read the "
                      "observation and call `act` exactly once with the move alone as "
                      "`action` (one of the admissible actions when the observation lists "
                      "them). The tool call is your answer: do not write <think>/<action> "
                      "tags.")


def _act_tool() -> dict[str, Any]:
    """The env server's MCP ``act`` tool as an OpenAI ``tools`` entry (one definition)."""
    act = next(t for t in TOOLS if t["name"] == "act")
    return {"type": "function", "function": {"name": "act", "description": act["description"],
                                             "parameters": act["inputSchema"]}}


def tool_call_text(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What the env receives for a chat ``message`` of the tool-call mode, and what the model
    sent (``Completion.meta``); the rules are in the module's docstring."""
    calls = [c for c in message.get("tool_calls") or []
             if isinstance(c, dict) and (c.get("function") or {}).get("name") == "act"]
    meta: dict[str, Any] = {"content": message.get("content") or "", "tool_call": None,
                            "tool_format": "no_tool_call"}
    if not calls:
        return "", meta
    function = calls[0]["function"]
    raw = function.get("arguments")
    meta["tool_call"] = {"name": "act", "arguments": raw}
    meta["tool_format"] = "bad_arguments"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return "", meta
    if not isinstance(arguments, dict):
        return "", meta
    given = [k for k in ("response", "action") if k in arguments]
    if len(given) != 1 or len(arguments) != 1 or not isinstance(arguments[given[0]], str):
        return "", meta
    meta["tool_format"] = given[0]
    value = arguments[given[0]]
    return (value if given[0] == "response" else f"<think></think><action>{value}</action>"), meta


def png_base64(image: Any) -> str:
    """A uint8 H×W×3 array (or PIL image) as base64 PNG bytes."""
    import numpy as np
    from PIL import Image

    if not isinstance(image, Image.Image):
        image = Image.fromarray(np.asarray(image, dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class OpenAIPolicy:
    """Chat-completions client.

    Args:
        base_url: e.g. ``http://localhost:8000/v1`` (``/chat/completions`` is appended).
        model: model name sent in the request.
        api_key: bearer token; default ``$OPENAI_API_KEY`` (none sent when unset).
        timeout: seconds per request attempt.
        max_retries: extra attempts after the first for retryable failures.
        backoff: first back-off in seconds; doubles each retry, with jitter.
        max_concurrency: requests in flight at once.
        system_prompt: optional system message before the env's prompt.
        extra_body: extra JSON fields (e.g. ``{"chat_template_kwargs": {...}}`` for vLLM;
            ``{"tool_choice": "required"}`` where the server supports it).
        tool_calls: play through the ``act`` tool instead of ``<think>/<action>`` text (the
            module's docstring gives what the env receives); the system message defaults to
            :data:`TOOL_SYSTEM_PROMPT`.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 4, backoff: float = 0.5,
                 max_concurrency: int = 8, system_prompt: str | None = None,
                 extra_body: dict[str, Any] | None = None, tool_calls: bool = False) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ConfigError("need max_concurrency >= 1, max_retries >= 0 and timeout > 0")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.tool_calls = bool(tool_calls)
        self.name = f"openai-tools:{model}" if self.tool_calls else f"openai:{model}"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_concurrency = max_concurrency
        self.system_prompt = system_prompt if system_prompt is not None or not tool_calls \
            else TOOL_SYSTEM_PROMPT
        self.extra_body = dict(extra_body or {})
        #: attempts made in total (tests and logs read it)
        self.attempts = 0

    def _messages(self, prompt: Any) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        if isinstance(prompt, dict) and prompt.get("image") is not None:
            # the image goes where the text says <image> (first when it does not), as a PNG
            # data URL (the OpenAI / vLLM-serve multimodal chat format)
            url = f"data:image/png;base64,{png_base64(prompt['image'])}"
            content = [{"type": "image_url", "image_url": {"url": url}} if part["type"] == "image"
                       else part for part in vision_messages(prompt)[0]["content"]]
            messages.append({"role": "user", "content": content})
        else:
            text = prompt.get("text", "") if isinstance(prompt, dict) else str(prompt)
            messages.append({"role": "user", "content": text})
        return messages

    def _body(self, prompt: Any, sampling: SamplingParams, index: int) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self._messages(prompt),
            "temperature": max(0.0, sampling.temperature),
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed + index
        if self.tool_calls:
            body["tools"] = [_act_tool()]
            body["tool_choice"] = "auto"
        body.update(self.extra_body)
        return json.dumps(body).encode()

    def _request(self, payload: bytes) -> Completion:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last_error = ""
        for attempt in range(self.max_retries + 1):
            self.attempts += 1
            started = time.perf_counter()
            try:
                req = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    data = json.loads(resp.read().decode())
                choice = data["choices"][0]
                message = choice.get("message") or {}
                extra: dict[str, Any] = {}
                if self.tool_calls:
                    text, extra = tool_call_text(message)
                else:
                    text = message.get("content") or ""
                return Completion(text=text, finish_reason=choice.get("finish_reason"),
                                  meta={"latency_s": time.perf_counter() - started,
                                        "attempts": attempt + 1, "usage": data.get("usage"),
                                        **extra})
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:500]
                if e.code not in _RETRYABLE_STATUS:
                    raise PolicyRequestError(
                        f"{self.url} answered HTTP {e.code}: {detail or e.reason}; check the "
                        f"model name {self.model!r}, the API key and the request"
                    ) from e
                last_error = f"HTTP {e.code}: {detail or e.reason}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last_error = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except (KeyError, IndexError, ValueError) as e:
                last_error = f"malformed response: {e}"
            if attempt < self.max_retries:
                time.sleep(self.backoff * (2**attempt) * (0.5 + random.random() / 2))
        raise PolicyRequestError(
            f"{self.url} failed {self.max_retries + 1} times; last error: {last_error}"
        )

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None, *,
                 envs: Sequence[Any] | None = None) -> list[Completion]:
        sampling = sampling or SamplingParams()
        payloads = [self._body(p, sampling, i) for i, p in enumerate(prompts)]
        if len(payloads) == 1:
            return [self._request(payloads[0])]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(payloads))) as pool:
            return list(pool.map(self._request, payloads))
