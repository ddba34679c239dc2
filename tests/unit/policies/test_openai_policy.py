"""OpenAIPolicy against a real HTTP server on loopback that serves scripted replies,
including a slow reply (client timeout) and 500 errors, both retried."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from arlgym.errors import PolicyRequestError, UnknownPolicyError
from arlgym.policies import SamplingParams, make_policy


class _Script:
    """What the stub answers, in order: ("ok", text) | ("500",) | ("slow", seconds, text) |
    ("404",) | ("tool", arguments JSON, content): a reply calling the act tool."""

    def __init__(self):
        self.plan = []
        self.requests = []
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends the "slow" replies (set when the test ends)


@pytest.fixture()
def server():
    script = _Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with script.lock:
                script.requests.append((self.path, body, self.headers.get("Authorization")))
                step = script.plan.pop(0) if script.plan else ("ok", "<think>x</think><action>up</action>")
            if step[0] == "500":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"boom")
                return
            if step[0] == "404":
                self.send_response(404)
                self.end_headers()
                self.wfile.write(b"no such model")
                return
            if step[0] == "slow":
                script.release.wait(step[1])
            if step[0] == "tool":  # ("tool", arguments as sent, content): an act tool call
                message = {"role": "assistant", "content": step[2], "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "act", "arguments": step[1]}}]}
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": step[-1]}, "stop"
            payload = json.dumps({"choices": [{"message": message, "finish_reason": finish}],
                                  "usage": {"completion_tokens": 3}}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    script.release.set()
    httpd.shutdown()


def test_scripted_replies_and_request_shape(server):
    url, script = server
    script.plan = [("ok", "<think>a</think><action>left</action>")]
    policy = make_policy(f"openai:{url}#my-model", api_key="sk-test")
    [c] = policy.generate(["PROMPT"], SamplingParams(temperature=0.7, max_new_tokens=33, seed=5))
    assert c.text == "<think>a</think><action>left</action>" and c.finish_reason == "stop"
    path, body, auth = script.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["model"] == "my-model" and body["messages"] == [{"role": "user", "content": "PROMPT"}]
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.7, 33, 5)


def test_500_is_retried(server):
    url, script = server
    script.plan = [("500",), ("500",), ("ok", "third time")]
    policy = make_policy(f"openai:{url}#m", backoff=0.01)
    [c] = policy.generate(["p"])
    assert c.text == "third time" and c.meta["attempts"] == 3 and policy.attempts == 3


def test_timeout_is_retried(server):
    url, script = server
    # the slow reply waits until the test ends, so the first attempt surely times out; the
    # timeout leaves the prompt reply seconds to spare on a busy machine
    script.plan = [("slow", 60.0, "too late"), ("ok", "in time")]
    policy = make_policy(f"openai:{url}#m", timeout=2.0, backoff=0.01)
    [c] = policy.generate(["p"])
    assert c.text == "in time" and c.meta["attempts"] == 2 and len(script.requests) == 2


def test_gives_up_with_a_clear_error(server):
    url, script = server
    script.plan = [("500",)] * 3
    policy = make_policy(f"openai:{url}#m", max_retries=2, backoff=0.01)
    with pytest.raises(PolicyRequestError, match="failed 3 times; last error: HTTP 500"):
        policy.generate(["p"])


def test_client_errors_fail_fast(server):
    url, script = server
    script.plan = [("404",)]
    policy = make_policy(f"openai:{url}#m", backoff=0.01)
    with pytest.raises(PolicyRequestError, match="HTTP 404: no such model"):
        policy.generate(["p"])
    assert policy.attempts == 1


def test_batch_keeps_order_with_concurrency(server):
    url, script = server
    script.plan = []
    policy = make_policy(f"openai:{url}#m", max_concurrency=4)
    out = policy.generate([f"p{i}" for i in range(10)])
    assert len(out) == 10 and len(script.requests) == 10
    assert sorted(r[1]["messages"][0]["content"] for r in script.requests) == sorted(f"p{i}" for i in range(10))


def test_spec_errors():
    with pytest.raises(UnknownPolicyError, match="needs a model"):
        make_policy("openai:http://localhost:1/v1")
    with pytest.raises(UnknownPolicyError, match="valid specs"):
        make_policy("gpt4")


def test_tool_call_mode_sends_the_act_tool_and_reads_the_call(server):
    url, script = server
    script.plan = [("tool", '{"action": "left"}', "moving"),
                   ("tool", '{"response": "<think>a</think><action>up</action>"}', None),
                   ("ok", "<think>no tool</think><action>up</action>"),
                   ("tool", '{"action": "up", "response": "x"}', None),
                   ("tool", "not json", None)]
    policy = make_policy(f"openai-tools:{url}#m")
    assert policy.name == "openai-tools:m"
    got = [policy.generate([f"p{i}"])[0] for i in range(5)]
    assert [c.text for c in got] == ["<think></think><action>left</action>",
                                     "<think>a</think><action>up</action>", "", "", ""]
    assert [c.meta["tool_format"] for c in got] == ["action", "response", "no_tool_call",
                                                    "bad_arguments", "bad_arguments"]
    assert got[0].meta["content"] == "moving" and got[0].finish_reason == "tool_calls"
    assert got[2].meta["tool_call"] is None
    body = script.requests[0][1]
    [tool] = body["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "act"
    assert set(tool["function"]["parameters"]["properties"]) == {"response", "action"}
    assert body["tool_choice"] == "auto"
    assert body["messages"][0]["role"] == "system" and "`act`" in body["messages"][0]["content"]
    assert body["messages"][1] == {"role": "user", "content": "p0"}
    plain = make_policy(f"openai:{url}#m")  # the text mode sends no tools
    plain.generate(["q"])
    assert "tools" not in script.requests[-1][1]


def test_eval_through_tool_calls_applies_the_format_penalty_by_its_rules(server, tmp_path):
    """``arlgym eval --policy openai-tools:…`` on Sokoban: a move given as the tool's action is
    well-formed (no penalty) whatever the content says; a reply without a tool call and a
    malformed response argument are format errors; every step equals the in-process env
    stepped with the same text."""
    import gymnasium as gym

    import arlgym  # noqa: F401
    from arlgym.cli import main as arlgym_main

    url, script = server
    script.plan = [("tool", '{"action": "up"}', "I think <action>down</action>"),
                   ("ok", "<think>t</think><action>left</action>"),
                   ("tool", '{"response": "just right"}', None),
                   ("tool", '{"response": "<think>t</think><action>down</action>"}', None)]
    script.plan += [("tool", '{"action": "right"}', None)] * 20
    out = tmp_path / "e.jsonl"
    rc = arlgym_main(["eval", "--env", "arl/Sokoban-v0", "--policy", f"openai-tools:{url}#m",
                      "--episodes", "1", "--out", str(out), "--no-progress"])
    assert rc == 0
    [episode] = [json.loads(line) for line in out.read_text().splitlines()]
    steps = episode["steps"]
    assert [s["response"] for s in steps[:4]] == [
        "<think></think><action>up</action>", "", "just right",
        "<think>t</think><action>down</action>"]
    assert [s["format_valid"] for s in steps[:4]] == [True, False, False, True]
    assert steps[0]["format_penalty"] == 0 and steps[1]["format_penalty"] > 0
    assert steps[2]["format_penalty"] > 0 and steps[3]["format_penalty"] == 0
    env = gym.make("arl/Sokoban-v0")
    prompt, _ = env.reset(options={"task_id": episode["task_id"]})
    for s in steps:
        assert s["prompt"] == prompt
        prompt, reward, term, trunc, info = env.step(s["response"])
        assert s["step_reward"] == reward and s["format_valid"] == info["format_valid"]
    assert term or trunc
