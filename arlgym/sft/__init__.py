"""Behaviour cloning: collect step-level chat samples from a policy, then SFT a model on them.

``arlgym-sft collect`` rolls out a policy through the shared rollout collector (so the prompts
are exactly what RL and eval show), keeps the episodes that pass ``--min-score`` and writes
one HF ``messages`` sample per step. ``arlgym-sft train`` fine-tunes a model on them with TRL.
"""
