"""arlgym-sft on a vision env: PNGs beside the JSONL, resumable collection, clear errors."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from arlgym.errors import ConfigError
from arlgym.sft.collect import CollectConfig, collect_sft, dataset_stats


def _digest(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix in (".jsonl", ".png")}


@pytest.fixture(scope="module")
def vision_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("vision_data")
    collect_sft(CollectConfig(env_id="arl/SokobanVision-v0", episodes=3), out, progress=False)
    return out


def test_collect_writes_one_png_per_sample_with_multimodal_messages(vision_data):
    import gymnasium as gym

    rows = [json.loads(line) for line in (vision_data / "samples.jsonl").read_text().splitlines()]
    assert rows and len(list((vision_data / "images").glob("*.png"))) == len(rows)
    first = rows[0]
    user, assistant = first["messages"]
    assert [p["type"] for p in user["content"]] == ["text", "image", "text"]
    assert isinstance(assistant["content"], str) and "<action>" in assistant["content"]
    env = gym.make("arl/SokobanVision-v0")
    obs, _ = env.reset(seed=0)  # episode 0 = group 0, seed 0 + 0
    png = np.asarray(Image.open(vision_data / first["images"][0]).convert("RGB"))
    assert np.array_equal(png, obs["image"])
    assert "".join(p.get("text", "") for p in user["content"]) + "" == obs["text"].replace("<image>", "")
    assert dataset_stats(vision_data)["images"] == len(rows)


def test_rerun_is_a_no_op_and_a_lost_tail_is_redone_identically(vision_data, tmp_path):
    import shutil

    before = _digest(vision_data)
    collect_sft(CollectConfig(env_id="arl/SokobanVision-v0", episodes=3), vision_data, progress=False)
    assert _digest(vision_data) == before
    copy = tmp_path / "copy"
    shutil.copytree(vision_data, copy)
    lines = (copy / "episodes.jsonl").read_text().splitlines(keepends=True)
    (copy / "episodes.jsonl").write_text("".join(lines[:-1]))  # killed before the last log line
    collect_sft(CollectConfig(env_id="arl/SokobanVision-v0", episodes=3), copy, progress=False)
    assert _digest(copy) == before


def test_train_errors_name_the_fix(vision_data, tmp_path):
    from arlgym.sft.train import SFTRunConfig, train_sft

    with pytest.raises(ConfigError, match="prefix"):
        train_sft(SFTRunConfig(data=(str(vision_data),), model="tiny-vl", engine="prefix",
                               output_dir=str(tmp_path / "a"), max_steps=1))
    with pytest.raises(ConfigError, match="not a vision-language model"):
        train_sft(SFTRunConfig(data=(str(vision_data),), model="tiny",
                               output_dir=str(tmp_path / "b"), max_steps=1))
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(vision_data, broken)
    next((broken / "images").glob("*.png")).unlink()
    with pytest.raises(ConfigError, match="missing"):
        train_sft(SFTRunConfig(data=(str(broken),), model="tiny-vl",
                               output_dir=str(tmp_path / "c"), max_steps=1))
