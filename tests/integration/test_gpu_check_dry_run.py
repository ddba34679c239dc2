"""`python bench/gpu_check.py` on a machine without a GPU: a dry run that lists every GPU path
issue 48 names, runs nothing, and writes the plan as the report (JSON + Markdown)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMED = ("bf16_step", "vllm_parity", "vllm_trainer", "vllm_server_pushes", "async_vllm_workers",
         "lora_pushes", "fused_logprobs_v151936", "sampo_alfworld_smollm2",
         "sampo_webshop_smollm2", "sampo_qwen2.5_1.5b_shapes", "sampo_qwen3_4b_shapes")


def test_dry_run_lists_every_check_and_writes_both_reports(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dry run on cpu: nothing was run" in proc.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] is True and report["device"] == "cpu"
    names = [c["name"] for c in report["checks"]]
    assert all(n in names for n in NAMED), names
    runs = {c["name"] for c in report["checks"] if c["runs_today"]}
    assert runs == {"bf16_step", "vllm_parity", "vllm_trainer"}  # the rest is said to be planned
    table = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {n} |" in table for n in NAMED) and "V = 151,936" in table
    assert table.count("planned, not written yet") == len(names) - len(runs)
