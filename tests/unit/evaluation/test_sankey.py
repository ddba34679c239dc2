"""Sankey flows of step-wise action transitions (paper Appendix F): exact link counts, won vs
lost kept apart, long episodes folded into one column, and both renderings written."""

from arlgym.evaluation.sankey import plot_sankey_png, sankey_flows, write_sankey_html
from arlgym.rollout import StepRecord, Trajectory

ENV = "arl/Sokoban-v0"


def _step(action, *, valid=True, won=False):
    return StepRecord(uid="u", traj_id="t", step=0, task_id="x", task_type="", prompt="", response="",
                      anchor="s", step_reward=0.0, task_reward=0.0, format_penalty=0.0,
                      format_valid=action is not None, action_valid=valid, action=action,
                      executed_action=action if valid else None, terminated=won, truncated=False,
                      won=won, score=float(won))


def _traj(*actions, won=False):
    steps = [_step(a, valid=a not in (None, "jump")) for a in actions]
    steps[-1].won = won
    return Trajectory(uid="u", traj_id="t", env_id=ENV, task_id="x", task_type="", group_index=0,
                      member=0, steps=steps)


def test_links_count_episodes_per_transition_and_outcome():
    trajs = [_traj("up", "left", won=True), _traj("up", "left", won=True),
             _traj("up", "jump"), _traj(None)]
    flows = sankey_flows(trajs)
    assert flows["episodes"] == 4 and flows["won"] == 2
    links = flows["links"]
    assert links[((0, "up"), (1, "left"), "won")] == 2
    assert links[((1, "left"), (2, "(won)"), "won")] == 2
    assert links[((0, "up"), (1, "invalid action"), "lost")] == 1
    assert links[((1, "invalid action"), (2, "(lost)"), "lost")] == 1
    assert links[((0, "invalid format"), (1, "(lost)"), "lost")] == 1
    # a won and a lost episode sharing a transition are two bands, never one
    mixed = sankey_flows([_traj("up", "down", won=True), _traj("up", "down")])["links"]
    assert mixed[((0, "up"), (1, "down"), "won")] == 1
    assert mixed[((0, "up"), (1, "down"), "lost")] == 1
    # every episode leaves column 0 exactly once
    out_of_start = sum(n for (a, _b, _o), n in links.items() if a[0] == 0)
    assert out_of_start == 4
    assert set(flows["nodes"]) == {n for (a, b, _o) in links for n in (a, b)}


def test_long_episodes_fold_into_one_column():
    flows = sankey_flows([_traj(*["up"] * 12)], max_steps=3)
    assert max(k for k, _ in flows["nodes"]) == 4  # 3 steps, the fold, the outcome
    assert flows["links"][((2, "up"), (3, "…"), "lost")] == 1
    assert flows["links"][((3, "…"), (4, "(lost)"), "lost")] == 1


def test_html_and_png_are_written(tmp_path):
    flows = sankey_flows([_traj("up", "left", won=True), _traj("down", "jump")])
    html = write_sankey_html(flows, tmp_path / "s" / "m.html", "m on Sokoban")
    png = plot_sankey_png(flows, tmp_path / "s" / "m.png", "m on Sokoban")
    text = html.read_text()
    assert '"type":"sankey"' in text
    assert "1\\u002f2 won" in text  # the title: m on Sokoban — 1/2 won (JSON-escaped)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
