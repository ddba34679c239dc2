"""The TRL adapter: TRL's own GRPOTrainer runs training steps of the tiny model on arl/Sokoban-v0
through ``environment_factory`` (reset on the row's seed, the ``act`` tool, the env's reward
logged), and a tool call parsed by TRL's own response parser plays exactly the in-process step.
(The untrained tiny model emits no tool calls, so its rewards are all 0 and its weights do not
move; that a tool call reaches the env is the parser test's job.)"""

from __future__ import annotations

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.serve.server import EnvServer
from arlgym.serve.trl_env import ArlgymTRLEnv, environment_factory, seed_dataset


def tiny_with_tool_template():
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    from arlgym.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny", seed=0)
    tokenizer.chat_template = qwen3_chat_template  # a template TRL parses tool calls of
    return model, add_response_schema(tokenizer)


@pytest.mark.parametrize("remote", [False, True])
def test_tool_call_parsed_by_trl_plays_the_in_process_step(remote):
    _, tokenizer = tiny_with_tool_template()
    completion = '<tool_call>\n{"name": "act", "arguments": {"action": "left"}}\n</tool_call>'
    call = tokenizer.parse_response(completion, prefix="")["tool_calls"][0]["function"]
    ref = gym.make("arl/Sokoban-v0")
    _, info = ref.reset(seed=3)
    with EnvServer({"arl/Sokoban-v0": {}}) as srv:
        env = ArlgymTRLEnv("arl/Sokoban-v0", server=srv.url if remote else None)
        first = env.reset(prompt=[{"role": "user", "content": "x"}], seed=3)
        assert first.startswith(info["raw_observation"])
        assert ", ".join(info["admissible_actions"]) in first
        text = env.act(**call["arguments"])
        _, reward, term, trunc, info = ref.step("<think></think><action>left</action>")
        assert text.startswith(info["raw_observation"]) and env.infos[-1] == info
        assert env.get_reward() == reward and env.done == (term or trunc)
        env._close()


def test_grpo_trainer_trains_on_sokoban_through_the_adapter(tmp_path, monkeypatch):
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental

    model, tokenizer = tiny_with_tool_template()
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                        per_device_train_batch_size=4, num_generations=2,
                        max_completion_length=12, max_steps=2, logging_steps=1,
                        save_strategy="no", beta=0.0, disable_tqdm=True, seed=0,
                        dataloader_num_workers=0, log_level="error")
    made: list[ArlgymTRLEnv] = []
    base = environment_factory("arl/Sokoban-v0")

    def factory() -> ArlgymTRLEnv:
        made.append(base())
        return made[-1]

    trainer = GRPOTrainer(model=model, args=config, train_dataset=seed_dataset(8),
                          environment_factory=factory, processing_class=tokenizer)
    assert [t.__name__ for t in trainer.tools] == ["act"]
    trainer.train()
    logged = [row for row in trainer.state.log_history if "rewards/ArlgymTRLEnv/mean" in row]
    assert len(logged) == 2  # the env's reward, logged at each of the 2 steps
    # every rollout env was reset on its row's seed: its first info is that seed's task
    ref = gym.make("arl/Sokoban-v0")
    tasks = {ref.reset(seed=s)[1]["task_id"] for s in range(8)}
    assert made and all(e.infos and e.infos[0]["task_id"] in tasks for e in made)


def _play_in_child(factory, seed: int) -> tuple[str, str, float]:
    """Run in a spawned process, as AsyncGRPOTrainer's rollout worker runs the factory."""
    env = factory()
    first = env.reset(seed=seed)
    text = env.act("left")
    env._close()
    return first, text, env.get_reward()


@pytest.mark.parametrize("remote", [False, True])
def test_environment_factory_pickles_and_plays_in_a_spawned_process(remote):
    import multiprocessing as mp
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from arlgym.serve.trl_env import EnvironmentFactory

    with EnvServer({"arl/Sokoban-v0": {}}) as srv:
        factory = environment_factory("arl/Sokoban-v0", server=srv.url if remote else None)
        again = pickle.loads(pickle.dumps(factory))
        assert isinstance(again, EnvironmentFactory) and again == factory
        local = again()
        expected = (local.reset(seed=5), local.act("left"), local.get_reward())
        local._close()
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
            assert pool.submit(_play_in_child, factory, 5).result(timeout=300) == expected
    ref = gym.make("arl/Sokoban-v0")
    _, info = ref.reset(seed=5)
    assert expected[0].startswith(info["raw_observation"])


@pytest.mark.parametrize("remote", [False, True])
def test_vision_env_frames_reach_trl_as_image_blocks(remote):
    """SokobanVision through the adapter: reset and act return TRL's content blocks, the
    env's exact frame as an image, then the text (in process and over a server)."""
    import numpy as np

    ref = gym.make("arl/SokobanVision-v0")
    obs, info = ref.reset(seed=4)
    with EnvServer({"arl/SokobanVision-v0": {}}) as srv:
        env = ArlgymTRLEnv("arl/SokobanVision-v0", server=srv.url if remote else None)
        for k, blocks in enumerate((env.reset(seed=4), env.act("left"))):
            if k == 1:
                obs, _, _, _, info = ref.step("<think></think><action>left</action>")
            image, text = blocks
            assert image["type"] == "image" and text["type"] == "text"
            np.testing.assert_array_equal(np.asarray(image["image"]), obs["image"])
            assert text["text"].startswith(info["raw_observation"])
        env._close()
    assert isinstance(ArlgymTRLEnv("arl/Sokoban-v0").reset(seed=4), str)  # text envs: text


# tiny-vl's shipped chat template renders images (<image>, which its Idefics3 processor expands)
# but no tool calls, which TRL's environment_factory requires ("The provided chat template does
# not support tool calling"); this one adds Qwen3's tool-call format, which TRL's qwen3 response
# template parses
VL_TOOL_TEMPLATE = (
    "{%- macro render(content) -%}{%- if content is string -%}{{- content -}}{%- else -%}"
    "{%- for part in content -%}{%- if part['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}{%- endmacro -%}"
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}"
    "{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- render(message['content']) }}"
    "{%- for call in message.get('tool_calls') or [] %}{%- set f = call['function'] %}"
    "{{- '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' + (f['arguments'] "
    "if f['arguments'] is string else (f['arguments'] | tojson)) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}"
    "{%- elif message['role'] == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' "
    "+ render(message['content']) + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + render(message['content']) "
    "+ '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def test_grpo_trainer_feeds_the_vision_env_frames_to_the_tiny_vlm(tmp_path, monkeypatch):
    """TRL's GRPOTrainer trains tiny-vl on SokobanVision through the adapter: the reset's image
    block becomes pixels the model reads, when sampling (its encoded images) and in the loss
    forward (pixel_values of the rendered frame)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template, supports_tool_calling

    from arlgym.models import load_model_and_tokenizer, load_processor

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model, _ = load_model_and_tokenizer("tiny-vl", seed=0)
    processor = load_processor("tiny-vl")
    assert not supports_tool_calling(processor)  # why the test brings its own template
    processor.chat_template = processor.tokenizer.chat_template = VL_TOOL_TEMPLATE
    processor.tokenizer.response_template = qwen3_template
    assert supports_tool_calling(processor)
    forwards: list[dict] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids")
        forwards.append({"grad": torch.is_grad_enabled(),
                         "images": 0 if ids is None else int(
                             (ids == model.config.image_token_id).sum()),
                         "pixel_values": kwargs.get("pixel_values"),
                         "encoded": kwargs.get("mm_encoder_outputs") is not None})

    model.register_forward_pre_hook(record, with_kwargs=True)
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                        per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=8, max_steps=1, logging_steps=1,
                        save_strategy="no", beta=0.0, disable_tqdm=True, seed=0,
                        dataloader_num_workers=0, log_level="error")
    trainer = GRPOTrainer(model=model, args=config, train_dataset=seed_dataset(4),
                          environment_factory=environment_factory("arl/SokobanVision-v0"),
                          processing_class=processor)
    trainer.train()
    assert any("rewards/ArlgymTRLEnv/mean" in row for row in trainer.state.log_history)
    tokens_per_image = processor.image_seq_len
    sampled = [f for f in forwards if not f["grad"] and f["images"]]
    assert sampled and all(f["images"] == 2 * tokens_per_image for f in sampled)
    assert all(f["encoded"] or f["pixel_values"] is not None for f in sampled)
    trained = [f for f in forwards if f["grad"]]
    assert trained and all(f["images"] == 2 * tokens_per_image for f in trained)
    pixels = trained[0]["pixel_values"]
    assert pixels is not None and pixels.shape[:2] == (2, 1) and pixels.abs().sum() > 0
