"""bench/gpu_check.py must not rot between the sessions that get a GPU: its --smoke mode runs
every section on CPU at toy sizes, the vLLM sections against the CPU stand-in of vLLM."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_smoke_runs_every_section(tmp_path):
    shim = tmp_path / "shim" / "vllm"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text((ROOT / "tests/fakes/fake_vllm.py").read_text())
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shim"), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert proc.returncode == 0, json.dumps(result, indent=1)[-3000:] + proc.stderr[-2000:]
    step = result["bf16_step"]
    assert step["steps"] == 1 and step["loss_finite"] and step["engine"] == "hf"
    assert step["logprob_gap_max"] < 0.1  # bf16 autocast in training vs fp32 sampling
    parity = result["vllm_parity"]
    assert parity["unchanged_sync_identical"] is True
    assert parity["vllm_vs_hf_logprob_gap_max"] < 1e-4 and parity["after_perturbed_sync_gap_max"] < 1e-4
    gaps = result["vllm_trainer"]["logprob_gap_max_per_step"]
    assert len(gaps) == 3 and max(gaps) < 1e-3
