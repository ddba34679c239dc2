"""History window rendering and the template fields (paper Appendix H.1)."""

from arlgym.core.prompts import (
    ALFWORLD,
    SOKOBAN_TEXT,
    SOKOBAN_VISION,
    WEBSHOP,
    HistoryEntry,
    format_admissible,
    render_history,
    render_prompt,
)


def test_history_window_keeps_last_k_with_step_numbers():
    hist = [HistoryEntry(f"obs{i}", f"act{i}") for i in range(5)]
    text = render_history(hist, 2)
    assert text == "[Observation 4: 'obs3', Action 4: 'act3']\n[Observation 5: 'obs4', Action 5: 'act4']"
    assert render_history(hist, 0) == ""
    assert render_history([], 2) == ""


def test_first_and_later_forms():
    first = render_prompt(SOKOBAN_TEXT, current_observation="GRID")
    assert "Prior to this step" not in first and "GRID" in first
    hist = [HistoryEntry("G0", "up"), HistoryEntry("G1", "left"), HistoryEntry("G2", "down")]
    later = render_prompt(SOKOBAN_TEXT, current_observation="G3", history=hist, history_length=2)
    assert "already taken 3 step(s)" in later
    assert "most recent 2 observations" in later
    assert "You are now at step 4" in later
    assert "'G0'" not in later and "[Observation 3: 'G2', Action 3: 'down']" in later
    # history_length=0: no history block even later in the episode
    assert "Prior to this step" not in render_prompt(SOKOBAN_TEXT, current_observation="G", history=hist,
                                                     history_length=0)


def test_every_template_has_the_think_action_instruction():
    for template in (SOKOBAN_TEXT, SOKOBAN_VISION, ALFWORLD, WEBSHOP):
        for form in (template.first, template.later):
            assert "<think> </think>" in form and "<action> </action>" in form


def test_paper_content_is_present():
    assert "ALFRED Embodied Environment" in ALFWORLD.later and "{task_description}" in ALFWORLD.later
    assert "WebShop e-commerce environment" in WEBSHOP.first
    assert "green alien-like figure" in SOKOBAN_VISION.first and "<image>" in SOKOBAN_VISION.first
    assert '["up", "down", "left", "right"]' in SOKOBAN_TEXT.first
    assert format_admissible(["go to a", "look"]) == "'go to a'\n 'look'"
