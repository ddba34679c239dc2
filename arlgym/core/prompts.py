"""Prompt templates (ARLArena, paper Appendix H.1) and the history window.

The templates are part of the paper's experimental protocol: each turn the agent sees one user
message holding the task, how many steps it has taken, the last ``history_length`` observations
and actions (the "memory context window", 2 by default), the current observation, the
admissible actions and the ``<think>``/``<action>`` instruction. Every env's template lives in
this one module so the protocol can be read and diffed in one place.

A template has two forms, as in verl-agent/ARLArena: ``first`` for step 0 (no history) and
``later`` for every later step. Fields are ``str.format`` names:
``{task_description} {step_count} {history_length} {action_history} {current_step}
{current_observation} {admissible_actions}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PromptTemplate",
    "HistoryEntry",
    "render_history",
    "render_prompt",
    "format_admissible",
    "SOKOBAN_TEXT",
    "SOKOBAN_VISION",
    "ALFWORLD",
    "WEBSHOP",
    "TIR_MATH",
    "THINK_ACTION_INSTRUCTION",
]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One past turn as the history window shows it: what the agent saw and what it did."""

    observation: str
    action: str


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A pair of format strings: ``first`` (no history yet) and ``later`` (with history)."""

    name: str
    first: str
    later: str


def render_history(history: Sequence[HistoryEntry], history_length: int) -> str:
    """The last ``history_length`` turns as verl-agent's memory renders them.

    Each turn is ``[Observation n: '<obs>', Action n: '<action>']`` with ``n`` the 1-based step
    number in the episode; turns are joined by newlines.
    """
    if history_length <= 0 or not history:
        return ""
    start = max(0, len(history) - history_length)
    lines = [
        f"[Observation {i + 1}: '{entry.observation}', Action {i + 1}: '{entry.action}']"
        for i, entry in enumerate(history[start:], start=start)
    ]
    return "\n".join(lines)


def format_admissible(actions: Sequence[str]) -> str:
    """Admissible actions quoted and joined as ARLArena's ALFWorld/WebShop prompts show them."""
    return "\n ".join(f"'{a}'" for a in actions)


def render_prompt(
    template: PromptTemplate,
    *,
    current_observation: str,
    history: Sequence[HistoryEntry] = (),
    history_length: int = 2,
    task_description: str = "",
    admissible_actions: str = "",
) -> str:
    """Fill ``template`` for the current turn.

    Args:
        template: one of this module's templates (or a user's own with the same fields).
        current_observation: the env's observation text for this turn.
        history: every past turn of the episode, oldest first; only the last
            ``history_length`` are shown. Empty (or ``history_length == 0``) selects the
            ``first`` form.
        history_length: the memory window (paper default 2).
        task_description: the task text (ALFWorld/WebShop goal).
        admissible_actions: the already formatted admissible action list.
    """
    step_count = len(history)
    use_history = step_count > 0 and history_length > 0
    fields = {
        "task_description": task_description,
        "step_count": step_count,
        "history_length": min(history_length, step_count),
        "action_history": render_history(history, history_length),
        "current_step": step_count + 1,
        "current_observation": current_observation,
        "admissible_actions": admissible_actions,
    }
    return (template.later if use_history else template.first).format(**fields)


THINK_ACTION_INSTRUCTION = (
    "This reasoning process MUST be enclosed within <think> </think> tags. "
    "Once you've finished your reasoning, you should choose an admissible action for the "
    "current step and present it within <action> </action> tags."
)

_HISTORY_BLOCK = (
    "Prior to this step, you have already taken {step_count} step(s). Below are the most "
    "recent {history_length} observations and the corresponding actions you took:\n"
    "{action_history}\n"
    "You are now at step {current_step} and your current observation is:\n"
)

# --------------------------------------------------------------------------------------------
# Sokoban. The paper (H.1.4) prints the vision template; the text template replaces the
# "Visual Elements" section with the symbol legend of the text grid (verl-agent's text mode).
# --------------------------------------------------------------------------------------------
_SOKOBAN_INTRO = (
    "You are an expert agent operating in the Sokoban environment. Your goal is to push all "
    "the boxes onto the target spots. Once all boxes are on the targets, you win!\n"
    "# Rules\n"
    "You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck. You "
    "can't walk through or push boxes into walls. To avoid traps, do not push boxes into "
    "corners or against walls where they can't be moved again.\n"
)
_SOKOBAN_SYMBOLS = (
    "# Symbols and Their Meaning\n"
    "Walls (#): block movement. Floor (_): open space. Targets (O): where boxes must go. "
    "Boxes (X): what you push. Player (P): you. Box on Target (√): a placed box. "
    "Player on Target (S): you standing on a target.\n"
)
_SOKOBAN_VISUALS = (
    "# Visual Elements in the Image:\n"
    "Character: A small, green alien-like figure with two antennae and black eyes. It "
    "represents you.\n"
    "Box: A yellow crate marked with an orange \"X\" across its front. It is the box you need "
    "to push.\n"
    "Target: A black tile outlined in red, with a small red diamond shape in the center. It "
    "marks the destination where a box should be pushed.\n"
)
_SOKOBAN_TURN = (
    "Your admissible actions are [\"up\", \"down\", \"left\", \"right\"].\n"
    "Now it's your turn to make a move (choose ONE action only for the current step). You "
    "should first reason step-by-step about the current situation - observe the positions of "
    "boxes and targets, plan a path to push a box toward a target, and avoid traps like "
    "corners or walls. " + THINK_ACTION_INSTRUCTION
)


def _sokoban(name: str, legend: str, observation_line: str) -> PromptTemplate:
    head = _SOKOBAN_INTRO + legend + "# Current Step\n"
    return PromptTemplate(
        name=name,
        first=head + "Your current observation is:\n" + observation_line + _SOKOBAN_TURN,
        later=head + _HISTORY_BLOCK + observation_line + _SOKOBAN_TURN,
    )


SOKOBAN_TEXT = _sokoban("sokoban_text", _SOKOBAN_SYMBOLS, "{current_observation}\n")
SOKOBAN_VISION = _sokoban("sokoban_vision", _SOKOBAN_VISUALS, "<image>\n")

# --------------------------------------------------------------------------------------------
# ALFWorld (H.1.3)
# --------------------------------------------------------------------------------------------
_ALFWORLD_TURN = (
    "\nYour admissible actions of the current situation are: [{admissible_actions}].\n"
    "Now it's your turn to take an action. You should first reason step-by-step about the "
    "current situation. " + THINK_ACTION_INSTRUCTION
)
ALFWORLD = PromptTemplate(
    name="alfworld",
    first=(
        "You are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your current observation is: {current_observation}" + _ALFWORLD_TURN
    ),
    later=(
        "You are an expert agent operating in the ALFRED Embodied Environment. Your task is "
        "to: {task_description}\n" + _HISTORY_BLOCK + "{current_observation}" + _ALFWORLD_TURN
    ),
)

# --------------------------------------------------------------------------------------------
# WebShop (H.1.2)
# --------------------------------------------------------------------------------------------
_WEBSHOP_TURN = (
    "\nYour admissible actions of the current situation are: [\n{admissible_actions}\n].\n"
    "Now it's your turn to take one action for the current step. You should first reason "
    "step-by-step about the current situation, then think carefully which admissible action "
    "best advances the shopping goal. " + THINK_ACTION_INSTRUCTION
)
WEBSHOP = PromptTemplate(
    name="webshop",
    first=(
        "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
        "Your task is to: {task_description}.\n"
        "Your current observation is: {current_observation}." + _WEBSHOP_TURN
    ),
    later=(
        "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
        "Your task is to: {task_description}.\n" + _HISTORY_BLOCK + "{current_observation}."
        + _WEBSHOP_TURN
    ),
)

# --------------------------------------------------------------------------------------------
# TIR Math (H.1.1): one problem statement; the conversation so far (each response cut after its
# code block, then "Code execution result: ...") is appended in full — the paper's TIR agent
# sees its whole history, not a window. ``later`` has one extra field, ``{transcript}``.
# --------------------------------------------------------------------------------------------
_TIR = (
    "Solve the following problem step by step. You now have the ability to selectively write "
    "executable Python code to enhance your reasoning process. The Python code will be "
    "executed by an external sandbox, and the output (after \"Code execution result: \") is "
    "returned to aid your reasoning and help you arrive at the final answer. The Python code "
    "should be complete scripts, including necessary imports.\n"
    "Code Format: Each code snippet is wrapped between triple backticks. You need to use "
    "'print()' to output intermediate results.\n"
    "Answer Format: You can use the 'final_answer()' function in the code to return your "
    "final answer. For example, to answer the User Question: What is the result of the "
    "5 + 3 + 1294.678?, you can write:\n"
    "answer = 5 + 3 + 1294.678\nfinal_answer(answer)\n"
    "You can also use \\boxed{{}} to return your answer. The last part of your response "
    "should be: \\boxed{{The final answer goes here.}}\n"
    "User Question: {task_description}\n"
)
TIR_MATH = PromptTemplate(name="tir_math", first=_TIR, later=_TIR + "{transcript}")
