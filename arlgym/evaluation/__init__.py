"""Evaluation: metrics over trajectories and the resumable eval runner."""

from arlgym.evaluation.metrics import format_summary, pass_at_k, summarize

__all__ = ["summarize", "format_summary", "pass_at_k"]
