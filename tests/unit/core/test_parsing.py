"""The one <think>/<action> parser: strict (ARLArena) vs lenient (verl-agent), never raising."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlgym import FORMAT_ERRORS, parse_response

OK = "<think>box is left of target</think><action>right</action>"


@pytest.mark.parametrize(
    "text, strict_valid, strict_error, lenient_valid, action",
    [
        (OK, True, None, True, "right"),
        ("  <THINK> x </Think>\n<Action> Up </ACTION>  ", True, None, True, "Up"),
        ("< think >x</ think ><action>up</action>", True, None, True, "up"),
        ("<think></think><action>up</action>", True, None, True, "up"),  # empty think is fine
        ("Sure! " + OK, False, "text_outside_tags", True, "right"),
        (OK + " done", False, "text_outside_tags", True, "right"),
        ("<think>a</think> and <action>up</action>", False, "text_outside_tags", True, "up"),
        ("<action>up</action>", False, "missing_think", False, "up"),
        ("<think>plan</think>", False, "missing_action", False, None),
        ("<think>a</think><action>up</action><action>down</action>", False, "multiple_action",
         True, "up"),
        ("<think>a</think><think>b</think><action>up</action>", False, "multiple_think", True, "up"),
        ("<action>up</action><think>a</think>", False, "wrong_order", True, "up"),
        ("<think>a</think><action></action>", False, "empty_action", False, None),
        ("<think>a</think><action>   </action>", False, "empty_action", False, None),
        ("", False, "empty", False, None),
        ("   \n ", False, "empty", False, None),
        ("up", False, "missing_think", False, None),
        ("<think>向左</think><action>left</action>", False, "cjk", True, "left"),
        ("<think>unclosed<action>up</action>", False, "missing_think", False, "up"),
        ("<think>a</think><action>up", False, "missing_action", False, None),
    ],
)
def test_strict_and_lenient_table(text, strict_valid, strict_error, lenient_valid, action):
    strict = parse_response(text)
    lenient = parse_response(text, strict=False)
    assert strict.format_valid is strict_valid
    assert strict.error == strict_error
    assert lenient.format_valid is lenient_valid
    assert strict.action == action
    # extraction does not depend on the mode: the first <action> block
    assert lenient.action == action


def test_action_is_extracted_even_when_invalid():
    r = parse_response("blah <think>t</think><action>left</action> blah")
    assert not r.format_valid and r.action == "left" and r.think == "t"


def test_think_prefilled_prepends_open_tag():
    assert parse_response("reasoning</think><action>up</action>", think_prefilled=True).format_valid
    # without the flag the same text misses its opening tag
    assert not parse_response("reasoning</think><action>up</action>").format_valid
    # a model that re-opens <think> after a prefilled one has two think blocks
    r = parse_response("<think>x</think><action>up</action>", think_prefilled=True)
    assert not r.format_valid


def test_non_string_input():
    for bad in (None, 3, b"<think>", ["x"]):
        r = parse_response(bad)
        assert (r.format_valid, r.error, r.action) == (False, "not_a_string", None)


def test_large_noise_is_fast_and_safe():
    import time

    noise = ("<act" + "ion>" * 3 + "x<think" * 5 + "zz ") * 7000  # ~100 kB of tag fragments
    t = time.process_time()  # CPU time: other work on the machine does not count
    r = parse_response(noise)
    assert time.process_time() - t < 0.5
    assert not r.format_valid and r.error in FORMAT_ERRORS


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/ thinkacto\n向x")) | st.characters(), max_size=200),
       st.booleans(), st.booleans())
def test_fuzz_never_raises_and_is_consistent(text, strict, prefilled):
    r = parse_response(text, strict=strict, think_prefilled=prefilled)
    assert isinstance(r.format_valid, bool)
    assert (r.error is None) == r.format_valid
    assert r.error is None or r.error in FORMAT_ERRORS
    if r.format_valid:
        assert r.action  # a valid response always has a non-empty action
    if r.action is not None:
        assert r.action == r.action.strip()


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=50),
       st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), min_size=1,
               max_size=20).filter(lambda s: s.strip()))
def test_fuzz_wellformed_roundtrip(think, action):
    text = f"<think>{think}</think><action>{action}</action>"
    r = parse_response(text, strict=False)
    assert r.format_valid and r.action == action.strip() and r.think == think.strip()
    strict = parse_response(text)
    has_cjk = any("\u4e00" <= ch <= "\u9fff" for ch in text)
    assert strict.format_valid is not has_cjk


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`{}\\boxedpythn\n x1")) | st.characters(), max_size=200))
def test_tir_parser_fuzz_never_raises_and_is_consistent(text):
    from arlgym.core.parsing import parse_tir_response

    r = parse_tir_response(text)
    assert (r.error is None) == r.format_valid
    assert r.error is None or r.error in FORMAT_ERRORS
    if r.format_valid:
        assert r.action and r.action.strip()


def test_tir_parser_is_linear_on_adversarial_input():
    import time

    from arlgym.core.parsing import parse_tir_response

    t = time.process_time()  # CPU time: other work on the machine does not count
    r = parse_tir_response("\\boxed{" * 20000 + "```" * 20000)  # ~200 kB of openers, no closer
    # linear: ~0.03 s of CPU; a quadratic scan would take minutes
    assert time.process_time() - t < 5
    assert not r.format_valid and r.error == "no_code_or_answer"


# --------------------------------------------------------------- linear time on adversarial input
def _adversarial(n: int) -> dict[str, str]:
    """Inputs of ~n characters that made the old patterns quadratic, and tag/fence floods."""
    return {
        "lt_spaces": "<" + " " * n + "x",
        "lt_slash_spaces": "< /" + " " * n + "x",
        "lt_think_spaces": "<think" + " " * n,
        "many_lt": "<    " * (n // 5),
        "nested_think": "<think>" * (n // 7),
        "unclosed_action": "<think>t</think>" + "<action>a" * (n // 9),
        "fence_spaces": "```" + " " * n + "x",
        "fence_tabs": "```python" + "\t" * n + "x",
        "fence_unclosed": "```python\n" + "x = 1\n" * (n // 6),
        "boxed_spaces": "\\boxed" + " " * n + "x",
        "nested_boxed": "\\boxed{" * (n // 7),
    }


def _best_time(fn, text: str, repeat: int = 3) -> float:
    """Best-of CPU time of this thread: on a loaded machine wall time punishes long calls more
    (they are preempted more often), which would make a linear parser look superlinear."""
    import time

    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        fn(text)
        best = min(best, time.thread_time() - t)
    return best


@pytest.mark.parametrize("family", sorted(_adversarial(10)))
def test_every_parser_is_linear_on_adversarial_families(family):
    """10x the input costs ~10x the time (a quadratic parser: 100x; "<" + 32k spaces took 15 s).
    Ratio-based, best-of-3 CPU time, so a loaded machine does not make it flaky."""
    from arlgym.core.parsing import extract_boxed, parse_tir_response

    small, large = _adversarial(20_000)[family], _adversarial(200_000)[family]
    for parser in (parse_response, lambda t: parse_response(t, strict=False), parse_tir_response,
                   extract_boxed):
        for _attempt in range(3):  # a quadratic parser fails every time; load spikes do not
            t_small = max(_best_time(parser, small), 2e-4)  # floor: timer noise on tiny times
            t_large = _best_time(parser, large)
            if t_large < 1.0 and t_large / t_small < 40:
                break
        assert t_large < 1.0, (family, t_large)
        assert t_large / t_small < 40, (family, t_small, t_large)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["<", "/", " ", "\t", "\n", "think", "ACTION", ">", "x", "```",
                                 "python", "py", "\\boxed", "{", "}"]), max_size=40).map("".join))
def test_possessive_patterns_match_exactly_what_the_old_ones_did(text):
    """The linear patterns find the same tags, code blocks and boxed openers as the original
    backtracking ones (kept here as the reference)."""
    import re

    from arlgym.core import parsing

    old_tag = re.compile(r"<\s*(/?)\s*(think|action)\s*>", re.IGNORECASE)
    old_code = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.IGNORECASE | re.DOTALL)
    old_boxed = re.compile(r"\\(?:boxed|fbox)\s*\{")
    for old, new in ((old_tag, parsing._TAG), (old_code, parsing._CODE_BLOCK),
                     (old_boxed, parsing._BOXED_OPEN)):
        assert [(m.span(), m.groups()) for m in old.finditer(text)] == \
               [(m.span(), m.groups()) for m in new.finditer(text)]
