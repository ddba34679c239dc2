"""HFPolicy at a real vocabulary: sampling keeps no (B, T, V) logits.

Measured in a fresh interpreter (peak RSS is per process): a toy model with Qwen's 151,936-token
vocabulary samples 16 prompts x 32 tokens. Keeping every step's logits (``output_logits``) and
their float32 log-softmax costs 16 x 32 x 151,936 x 4 B = 311 MB per copy (> 600 MB in all); the
recorder keeps one step's (B, V) copy (~10 MB).

Run: ``pytest tests/unit/policies/test_hf_policy_memory.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = textwrap.dedent("""
    import json, resource, sys
    import gymnasium as gym, torch
    import arlgym
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from arlgym.models import load_tokenizer
    from arlgym.policies import SamplingParams
    from arlgym.policies.hf import HFPolicy

    vocab = int(sys.argv[1])
    tok = load_tokenizer("tiny")
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    policy = HFPolicy(Qwen2ForCausalLM(cfg), tokenizer=tok, batch_size=16)
    env = gym.make("arl/Sokoban-v0")
    prompts = [env.reset(seed=s)[0] for s in range(16)]
    policy.generate(prompts[:2], SamplingParams(max_new_tokens=2, seed=0))  # warm up
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = policy.generate(prompts, SamplingParams(max_new_tokens=32, seed=0))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lps = [lp for c in out for lp in c.logprobs]
    print(json.dumps({"peak_delta_mib": after - before,
                      "tokens": sum(len(c.response_token_ids) for c in out),
                      "finite": all(lp == lp and lp <= 0 for lp in lps)}))
""")


def _run(vocab: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vocab)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sampling_at_qwen_vocabulary_stays_within_a_step_of_logits():
    wide = _run(151_936)
    assert wide["finite"] and wide["tokens"] > 16 * 8
    # a kept (B, T, V) stack alone would be +311 MB; one step's copies are ~10-20 MB
    assert wide["peak_delta_mib"] < 150, wide
