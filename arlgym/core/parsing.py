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

TIR Math is the one protocol of the paper with another answer format (Appendix H.1.1: Python in
triple-backtick blocks, the answer in ``\\boxed{}`` or printed by ``final_answer()``);
:func:`parse_tir_response` reads it, here beside the uniform parser so the two are judged the
same way and read in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedResponse", "parse_response", "parse_tir_response", "truncate_after_code",
           "extract_boxed", "FORMAT_ERRORS"]

# One tag token: <think>, </think>, <action>, </action>, case-insensitive, inner spaces allowed.
# Every quantifier is possessive (``*+``): a ``<`` followed by a long whitespace run is read
# once, not re-split between the two ``\s*`` (which made ``"<" + 32k spaces`` take 15 s).
# Every pattern in this module must stay linear on any input (tests/unit/core/test_parsing.py,
# bench/bench_parser.py check it).
_TAG = re.compile(r"<\s*+(/?)\s*+(think|action)\s*+>", re.IGNORECASE)
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
    "no_code_or_answer": "TIR: neither a ```python``` code block nor a \\boxed{} answer",
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


#: One tag found in a response: (start, end, "/" or "", "think" or "action").
_Tag = tuple[int, int, str, str]


@dataclass(slots=True)
class _TagScan:
    """What one pass over a response's tags found. Only counts and the first five tags are
    kept: a response with 100k tags allocates nothing per tag that outlives the loop (a list of
    them made the garbage collector's cost grow with the input)."""

    first: list[_Tag]
    counts: dict[str, int]
    blocks: dict[str, str]  # name -> stripped content of its first complete block
    has_open_think: bool
    has_close_think: bool


def _scan_tags(text: str) -> _TagScan:
    first: list[_Tag] = []
    counts = {"think": 0, "action": 0}
    opened: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    has_open = has_close = False
    for m in _TAG.finditer(text):
        slash, name = m.group(1), m.group(2).lower()
        if len(first) < 5:
            first.append((m.start(), m.end(), slash, name))
        counts[name] += 1
        if name == "think":
            has_close = has_close or bool(slash)
            has_open = has_open or not slash
        if name not in spans:  # the first opening tag, then the first closing tag after it
            if name not in opened:
                if not slash:
                    opened[name] = m.end()
            elif slash:
                spans[name] = (opened[name], m.start())
    blocks = {name: text[a:b].strip() for name, (a, b) in spans.items()}
    return _TagScan(first, counts, blocks, has_open, has_close)


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

    scan = _scan_tags(text)
    think = scan.blocks.get("think")
    action = scan.blocks.get("action")
    if action == "":
        action = None  # an empty action cannot be executed
        empty_action = True
    else:
        empty_action = False

    if strict:
        error = _strict_error(text, scan, think, action, empty_action)
    else:
        error = _lenient_error(scan, think, action, empty_action)
    return ParsedResponse(think, action, error is None, error)


def _strict_error(
    text: str,
    scan: _TagScan,
    think: str | None,
    action: str | None,
    empty_action: bool,
) -> str | None:
    n_think, n_action = scan.counts["think"], scan.counts["action"]
    tags = scan.first  # all of them once the counts below are checked (at most 2 + 2)
    if think is None:
        return "missing_think"
    if action is None and not empty_action:
        return "missing_action"
    if n_think > 2:
        return "multiple_think"
    if n_action > 2:
        return "multiple_action"
    if [(slash, tag) for _, _, slash, tag in tags] != _STRICT_SEQUENCE:
        return "wrong_order"
    outside = (text[: tags[0][0]], text[tags[1][1] : tags[2][0]], text[tags[3][1] :])
    if any(part.strip() for part in outside):
        return "text_outside_tags"
    if empty_action:
        return "empty_action"
    if _CJK.search(text):
        return "cjk"
    return None


def _lenient_error(
    scan: _TagScan,
    think: str | None,
    action: str | None,
    empty_action: bool,
) -> str | None:
    if action is None:
        return "empty_action" if empty_action else "missing_action"
    if not (scan.has_open_think and scan.has_close_think):
        return "missing_think"
    return None


# ---------------------------------------------------------------------------- TIR Math
# A fenced code block: ``` or ```python / ```py / ```python3, up to the next closing fence.
# (possessive whitespace, as _TAG: a fence followed by a long run of spaces is read once; the
# lazy body stops at the next fence, so k unclosed openers cost one pass, not k.)
_CODE_BLOCK = re.compile(r"```[ \t]*+(?:python3?|py)?[ \t]*+\n(.*?)```", re.IGNORECASE | re.DOTALL)
_BOXED_OPEN = re.compile(r"\\(?:boxed|fbox)\s*+\{")


def truncate_after_code(text: str) -> str:
    """``text`` up to the end of its first code block (SimpleTIR/ARLArena cut a response there:
    whatever the model wrote after the code was written without seeing the code's output)."""
    match = _CODE_BLOCK.search(text) if isinstance(text, str) else None
    return text[: match.end()] if match else text


def parse_tir_response(text: object) -> ParsedResponse:
    """Read a TIR Math response: reasoning, then one Python code block *or* a final answer.

    The response is first cut after its first code block. If the remaining text has a
    ``\\boxed{...}`` before the code (or there is no code), the action is that boxed answer
    (returned as ``"\\boxed{...}"``); otherwise the action is the code. ``think`` is the prose
    before the code or answer. Invalid: no code block and no boxed answer (the paper's "void
    turn"), CJK characters (action still returned), an empty code block. Never raises.

    >>> parse_tir_response("Compute it.\n```python\nprint(2**10)\n```").action
    'print(2**10)'
    >>> parse_tir_response("So the answer is \\boxed{1024}.").action
    '\\boxed{1024}'
    """
    if not isinstance(text, str):
        return ParsedResponse(None, None, False, "not_a_string")
    if not text.strip():
        return ParsedResponse(None, None, False, "empty")
    text = truncate_after_code(text)
    code = _CODE_BLOCK.search(text)
    prose = text[: code.start()] if code else text
    boxed = _last_boxed(prose)
    if boxed is not None:
        think, action = prose[: boxed[0]].strip(), f"\\boxed{{{boxed[1]}}}"
    elif code is not None:
        think, action = prose.strip(), code.group(1).strip("\n").rstrip()
    else:
        return ParsedResponse(text.strip(), None, False, "no_code_or_answer")
    if not action.strip():
        return ParsedResponse(think or None, None, False, "empty_action")
    error = "cjk" if _CJK.search(text) else None
    return ParsedResponse(think or None, action, error is None, error)


def extract_boxed(text: object) -> str | None:
    """Content of the last complete ``\\boxed{...}`` in ``text`` (nested braces allowed)."""
    found = _last_boxed(text) if isinstance(text, str) else None
    return found[1] if found else None


def _last_boxed(text: str) -> tuple[int, str] | None:
    """(where it starts, content) of the last complete ``\\boxed{...}`` in ``text``.

    One pass over the text pairs every brace (a stack), so adversarial input such as thousands
    of nested ``\\boxed{`` stays linear."""
    starts: list[int] = []
    brace_ends: list[int] = []  # ints only: nothing per match for the garbage collector to walk
    for m in _BOXED_OPEN.finditer(text):
        starts.append(m.start())
        brace_ends.append(m.end())
    if not starts:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closing[stack.pop()] = i
    for k in range(len(starts) - 1, -1, -1):
        end = closing.get(brace_ends[k] - 1)
        if end is not None:
            return starts[k], text[brace_ends[k]:end].strip()
    return None
