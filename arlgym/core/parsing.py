"""The one response parser every arlgym env uses.

An LLM agent answers each turn with free text. ARLArena (and verl-agent before it) asks for
``<think>reasoning</think><action>command</action>`` and penalises answers that do not follow
the format. Keeping the parser in one place means SFT data, RL rollouts and evaluation all
agree on what a "valid" answer is.

Two modes:

* **strict** (default, ARLArena): exactly one ``<think>…</think>`` followed by exactly one
  ``<action>…</action>``, nothing but whitespace outside the two blocks, a non-empty action and
  no CJK characters (ARLArena rejects them to stop language drift). Tags are case-insensitive.
* **lenient** (verl-agent): the first ``<action>…</action>`` block is the action, text outside
  the blocks is allowed, but both ``<think>`` and ``</think>`` must appear.

In both modes the action is returned even when the format is invalid, as long as an action
block can be extracted, so the env can still execute it and apply the format penalty
(ARLArena's behaviour). The parser never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedResponse", "parse_response", "FORMAT_ERRORS"]

# One tag token: <think>, </think>, <action>, </action>, case-insensitive, inner spaces allowed.
_TAG = re.compile(r"<\s*(/?)\s*(think|action)\s*>", re.IGNORECASE)
_CJK = re.compile(r"[\u4e00-\u9fff]")

#: Every value ``ParsedResponse.error`` can take, with its meaning.
FORMAT_ERRORS: dict[str, str] = {
    "not_a_string": "the response is not a str",
    "empty": "the response is empty or whitespace",
    "missing_think": "no complete <think>…</think> block",
    "missing_action": "no complete <action>…</action> block",
    "multiple_think": "more than one <think> or </think> tag",
    "multiple_action": "more than one <action> or </action> tag",
    "wrong_order": "the tags are not <think></think><action></action> in that order",
    "text_outside_tags": "non-whitespace text outside the <think> and <action> blocks",
    "empty_action": "the <action> block is empty",
    "cjk": "the response contains CJK characters",
}

_STRICT_SEQUENCE = [("", "think"), ("/", "think"), ("", "action"), ("/", "action")]


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """What :func:`parse_response` found in one response.

    Attributes:
        think: the reasoning text (stripped), or ``None`` when no think block was found.
        action: the action text (stripped), or ``None`` when no action block could be extracted.
            Present even when ``format_valid`` is false, so the env can execute and penalise.
        format_valid: whether the response follows the format of the chosen mode.
        error: ``None`` when valid, else one key of :data:`FORMAT_ERRORS`.
    """

    think: str | None
    action: str | None
    format_valid: bool
    error: str | None


def _first_block(text: str, tags: list[tuple[re.Match[str], str, str]], name: str) -> str | None:
    """Content between the first opening ``name`` tag and the first closing tag after it."""
    start = None
    for match, slash, tag in tags:
        if tag != name:
            continue
        if start is None and not slash:
            start = match.end()
        elif start is not None and slash:
            return text[start : match.start()].strip()
    return None


def parse_response(text: object, strict: bool = True, think_prefilled: bool = False) -> ParsedResponse:
    """Split an LLM response into reasoning and action and judge its format.

    Args:
        text: the raw response. Anything that is not a ``str`` gives an invalid result.
        strict: ARLArena's strict rules (default) or verl-agent's lenient ones; see the module
            docstring for the exact difference.
        think_prefilled: the generation prompt already opened ``<think>`` (e.g. Qwen3 thinking
            chat templates), so the response starts inside the think block.

    Returns:
        A :class:`ParsedResponse`. Never raises.

    >>> parse_response("<think>box is left</think><action>left</action>").action
    'left'
    >>> parse_response("sure! <think>x</think><action>up</action>").format_valid
    False
    >>> parse_response("sure! <think>x</think><action>up</action>", strict=False).format_valid
    True
    """
    if not isinstance(text, str):
        return ParsedResponse(None, None, False, "not_a_string")
    if think_prefilled:
        text = "<think>" + text
    if not text.strip():
        return ParsedResponse(None, None, False, "empty")

    tags = [(m, m.group(1), m.group(2).lower()) for m in _TAG.finditer(text)]
    think = _first_block(text, tags, "think")
    action = _first_block(text, tags, "action")
    if action == "":
        action = None  # an empty action cannot be executed
        empty_action = True
    else:
        empty_action = False

    if strict:
        error = _strict_error(text, tags, think, action, empty_action)
    else:
        error = _lenient_error(tags, think, action, empty_action)
    return ParsedResponse(think, action, error is None, error)


def _strict_error(
    text: str,
    tags: list[tuple[re.Match[str], str, str]],
    think: str | None,
    action: str | None,
    empty_action: bool,
) -> str | None:
    n_think = sum(1 for _, _, tag in tags if tag == "think")
    n_action = len(tags) - n_think
    if think is None:
        return "missing_think"
    if action is None and not empty_action:
        return "missing_action"
    if n_think > 2:
        return "multiple_think"
    if n_action > 2:
        return "multiple_action"
    if [(slash, tag) for _, slash, tag in tags] != _STRICT_SEQUENCE:
        return "wrong_order"
    outside = (
        text[: tags[0][0].start()],
        text[tags[1][0].end() : tags[2][0].start()],
        text[tags[3][0].end() :],
    )
    if any(part.strip() for part in outside):
        return "text_outside_tags"
    if empty_action:
        return "empty_action"
    if _CJK.search(text):
        return "cjk"
    return None


def _lenient_error(
    tags: list[tuple[re.Match[str], str, str]],
    think: str | None,
    action: str | None,
    empty_action: bool,
) -> str | None:
    if action is None:
        return "empty_action" if empty_action else "missing_action"
    has_open = any(tag == "think" and not slash for _, slash, tag in tags)
    has_close = any(tag == "think" and slash for _, slash, tag in tags)
    if not (has_open and has_close):
        return "missing_think"
    return None
