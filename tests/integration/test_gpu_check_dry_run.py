"""`python bench/gpu_check.py` on a machine without a GPU: a dry run that lists every GPU path
the docs promise with its H100 time estimate, runs nothing, and writes the plan as the report
(JSON + Markdown); `--device cpu` runs the checks that need no GPU and reports the rest
skipped, each with its reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMED = ("bf16_step", "vllm_parity", "vllm_trainer", "vllm_server_pushes", "async_vllm_workers",
         "lora_pushes", "fused_logprobs_v151936", "sampo_alfworld_smollm2",
         "sampo_webshop_smollm2", "sampo_qwen2.5_1.5b_shapes", "sampo_qwen3_4b_shapes",
         "nccl_fsdp2_zero")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}


def test_dry_run_lists_every_check_with_its_estimate_and_writes_both_reports(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dry run on cpu: nothing was run" in proc.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] is True and report["device"] == "cpu"
    names = [c["name"] for c in report["checks"]]
    assert names == list(NAMED)
    assert all(c["runs_today"] for c in report["checks"])  # every check is written
    one_gpu = sum(c["estimate_s"] for c in report["checks"] if "2gpu" not in c["needs"])
    assert report["estimate_s"] == one_gpu <= report["budget_s"] <= 15 * 60
    for c in report["checks"]:
        assert f"{c['name']:28s} ~{c['estimate_s']:4d} s on one H100" in proc.stdout
    assert f"12 checks, ~{one_gpu} s on one H100" in proc.stdout
    table = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {n} |" in table for n in NAMED) and "V = 151,936" in table
    assert "planned" not in table


@pytest.mark.slow
def test_device_cpu_runs_the_checks_that_need_no_gpu_and_skips_the_rest_with_reasons(tmp_path):
    from arlgym.envs.requirements import missing

    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--device", "cpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=1200,
                          env=ENV, cwd=ROOT)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert proc.returncode == 0, json.dumps(report, indent=1)[-3000:] + proc.stderr[-2000:]
    assert report["env"]["run_device"] == "cpu" and report["env"]["size"] == "cpu"
    fused = report["fused_logprobs_v151936"]
    assert fused["vocab"] == 151_936 and fused["dtype"] == "float32" and fused["passed"] is True
    assert fused["logprob_gap_max"] < 1e-4 and fused["head_grad_rel_gap"] < 1e-4
    envs_usable = not missing("arl/ALFWorld-v0") and not missing("arl/WebShop-v0")
    for name, family in (("sampo_qwen2.5_1.5b_shapes", "qwen2"), ("sampo_qwen3_4b_shapes", "qwen3")):
        run = report[name]
        if not envs_usable:
            assert "is not usable here" in run["skipped"]
            continue
        assert run["vocab"] == 151_936 and run["family"] == family and run["passed"] is True, run
        for env_id in ("arl/ALFWorld-v0", "arl/WebShop-v0"):
            assert run[env_id]["steps"] == 2 and run[env_id]["loss_finite"], run
    for name in NAMED:  # every other check says why it did not run here
        if name not in ("fused_logprobs_v151936", "sampo_qwen2.5_1.5b_shapes", "sampo_qwen3_4b_shapes"):
            why = report[name]["skipped"]
            assert why in ("no CUDA device", "needs 2+ GPUs, this machine has 0"), (name, why)
    table = (tmp_path / "gpu_check.md").read_text()
    assert "| fused_logprobs_v151936 | passed |" in table and "| vllm_parity | skipped |" in table
