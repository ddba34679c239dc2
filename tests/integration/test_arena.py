"""`arlgym arena run` killed mid-grid and rerun equals an uninterrupted grid; `arlgym arena
report` writes every artefact and its index.html renders in a real headless Chromium."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ALGOS = "grpo,cispo,sampo"
# the tiny CPU config, cut to the bone: 2 steps of 2 tasks x 2 rollouts, 3-move rooms
GRID = ["--algos", ALGOS, "--seeds", "0,1", "--steps", "2", "--jobs", "2",
        "--set", 'env_kwargs={"max_steps": 3}', "--set", "num_tasks=2", "--set", "group_size=2",
        "--set", "max_new_tokens=8", "--set", "eval_steps=1", "--set", "eval_episodes=2",
        "--set", "eval_split=val", "--set", "save_best=true", "--set", "test_episodes=3",
        "--set", "mini_batch_size=2", "--set", "cold_start_steps=0", "--set", "lr=1e-3"]
VOLATILE = ("time/", "tokens_per_s")


def _arena(*args: str) -> list[str]:
    return [sys.executable, "-m", "arlgym.cli", "arena", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def _metrics(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    root = tmp_path_factory.mktemp("arena")
    plain, killed = root / "plain", root / "killed"
    subprocess.run(_arena("run", "--out", str(plain), *GRID), check=True, env=_env(),
                   capture_output=True, text=True, timeout=1200)
    # the same grid, SIGKILLed as soon as one run has a complete checkpoint, then rerun
    proc = subprocess.Popen(_arena("run", "--out", str(killed), *GRID), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline:
        if list(killed.glob("*/seed-*/checkpoints/step-000001/trainer_state.json")):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no checkpoint appeared within 10 minutes")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)
    interrupted = {p.parent.parent.parent.name + "/" + p.parent.parent.name
                   for p in killed.glob("*/seed-*/checkpoints/step-*")}
    unfinished = [p for p in killed.glob("*/seed-*") if not (p / "eval" / "test-last.summary.json").exists()]
    rerun = subprocess.run(_arena("run", "--out", str(killed), *GRID), env=_env(),
                           capture_output=True, text=True, timeout=1200)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    report = subprocess.run(_arena("report", str(killed)), env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    subprocess.run(_arena("report", str(plain)), env=_env(), check=True, capture_output=True,
                   timeout=600)
    return {"plain": plain, "killed": killed, "interrupted": interrupted, "unfinished": unfinished,
            "report_stdout": report.stdout}


def test_kill_then_rerun_equals_an_uninterrupted_grid(grids):
    plain, killed = grids["plain"], grids["killed"]
    assert grids["interrupted"] and grids["unfinished"], "the kill must land mid-grid"
    runs = sorted(p.relative_to(plain) for p in plain.glob("*/seed-*"))
    assert len(runs) == 6
    assert runs == sorted(p.relative_to(killed) for p in killed.glob("*/seed-*"))
    for run in runs:
        a, b = _metrics(plain / run), _metrics(killed / run)
        assert [r["step"] for r in b] == [1, 2], run  # no step lost, none logged twice
        for ra, rb in zip(a, b, strict=True):
            assert ra.keys() == rb.keys()
            for k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=1e-4, abs=1e-6), (run, k)
    with (plain / "report" / "table.csv").open() as fa, (killed / "report" / "table.csv").open() as fb:
        assert list(csv.reader(fa)) == list(csv.reader(fb))


def test_report_artefacts(grids):
    rep = grids["killed"] / "report"
    for name in ("table.md", "table.csv", "report.json", "index.html"):
        assert (rep / name).stat().st_size > 0, name
    table = (rep / "table.md").read_text()
    for label in ("grpo", "cispo", "sampo", "Baseline", "IS clipping", "Ours"):
        assert label in table
    for curve in ("success", "format_valid", "kl_ref", "kl_old_new", "entropy", "grad_norm",
                  "clip_low", "clip_high", "is_low_neg", "is_high_pos", "response_length"):
        assert (rep / "curves" / f"{curve}.png").stat().st_size > 1000, curve
    assert len(list((rep / "is_analysis").glob("*.png"))) == 6
    for algo in ALGOS.split(","):
        assert (rep / "sankey" / f"{algo}.html").stat().st_size > 1000
        assert (rep / "sankey" / f"{algo}.png").stat().st_size > 1000
        assert (rep / "patterns" / f"{algo}.png").exists()
    report = json.loads((rep / "report.json").read_text())
    assert len(report["runs"]) == 6
    hashes = {r["panel_hash"] for r in report["runs"]}
    assert len(hashes) == 1 and None not in hashes
    for r in report["runs"]:
        assert r["verdict"] in ("healthy", "collapsed") and len(r["config_hash"]) == 16
        assert set(r["test"]) == {"last", "best"}
    cells = [row["envs"]["arl/Sokoban-v0"] for row in report["table"]["rows"]]
    assert all(c["n_eval"] == 2 and c["checkpoint"] == ["best"] for c in cells)


def test_print_commands_lists_only_unfinished_runs(grids, tmp_path):
    out = subprocess.run(_arena("run", "--out", str(grids["killed"]), *GRID, "--print-commands"),
                         env=_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""  # everything finished
    fresh = subprocess.run(_arena("run", "--out", str(tmp_path / "g"), *GRID, "--print-commands"),
                           env=_env(), capture_output=True, text=True, check=True)
    lines = fresh.stdout.strip().splitlines()
    assert len(lines) == 6
    assert all(line.startswith("accelerate launch -m arlgym.rl --config ") for line in lines)
    assert (tmp_path / "g" / "sampo" / "seed-1" / "train.yaml").exists()


def test_report_refuses_different_panels(grids, tmp_path):
    import shutil

    from arlgym.arena.report import write_report
    from arlgym.errors import ConfigError

    mixed = tmp_path / "mixed"
    shutil.copytree(grids["plain"], mixed, ignore=shutil.ignore_patterns("checkpoints", "report"))
    summary = mixed / "cispo" / "seed-1" / "eval" / "test-last.summary.json"
    data = json.loads(summary.read_text())
    data["panel_hash"] = "0" * 16
    summary.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="different panels"):
        write_report([mixed])


def test_index_html_renders_in_chromium(grids, chromium):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from arlgym.envs.webshop.browser import find_chrome

    browser, driver_path = find_chrome()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--allow-file-access-from-files"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get((grids["killed"] / "report" / "index.html").resolve().as_uri())
        images = driver.find_elements("tag name", "img")
        assert len(images) >= 11 + 6 + 6
        broken = [img.get_attribute("src") for img in images
                  if not driver.execute_script(
                      "return arguments[0].complete && arguments[0].naturalWidth > 0", img)]
        assert broken == []
        assert "arlgym arena report" in driver.title
        assert driver.find_elements("tag name", "table")
    finally:
        driver.quit()


def test_arena_runs_on_a_vision_env(tmp_path):
    """A vision env through the same grid, trainer and report (tiny-vl on SokobanVision)."""
    out = tmp_path / "vis"
    grid = ["--algos", "grpo", "--seeds", "0", "--steps", "1", "--out", str(out),
            "--set", "env_id=arl/SokobanVision-v0", "--set", "model=tiny-vl",
            "--set", "num_tasks=2", "--set", "group_size=2", "--set", "max_new_tokens=8",
            "--set", 'env_kwargs={"max_steps": 2}', "--set", "test_episodes=2",
            "--set", "eval_steps=1", "--set", "eval_split=val", "--set", "eval_episodes=2",
            "--set", "save_best=true"]
    subprocess.run(_arena("run", *grid), check=True, env=_env(), capture_output=True, timeout=900)
    rep = subprocess.run(_arena("report", str(out)), env=_env(), capture_output=True, text=True,
                         timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    report = json.loads((out / "report" / "report.json").read_text())
    (run,) = report["runs"]
    assert run["env_id"] == "arl/SokobanVision-v0" and set(run["test"]) == {"last", "best"}
    assert (out / "report" / "sankey" / "grpo.png").exists()
