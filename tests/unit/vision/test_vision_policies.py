"""VLM policies: HF (token-in/token-out with image inputs), vLLM (multi-modal data) and OpenAI
(data URLs) on SokobanVision prompts."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from arlgym.errors import ConfigError
from arlgym.policies import SamplingParams

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_a_forward_pass_with_the_image(vl_policy, vision_prompts, temperature,
                                                              vision_forward_logprobs):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=12, seed=3)
    completions = vl_policy.generate(vision_prompts, sampling)  # left-padded batch (56/84 ids)
    assert len({len(c.prompt_token_ids) for c in completions}) == 2
    for c in completions:
        assert len(c.logprobs) == len(c.response_token_ids) > 0
        assert c.image_inputs["pixel_values"].shape[0] == 1
        expected = vision_forward_logprobs(vl_policy.model, c, temperature)
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=1e-5, rtol=0)


def test_the_image_changes_the_output(vl_policy, vision_prompts):
    """The model reads the image: another room with the same text gives other logits."""
    a, b = vision_prompts[0], vision_prompts[1]
    assert a["text"] == b["text"] and not np.array_equal(a["image"], b["image"])
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    ca, cb = vl_policy.generate([a, b], greedy)
    assert ca.prompt_token_ids == cb.prompt_token_ids
    assert not np.allclose(ca.logprobs, cb.logprobs)


def test_text_and_vision_prompts_in_one_call(vl_policy, vision_prompts):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=0)
    out = vl_policy.generate(["plain text prompt", vision_prompts[0]], sampling)
    assert out[0].image_inputs is None and out[1].image_inputs is not None
    alone = vl_policy.generate([vision_prompts[0]], sampling)[0]
    assert alone.prompt_token_ids == out[1].prompt_token_ids


def test_a_vlm_object_needs_its_processor(vl_policy):
    from arlgym.policies.hf import HFPolicy

    with pytest.raises(ConfigError, match="processor"):
        HFPolicy(vl_policy.model, tokenizer=vl_policy.tokenizer)


def test_text_model_reads_the_text_of_a_vision_prompt(vision_prompts):
    from arlgym.policies.hf import HFPolicy

    [c] = HFPolicy("tiny").generate(vision_prompts[:1], SamplingParams(max_new_tokens=3, seed=0))
    assert c.image_inputs is None and c.response_token_ids


# ------------------------------------------------------------------------------------ OpenAI
@pytest.fixture()
def recording_server():
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            payload = json.dumps({"choices": [{"message": {"content": "<think>x</think><action>up</action>"},
                                               "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", requests
    httpd.shutdown()


def test_openai_sends_the_image_as_a_png_data_url_in_place(recording_server, vision_prompts):
    from arlgym.policies import make_policy

    url, requests = recording_server
    prompt = vision_prompts[0]
    [c] = make_policy(f"openai:{url}#vlm").generate([prompt], SamplingParams(max_new_tokens=9))
    assert c.text.endswith("<action>up</action>")
    [content] = [m["content"] for m in requests[0]["messages"] if m["role"] == "user"]
    before, _, after = prompt["text"].partition("<image>")
    assert [p["type"] for p in content] == ["text", "image_url", "text"]
    assert content[0]["text"] == before and content[2]["text"] == after
    head, data = content[1]["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64"
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
    assert np.array_equal(decoded, prompt["image"])


# -------------------------------------------------------------------------------------- vLLM
def test_vllm_passes_the_image_as_multi_modal_data(monkeypatch, tmp_path, vision_prompts, vl_policy):
    """A recording stand-in of ``vllm.LLM``: the request carries our processor's prompt ids and
    the PIL image; the completion carries the image tensors the HF policy computes."""
    import arlgym.policies.vllm as vllm_policy
    from arlgym.models import model_path

    monkeypatch.setenv("ARLGYM_CACHE", str(tmp_path))
    seen: list = []

    class LLM:
        def __init__(self, model, **kwargs):
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(model)

        def get_tokenizer(self):
            return self._tok

        def generate(self, inputs, params, use_tqdm=False):
            seen.extend(inputs)
            sample = SimpleNamespace(token_ids=[5, 6], logprobs=[{5: SimpleNamespace(logprob=-0.5)},
                                                                {6: SimpleNamespace(logprob=-0.25)}],
                                     finish_reason="length")
            return [SimpleNamespace(outputs=[sample]) for _ in inputs]

    fake = SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setattr(vllm_policy, "import_vllm", lambda: fake)
    policy = vllm_policy.VLLMPolicy(str(model_path("tiny-vl")))
    out = policy.generate([vision_prompts[0], "text only"], SamplingParams(max_new_tokens=2))
    reference = vl_policy.generate([vision_prompts[0]], SamplingParams(max_new_tokens=1, seed=0))[0]
    assert seen[0]["prompt_token_ids"] == reference.prompt_token_ids == out[0].prompt_token_ids
    image = seen[0]["multi_modal_data"]["image"]
    assert isinstance(image, Image.Image) and np.array_equal(np.asarray(image), vision_prompts[0]["image"])
    assert "multi_modal_data" not in seen[1] and out[1].image_inputs is None
    torch.testing.assert_close(out[0].image_inputs["pixel_values"], reference.image_inputs["pixel_values"])
    assert out[0].logprobs == [-0.5, -0.25]
