"""The held-out count: by content, on the real envs; an id that holds a panel task's content
under another name is counted, and a run's training draws count 0."""

import gymnasium as gym

import arlgym  # noqa: F401
from arlgym.envs.content import TaskContent
from arlgym.evaluation.held_out import (
    default_panels,
    format_held_out,
    held_out_overlap,
    held_out_report,
)

PANEL = 50


def _train_draws(content: TaskContent, n: int) -> list[str]:
    """Task ids of ``n`` training resets, as a run draws them."""
    env = gym.make(content.env_id)
    ids = [env.reset(seed=s, options={"split": "train"})[1]["task_id"] for s in range(n)]
    env.close()
    return ids


def test_sokoban_counts_a_panel_puzzle_reached_from_a_train_seed():
    with TaskContent("arl/Sokoban-v0") as content:
        panel = content.panel("test", PANEL)
        keys = {content.key(t) for t in panel}
        # a raw room seed of the train range whose room is a test puzzle: the env never plays
        # it for training (its content rule redraws), but the count must see through the id
        twin = next(f"6x6-1b-{s}" for s in range(20_000) if content.key(f"6x6-1b-{s}") in keys)
        assert twin not in panel
        counts = held_out_overlap(content, [twin, *_train_draws(content, 30)], {"test": PANEL})
        assert counts == {"test": {"tasks": PANEL, "trained_on": 1}}
        clean = held_out_overlap(content, _train_draws(content, 30), default_panels(content, PANEL))
        assert clean == {"test": {"tasks": PANEL, "trained_on": 0},
                         "val": {"tasks": PANEL, "trained_on": 0}}


def test_tir_counts_a_repeated_question_under_another_seed():
    from arlgym.envs.tir_math.problems import SPLIT_SEED_RANGES

    with TaskContent("arl/TIRMath-v0") as content:
        panel = content.panel("test", PANEL)
        keys = {content.key(t): t for t in panel}
        low = SPLIT_SEED_RANGES["test"][0]
        # small families repeat their few questions: a later test seed asks a panel question
        twin = next(f"tir-{s}" for s in range(low, low + 5000)
                    if f"tir-{s}" not in panel and content.key(f"tir-{s}") in keys)
        counts = held_out_overlap(content, [twin], {"test": PANEL, "val": PANEL})
        assert counts == {"test": {"tasks": PANEL, "trained_on": 1},
                          "val": {"tasks": PANEL, "trained_on": 0}}
        assert held_out_overlap(content, _train_draws(content, 40), {"test": PANEL}) == \
            {"test": {"tasks": PANEL, "trained_on": 0}}


def test_webshop_keys_goals_by_request_and_the_browser_env_by_its_text_twin(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("ARLGYM_CACHE_DIR", str(tmp_path))  # the search index, not in ~/.cache
    with TaskContent("arl/WebShopBrowser-v0", {"page_timeout": 5.0}) as content:
        assert content.env_id == "arl/WebShop-v0"  # no browser is started to key goals
        panel = content.panel("val", PANEL)
        trained = [*_train_draws(content, 40), panel[3], panel[7]]
        assert held_out_overlap(content, trained, {"test": PANEL, "val": PANEL}) == \
            {"test": {"tasks": PANEL, "trained_on": 0}, "val": {"tasks": PANEL, "trained_on": 2}}


def test_alfworld_panels_are_its_eval_splits_and_keys_come_from_the_game_files(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("ARLGYM_CACHE", str(tmp_path))  # games generated here, not in ~/.cache
    kwargs = {"data_source": "generated"}
    with TaskContent("arl/ALFWorld-v0", kwargs) as content:
        assert content.held_out_splits == ("eval_in_distribution", "eval_out_of_distribution")
        panel = content.panel("eval_out_of_distribution", 3)
        counts = held_out_overlap(content, ["gen-train-00000", "gen-train-00001", panel[1]],
                                  {"eval_in_distribution": 3, "eval_out_of_distribution": 3})
        assert counts == {"eval_in_distribution": {"tasks": 3, "trained_on": 0},
                          "eval_out_of_distribution": {"tasks": 3, "trained_on": 1}}


def test_report_and_its_line():
    report = held_out_report("arl/Sokoban-v0", {"dim_room": 6}, ["6x6-1b-0"], {"val": PANEL})
    assert report == {"env_id": "arl/Sokoban-v0", "trained_tasks": 1,
                      "panels": {"val": {"tasks": PANEL, "trained_on": 0}}}
    two = {"panels": {"test": {"tasks": 200, "trained_on": 0}, "val": {"tasks": 200, "trained_on": 3}}}
    assert format_held_out(two) == \
        "held out: 0 of 200 test and 3 of 200 val tasks were trained on (by content)"
    assert format_held_out(report) == "held out: 0 of 50 val tasks were trained on (by content)"
    missing = held_out_report("arl/Nope-v0", None, [])
    assert "unknown env id" in missing["not_measured"]
    assert format_held_out(missing).startswith("held out: not measured (")
