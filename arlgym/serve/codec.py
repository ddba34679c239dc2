"""The wire form of an arlgym step: what the server sends and what the clients rebuild.

OpenEnv's result is ``{"observation": {...}, "reward": float | None, "done": bool}``. arlgym's
observation dict carries ``prompt`` (the text the policy reads), ``image_png`` (vision envs:
the RGB frame as base64 PNG — lossless, so the client rebuilds the exact array) and
``metadata``: every ``info`` key of the env (``anchor``, ``format_valid``, ``task_reward``,
``format_penalty``, ``won``, ``score``, ``admissible_actions`` …) plus ``terminated`` and
``truncated``, which OpenEnv's single ``done`` flag merges. Info values are already JSON types
(str, int, float, bool, None, lists of str); floats survive JSON exactly (``repr`` round trip).
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

__all__ = ["encode_result", "decode_result", "encode_png", "decode_png", "jsonable"]


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
    metadata = jsonable(info)
    metadata["terminated"] = bool(terminated)
    metadata["truncated"] = bool(truncated)
    observation["metadata"] = metadata
    return {"observation": observation,
            "reward": None if reward is None else float(reward),
            "done": bool(terminated or truncated)}


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
