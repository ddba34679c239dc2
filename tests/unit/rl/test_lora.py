"""LoRA in the RL trainer: the merged weights a rollout engine loads, the frozen base as the KL
reference, only adapters train, and the saved final model loads as a plain HF model."""

import torch
from safetensors.torch import load_file

from arlgym.models import load_model_and_tokenizer
from arlgym.rl.cli import parse_train_config
from arlgym.rl.lora import apply_lora, merged_copy, merged_weights
from arlgym.rl.trainer import Trainer


def _lora_model(seed: int = 0):
    model, tok = load_model_and_tokenizer("tiny", seed=seed)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    lora = apply_lora(model, r=4)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # lora_B starts at zero (adapter = identity); make it matter
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return lora, base, tok


def test_merged_weights_are_plain_hf_names_and_leave_the_model_unchanged():
    lora, base, tok = _lora_model()
    ids = torch.tensor([tok("<action>up</action>")["input_ids"]])
    before = lora(ids).logits.detach()
    merged = dict(merged_weights(lora))
    assert set(merged) == set(base)  # exactly the HF parameter names, no lora_* tensors
    changed = [k for k in merged if not torch.equal(merged[k], base[k])]
    assert changed and all("proj" in k for k in changed)
    plain = merged_copy(lora)
    assert torch.allclose(plain(ids).logits, before, atol=1e-5)  # merged == adapter forward
    for k, v in plain.state_dict().items():
        assert torch.allclose(v, merged[k], atol=1e-6), k
    assert torch.allclose(lora(ids).logits, before, atol=1e-5)  # unmerged again afterwards


def _lora_trainer(tmp_path, steps: int) -> Trainer:
    return Trainer(parse_train_config([
        "--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-2",
        "--log_with", "none", "--algo", "grpo", "--kl_coef", "0.1", "--lora_r", "4",
        "--max_steps", str(steps), "--output_dir", str(tmp_path)]))


def test_lora_reference_is_the_base_model(tmp_path):
    trainer = _lora_trainer(tmp_path, steps=1)
    assert trainer.ref_model is None  # no second copy of the weights
    # fresh adapters (lora_B = 0) leave the policy equal to its adapter-disabled self
    assert abs(trainer.train()[0]["kl"]) < 1e-7


def test_trainer_with_lora_trains_adapters_only_and_saves_a_plain_model(tmp_path):
    trainer = _lora_trainer(tmp_path, steps=2)
    model = trainer.accelerator.unwrap_model(trainer.model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move the policy away from the base: the KL term must see it
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert lora_before and all("lora_" in n for n in lora_before)
    history = trainer.train()
    assert history[0]["kl"] > 1e-6  # the reference is the base, not the adapted policy
    for n, p in model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n
    # the KL gradient alone moves the adapters back towards the base
    assert any(not torch.equal(p, lora_before[n]) for n, p in model.named_parameters() if n in lora_before)
    final = tmp_path / "final"
    assert (final / "adapter" / "adapter_config.json").exists()
    saved = load_file(str(final / "model.safetensors"))
    assert not any("lora_" in k for k in saved)
    reloaded, _ = load_model_and_tokenizer(str(final))
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, model(ids).logits, atol=1e-5)
