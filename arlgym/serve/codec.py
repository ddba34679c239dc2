"""The wire form of an arlgym step: what the server sends and what the clients rebuild.

OpenEnv's result is ``{"observation": {...}, "reward": float | None, "done": bool,
"metadata": {...}}`` (the top-level ``metadata`` is the observation's, as OpenEnv 0.10 sends it). arlgym's
observation dict carries ``prompt`` (the text the policy reads), ``image_png`` (vision envs:
the RGB frame as base64 PNG — lossless, so the client rebuilds the exact array) and
``metadata``: every ``info`` key of the env (``anchor``, ``format_valid``, ``task_reward``,
``format_penalty``, ``won``, ``score``, ``admissible_actions`` …) plus ``terminated`` and
``truncated``, which OpenEnv's single ``done`` flag merges. Info values are already JSON types
(str, int, float, bool, None, lists of str); floats survive JSON exactly (``repr`` round trip).

:func:`dumps` and :func:`loads` are the JSON of the server and its clients: orjson when it is
installed (the ``serve`` extra pulls it), the standard library's ``json`` otherwise. orjson
encodes a Sokoban step's message (~2 KB) in a few microseconds where ``json`` takes tens. A
value orjson refuses by default (a numpy scalar, a non-string key, an int beyond 64 bits) makes
:func:`dumps` fall back to :func:`jsonable` first, so both paths give the same JSON values; the
info dicts of arlgym's envs hold plain Python values, so :func:`encode_result` skips the
:func:`jsonable` copy on the orjson path.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover - the serve extra installs it
    orjson = None  # type: ignore[assignment]

__all__ = ["encode_result", "decode_result", "encode_png", "decode_png", "jsonable", "dumps",
           "loads", "JSONDecodeError", "FAST_JSON"]

#: whether :func:`dumps`/:func:`loads` use orjson
FAST_JSON = orjson is not None
#: what :func:`loads` raises on malformed JSON (orjson's subclasses ``json.JSONDecodeError``)
JSONDecodeError = json.JSONDecodeError

if orjson is not None:
    def dumps(value: Any) -> str:
        """``value`` as JSON text (numpy values and tuples as :func:`jsonable` turns them)."""
        try:
            return orjson.dumps(value).decode()
        except TypeError:  # numpy values, non-str keys (jsonable's str(key)), ints > 64 bits
            return json.dumps(jsonable(value), ensure_ascii=False)

    def loads(raw: str | bytes) -> Any:
        """The value of JSON text; raises :data:`JSONDecodeError` when it is malformed."""
        return orjson.loads(raw)
else:  # pragma: no cover - the serve extra installs orjson

    def dumps(value: Any) -> str:
        """``value`` as JSON text (numpy values and tuples as :func:`jsonable` turns them)."""
        return json.dumps(jsonable(value))

    def loads(raw: str | bytes) -> Any:
        """The value of JSON text; raises :data:`JSONDecodeError` when it is malformed."""
        return json.loads(raw)


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays and tuples turned into JSON types."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def encode_png(image: np.ndarray) -> str:
    """An ``H×W×3`` uint8 array as base64 PNG text."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_png(text: str) -> np.ndarray:
    """The array :func:`encode_png` encoded."""
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(text))) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


def encode_result(obs: Any, reward: float | None, terminated: bool, truncated: bool,
                  info: dict[str, Any]) -> dict[str, Any]:
    """One reset/step result in OpenEnv's shape (``reward`` is ``None`` at reset)."""
    observation: dict[str, Any] = {}
    if isinstance(obs, dict):  # vision envs: {"text": prompt, "image": HxWx3 uint8}
        observation["prompt"] = obs["text"]
        observation["image_png"] = encode_png(obs["image"])
    else:
        observation["prompt"] = obs
    # with orjson, dumps() converts (via jsonable) only when it meets a non-JSON value
    metadata = dict(info) if FAST_JSON else jsonable(info)
    metadata["terminated"] = bool(terminated)
    metadata["truncated"] = bool(truncated)
    observation["metadata"] = metadata
    # OpenEnv's reference server repeats the metadata at the top level (StepResult.metadata)
    return {"observation": observation,
            "reward": None if reward is None else float(reward),
            "done": bool(terminated or truncated), "metadata": metadata}


def decode_result(data: dict[str, Any]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """``(obs, reward, terminated, truncated, info)`` from :func:`encode_result`'s dict; the obs
    is the prompt string, or ``{"text", "image"}`` for vision envs, as the env returns it."""
    observation = data["observation"]
    info = dict(observation["metadata"])
    terminated = bool(info.pop("terminated"))
    truncated = bool(info.pop("truncated"))
    obs: Any = observation["prompt"]
    if "image_png" in observation:
        obs = {"text": obs, "image": decode_png(observation["image_png"])}
    reward = data.get("reward")
    return obs, 0.0 if reward is None else float(reward), terminated, truncated, info
