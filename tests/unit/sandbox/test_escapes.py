"""Escape suite of the TIR sandbox (issue 15; threat model in docs/security.md).

Each test runs what a policy could write in a code cell to get out of it, and asserts both what
the env returned (the observation the model would see) and that the host was not touched: no
process left, no file written, no connection made, the env and its fork server alive and
answering. CI runs it as root (as most GPU containers run); ``test_as_an_unprivileged_user``
re-runs the core checks as uid 65534.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from arlgym.core.procfs import alive as _alive
from arlgym.core.procfs import children as _children
from arlgym.core.procfs import descendants as _descendants
from arlgym.core.procfs import stat_fields as _stat
from arlgym.envs.tir_math import isolation
from arlgym.envs.tir_math.env import TIRMathEnv
from arlgym.envs.tir_math.sandbox import PythonSandbox

pytestmark = pytest.mark.skipif(
    isolation.isolation_problem(sys.executable) is not None,
    reason=f"this machine cannot isolate cells ({isolation.isolation_problem(sys.executable)}); "
           "CI installs bubblewrap (.ci/run)")

MARKER = f"arlgym-escape-{uuid.uuid4().hex[:8]}"
SECRET = f"sk-{uuid.uuid4().hex}"
os.environ["ARLGYM_ESCAPE_SECRET"] = SECRET  # an API key exported to the trainer
PROJECT = Path(__file__).resolve().parents[3]
ENV_PID = os.getpid()


@pytest.fixture(scope="module")
def box():
    sandbox = PythonSandbox(timeout=3.0, memory_mb=256, max_output_bytes=1 << 16, max_processes=32)
    sandbox.run("print(0)")  # the server is up before the census of processes
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def listener():
    """A host service on loopback that no cell may reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _is_server(pid: int) -> bool:
    """A fork server's interpreter (not bwrap, whose arguments hold the same code)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"python" in os.path.basename(argv[0]) and any(b"PRELOAD" in a for a in argv)


def _settled(before: set[int]) -> bool:
    """Nothing below the env but what was there before, and per server at most one cell (its
    spare, forked ahead of the next request)."""
    now = _descendants(ENV_PID)
    spares: set[int] = set()
    for server in (p for p in now if _is_server(p)):
        children = _children(server)
        if len(children) > 1:
            return False
        spares |= children
    return now - spares <= before | spares


def _census(before: set[int]) -> str:
    """What a failed _settled saw: every new process below the env with its parent, state and
    command line, and each fork server's children."""
    rows = []
    for pid in sorted(_descendants(ENV_PID) - before):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
        except OSError:
            cmd = "(gone)"
        fields = _stat(pid)
        rows.append(f"{pid} state={fields[0] if fields else '?'} ppid={fields[1] if fields else '?'} {cmd!r}")
    servers = {p: sorted(_children(p)) for p in _descendants(ENV_PID) if _is_server(p)}
    return f"new: {rows}; servers and their children: {servers}"


def _marked_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if MARKER.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and _alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _marked_files() -> list[str]:
    places = [Path("/tmp"), Path("/dev/shm"), Path.home(), PROJECT, Path(sys.prefix), Path("/etc")]
    return [str(p / name) for p in places if p.is_dir() for name in os.listdir(p)
            if MARKER in name or name.startswith("arlgym-cell-")]


@pytest.fixture(autouse=True)
def host_unaffected(box, listener):
    """After every test: no new process below the env, no marked process anywhere, no file, no
    connection to the host service; the fork server alive, not stopped, still answering."""
    server = box.server_pid
    before = _descendants(ENV_PID)
    yield
    # The reply comes as soon as a cell's code has finished; the server then kills the cell's
    # PID namespace, which the kernel tears down asynchronously: allow it a few seconds.
    # (A server forks the next cell ahead of its request: at most one child of a server, the
    # spare, may be new.)
    # The verdict is the last census the wait took, not a new one: a server forking its next
    # spare has, for a moment, a process below it that is neither (a second look right after a
    # settled census caught that moment in ~1 run of 7 on a busy machine; the census printed
    # after such a failure found nothing left). A real survivor fails every census for 10 s.
    deadline = time.monotonic() + 10
    settled = _settled(before)
    while time.monotonic() < deadline and (not settled or _marked_processes()):
        time.sleep(0.1)
        settled = _settled(before)
    assert settled, f"a process survived its cell: {_census(before)}"
    assert _marked_processes() == []
    assert _marked_files() == []
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert box.server_pid == server, "the fork server was replaced (killed?)"
    fields = _stat(server)
    assert fields is not None, "the fork server is gone"
    state = fields[0]
    assert state in "RSD", f"the fork server is in state {state}"
    assert box.run("print(7 * 6)").stdout.strip() == "42"


def _json(box: PythonSandbox, code: str) -> dict:
    result = box.run(code)
    assert result.ok, result
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_host_network_namespace_cannot_be_reentered(box, listener):
    port = listener.getsockname()[1]
    seen = _json(box, f"""
import ctypes, json, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
entered = []
for pid in ['self', '1', '{ENV_PID}', '{box.server_pid}']:
    try:
        fd = os.open('/proc/%s/ns/net' % pid, os.O_RDONLY)
    except OSError as e:
        continue
    if libc.setns(fd, 0x40000000) == 0:
        entered.append(pid)
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=1)
    connect = 'connected'
except OSError as e:
    connect = e.errno
nsenter = subprocess.run(['nsenter', '-t', '{ENV_PID}', '-n', 'true'], capture_output=True).returncode
print(json.dumps({{'entered': entered, 'connect': connect, 'nsenter': nsenter,
                  'env_ns_visible': os.path.exists('/proc/{ENV_PID}/ns/net')}}))
""")
    assert seen == {"entered": [], "connect": 101, "nsenter": 1, "env_ns_visible": False}


def test_other_processes_environment_and_command_lines_are_unreadable(box):
    seen = _json(box, f"""
import json, os
texts, pids = [], sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
for pid in ['self', *map(str, pids), '{ENV_PID}', '{box.server_pid}']:
    for name in ('environ', 'cmdline'):
        try:
            texts.append(open('/proc/%s/%s' % (pid, name), 'rb').read().decode(errors='replace'))
        except OSError:
            pass
print(json.dumps({{'pids': pids, 'leak': any({SECRET!r} in t or 'ARLGYM_ESCAPE' in t for t in texts),
                  'env': sorted(os.environ), 'uid': os.getuid(),
                  'cap': open('/proc/self/status').read().split('CapEff:')[1].split()[0]}}))
""")
    assert seen["pids"] == [1]  # only the cell itself
    assert not seen["leak"]
    assert set(seen["env"]) <= set(isolation.CELL_ENV) | {"PWD"}
    if isolation.isolation_mode(sys.executable) == "user":
        assert seen["uid"] == 1000  # in its own user namespace (65534 on the host)
    else:  # the privileged fallback: a host uid of its own
        assert seen["uid"] >= 3_000_000_000
    assert seen["cap"] == "0" * 16


def test_host_files_cannot_be_written_or_read(box, tmp_path):
    secret_file = tmp_path / "api_key.txt"
    secret_file.write_text(SECRET)
    targets = [Path.home() / MARKER, Path("/tmp") / MARKER, PROJECT / MARKER, Path("/dev/shm") / MARKER,
               Path(sys.prefix) / MARKER, Path("/etc") / MARKER, Path("/usr") / MARKER]
    seen = _json(box, f"""
import json
writes, reads = {{}}, {{}}
for path in {[str(t) for t in targets]!r}:
    try:
        open(path, 'w').write('owned')
        writes[path] = 'written'
    except OSError as e:
        writes[path] = type(e).__name__
for path in {[str(secret_file), str(PROJECT / "README.md"), "/etc/shadow", str(Path.home())]!r}:
    try:
        reads[path] = open(path).read()[:20]
    except OSError as e:
        reads[path] = type(e).__name__
print(json.dumps({{'writes': writes, 'reads': reads}}))
""")
    # /tmp and /dev/shm are the cell's own tmpfs: writable, and gone with the cell
    for path, outcome in seen["writes"].items():
        if path.startswith(("/tmp/", "/dev/shm/")):
            assert outcome == "written"
        else:
            assert outcome in ("OSError", "PermissionError", "FileNotFoundError"), (path, outcome)
    assert all(outcome in ("FileNotFoundError", "PermissionError", "IsADirectoryError")
               for outcome in seen["reads"].values()), seen["reads"]
    assert not any(t.exists() for t in targets)


@pytest.mark.parametrize("mode", ["user", "root"])
def test_a_venv_under_tmp_is_seen_read_only_and_nothing_else_of_tmp(mode, monkeypatch):
    """A venv under /tmp (a checkout there): the server binds only that venv of the host's /tmp,
    and each cell binds it again over its private tmpfs, read-only. A secret file beside the
    venv stays invisible, the venv cannot be written, a stdlib module the warm server had not
    imported still loads."""
    import tempfile
    import venv

    if mode == "root" and os.geteuid() != 0:
        pytest.skip("the privileged fallback mode is for root")
    monkeypatch.setenv(isolation.MODE_VARIABLE, mode)
    monkeypatch.setattr(isolation, "_PROBED", {})
    monkeypatch.setattr(isolation, "_MODES", {})
    top = Path(tempfile.mkdtemp(prefix="arlgym-venv-", dir="/tmp"))
    try:
        (top / "api_key.txt").write_text(SECRET)
        venv.create(top / "venv", symlinks=True, with_pip=False)
        python = str(top / "venv" / "bin" / "python")
        assert isolation.isolation_problem(python) is None
        assert isolation.isolation_mode(python) == mode
        assert isolation.cell_binds(python) == (str(top / "venv"),)
        sandbox = PythonSandbox(python=python, timeout=10.0, memory_mb=256)
        try:
            for _ in range(2):  # the first cell and a spare forked ahead of its request
                seen = _json(sandbox, f"""
import json, os, sys
import decimal, statistics  # not imported by the warm server: read from the stdlib now
try:
    open({str(top / "venv" / MARKER)!r}, "w"); venv_write = "written"
except OSError as e:
    venv_write = type(e).__name__
try:
    secret = open({str(top / "api_key.txt")!r}).read()
except OSError as e:
    secret = type(e).__name__
print(json.dumps({{"prefix": sys.prefix, "beside": sorted(os.listdir({str(top)!r})), "secret": secret,
                  "venv_write": venv_write, "mean": float(statistics.mean([1, 2])),
                  "tmp": [d for d in os.listdir("/tmp")]}}))
""")
                assert seen["prefix"] == str(top / "venv")
                assert seen["beside"] == ["venv"] and seen["secret"] == "FileNotFoundError", seen
                assert seen["venv_write"] in ("OSError", "PermissionError"), seen
                assert seen["mean"] == 1.5 and seen["tmp"] == [top.name]
        finally:
            sandbox.close()
        assert not (top / "venv" / MARKER).exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_env_process_and_the_fork_server_cannot_be_signalled(box):
    seen = _json(box, f"""
import json, os, signal
outcome = {{}}
for pid in ({ENV_PID}, {box.server_pid}, 2, 3):
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            outcome['%d/%d' % (pid, sig)] = 'sent'
        except OSError as e:
            outcome['%d/%d' % (pid, sig)] = type(e).__name__
for pid in range(2, 300):
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)  # every process this cell can see (only its own)
    outcome['-1'] = 'sent'
except OSError as e:
    outcome['-1'] = type(e).__name__
print(json.dumps({{'outcome': outcome, 'ppid': os.getppid()}}))
""")
    assert seen["ppid"] == 0  # its parent is outside its PID namespace
    assert set(seen["outcome"].values()) <= {"ProcessLookupError"}, seen
    # (the autouse check: the server is alive, not stopped, and answers)


_DAEMONS = f"""
import os, subprocess, sys
for i in range(2):  # classic double fork + setsid daemons
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', '{MARKER}'])
        os._exit(0)
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{MARKER}'],
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
import time; time.sleep(0.3)
print('spawned', flush=True)
"""


@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_daemons_die_with_their_cell(box, ending):
    # same server; a timeout that leaves a loaded machine time to start the daemons first
    sandbox = PythonSandbox(timeout=4.0 if ending == "timeout" else 30.0, memory_mb=256,
                            max_output_bytes=1 << 16)
    result = sandbox.run(_DAEMONS + ("while True: pass\n" if ending == "timeout" else ""))
    assert result.stdout.strip() == "spawned"
    assert result.timed_out is (ending == "timeout")
    # (the autouse check: no process with the marker anywhere on the host)


def test_a_fork_bomb_stops_at_the_process_limit(box):
    patient = PythonSandbox(timeout=30.0, memory_mb=256, max_output_bytes=1 << 16)  # same server
    result = patient.run("""
import os, time
children = 0
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError as e:
    print('stopped after', children, type(e).__name__, flush=True)
""")
    words = result.stdout.split()
    assert words[:2] == ["stopped", "after"] and int(words[2]) < 32 and words[3] == "BlockingIOError"


def test_memory_limit_holds_for_several_processes(box):
    cgroup = box._server.cgroup
    code = """
import os, time
pids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(200 << 20)
        block[::4096] = b'x' * len(block[::4096])  # touch every page: 4 x 200 MiB > 256 MiB
        time.sleep(1.5)
        os._exit(0)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
print('children', codes, flush=True)
"""
    if cgroup is None:
        pytest.skip("no writable memory cgroup on this machine: the limit holds per process "
                    "(RLIMIT_AS) times max_processes (docs/security.md)")
    patient = PythonSandbox(timeout=20.0, memory_mb=256, max_output_bytes=1 << 16)  # same server
    result = patient.run(code)
    killed = "-9" in result.stdout or result.returncode == -9
    assert killed, result  # the OOM killer of the server's cgroup took at least one of them
    peak_file = "memory.max_usage_in_bytes" if cgroup.version == "v1" else "memory.peak"
    peak = Path(cgroup.directory, peak_file)
    if peak.exists():
        assert int(peak.read_text()) <= cgroup.limit_bytes


@pytest.mark.parametrize("mode", [("isolated", "fork"), ("unisolated", "fork"), ("unisolated", "subprocess")],
                         ids=["isolated", "unisolated-fork", "unisolated-subprocess"])
def test_output_tricks_and_bad_text_cannot_hang_or_crash_step(box, mode):
    sandbox = PythonSandbox(timeout=2.0, memory_mb=256, isolation=mode[0], engine=mode[1])
    tricks = {
        "fifo": "import os\nprint('before', flush=True)\nfor name in ('stdout', 'stderr'):\n"
                "    try:\n        os.unlink(name)\n    except OSError:\n        pass\n"
                "    os.mkfifo(name)\nos.mkfifo('pipe')\nos.dup2(os.open('pipe', os.O_RDWR), 1)\nprint('after')",
        "delete": "import os\nprint('before', flush=True)\nfor name in ('stdout', 'stderr', '.'):\n"
                  "    try:\n        os.unlink(name)\n    except OSError:\n        pass",
        "close": "import os\nprint('before', flush=True)\nos.close(1)\nos.close(2)",
        "surrogate_code": "x = '\ud800'\nprint('ran')",
        "surrogate_output": "print(chr(0xd800))",
        "binary": "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00bad')",
    }
    try:
        for name, code in tricks.items():
            started = time.perf_counter()
            result = sandbox.run(code)  # must not raise
            assert time.perf_counter() - started < 2.0 * 10, name  # a hang, not a busy machine
            assert isinstance(result.feedback(), str), name
            if name in ("fifo", "delete", "close") and mode[1] == "fork":
                assert result.stdout.startswith("before"), (name, result)
    finally:
        sandbox.close()


def test_two_envs_cannot_read_or_overwrite_each_others_cells(box):
    """Two rollouts of one group, at the same time, on the same fork server: B tries every way
    to make A 'answer' 31337 (A's reward would be 1) and to read A's code."""
    problem = {"question": "What is 31337?", "answer": "31337"}
    env_a, env_b = TIRMathEnv(sandbox_timeout=5.0), TIRMathEnv(sandbox_timeout=5.0)
    for env in (env_a, env_b):
        env.reset(seed=0, options={"problem": problem})
    code_a = ("import os, time\nSECRET_CODE = 'a-private-plan'\nopen('/tmp/answer.txt', 'w').write('mine')\n"
              "open('/dev/shm/answer', 'w').write('mine')\ntime.sleep(1.5)\n"
              "print('A sees', sorted(os.listdir('/tmp')), open('/tmp/answer.txt').read())")
    code_b = """
import glob, os, socket
found, wrote = [], []
for pattern in ('/tmp/*', '/dev/shm/*', '/dev/shm/arlgym-cell-*/*', '/proc/*/fd/*', '/proc/*/cwd/*'):
    for path in glob.glob(pattern):
        if path.startswith(('/proc/1/', '/proc/self/', '/proc/thread-self/')):  # this cell's own
            continue
        try:
            text = open(path, errors='replace').read(1 << 16)
            if 'a-private-plan' in text or 'mine' in text:
                found.append(path)
        except OSError:
            pass
        try:
            open(path, 'a').write('\\\\boxed{31337}')
            wrote.append(path)
        except OSError:
            pass
for pid in os.listdir('/proc'):
    if pid.isdigit() and pid != '1':
        found.append('pid ' + pid)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('\\0arlgym-a')
    found.append('abstract socket')
except OSError:
    pass
print('B found', found, 'wrote', wrote)
"""
    results = {}

    def play(name, env, code):
        results[name] = env.step(f"Let me compute.\n```python\n{code}\n```")

    thread = threading.Thread(target=play, args=("a", env_a, code_a))
    thread.start()
    time.sleep(0.4)
    play("b", env_b, code_b)
    thread.join()
    obs_a, reward_a, done_a, _, info_a = results["a"]
    obs_b, _, _, _, _ = results["b"]
    assert env_a.raw_observation == "A sees ['answer.txt'] mine", env_a.raw_observation
    assert reward_a == 0.0 and not done_a and env_a.final_answer is None
    assert env_b.raw_observation == "B found [] wrote []", env_b.raw_observation
    for env in (env_a, env_b):
        env.close()


def test_nothing_carries_over_to_the_next_cell_or_episode(box):
    """One env, one server: what a cell leaves (a global, an environment variable, files in
    /tmp and /dev/shm, a daemon) is not there for the next cell nor in the next episode."""
    problem = {"question": "What is 1?", "answer": "1"}
    leave = ("import os, subprocess, sys\nLEFT = 1\nos.environ['LEFT'] = '1'\n"
             "open('/tmp/left', 'w').write('x')\nopen('/dev/shm/left', 'w').write('x')\n"
             f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {MARKER!r}], "
             "start_new_session=True)\nprint('left')")
    look = ("import json, os\nprint(json.dumps({'global': 'LEFT' in globals(), 'env': 'LEFT' in os.environ, "
            "'tmp': sorted(os.listdir('/tmp')), 'shm': sorted(os.listdir('/dev/shm')), "
            "'pids': sorted(p for p in os.listdir('/proc') if p.isdigit())}))")
    env = TIRMathEnv(sandbox_timeout=5.0)
    seen = []
    try:
        env.reset(seed=0, options={"problem": problem})
        env.step(f"```python\n{leave}\n```")
        assert env.raw_observation == "left"
        env.step(f"```python\n{look}\n```")  # the next cell of the same episode
        seen.append(json.loads(env.raw_observation))
        env.reset(seed=1, options={"problem": problem})  # the next episode
        env.step(f"```python\n{look}\n```")
        seen.append(json.loads(env.raw_observation))
    finally:
        env.close()
    clean = {"global": False, "env": False, "tmp": [], "shm": [], "pids": ["1"]}
    assert seen == [clean, clean], seen
    # (the autouse check: the daemon is gone, no file is left on the host)


def test_close_stops_the_server_and_leaves_nothing():
    """Issue 19: env.close() stops its fork server; nothing survives (own server: 512 MiB)."""
    env = TIRMathEnv(sandbox_memory_mb=512)
    env.reset(seed=0)
    env.step("```python\nprint(1)\n```")
    server = env.sandbox.server_pid
    tree = {server, *_descendants(server)}
    cgroup = env.sandbox._server.cgroup
    env.close()
    time.sleep(0.3)
    assert not any(_alive(pid) for pid in tree)
    assert cgroup is None or not Path(cgroup.directory).exists()
    assert env.sandbox.server_pid is None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to become an unprivileged user (setpriv)")
def test_as_an_unprivileged_user(listener):
    """The core checks again, the env itself running as uid 65534 (no setpriv in the launch:
    bwrap runs unprivileged). The interpreter may live where uid 65534 cannot read it (a pyenv
    under /root), and so may the project (a clone under /root, mode 0700): like the launcher,
    the test stages both in a private mount namespace first, at /mnt<path>."""
    port = listener.getsockname()[1]
    script = (f"""
import json, os, sys
from arlgym.envs.tir_math.sandbox import PythonSandbox
box = PythonSandbox(timeout=3.0, memory_mb=256)
code = '''
import json, os, socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1); net = "connected"
except OSError as e:
    net = e.errno
try:
    open("{PROJECT / MARKER}", "w"); wrote = True
except OSError:
    wrote = False
print(json.dumps({{"uid": os.getuid(), "pids": os.listdir("/proc").count("1"), "net": net, "wrote": wrote,
                  "env": sorted(os.environ)}}))
'''
result = box.run(code)
print(json.dumps({{"euid": os.geteuid(), "cell": result.stdout.strip(), "err": result.stderr[-300:]}}))
box.close()
""")
    binds = isolation._minimal_binds(isolation._interpreter_paths(sys.executable))
    stage = ["mount -t tmpfs -o mode=755 stage /mnt"] + [
        f"mkdir -p /mnt{p} && mount --bind {p} /mnt{p}"
        for p in [*binds, os.path.realpath(PROJECT)]]
    # uid 65534 runs the staged interpreter and imports the staged project: both readable
    # wherever they live (their real parents may be closed to uid 65534)
    python = "/mnt" + os.path.realpath(sys.executable)
    site = [p for p in sys.path if p.endswith("site-packages")]
    project = "/mnt" + os.path.realpath(PROJECT)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join([project, *("/mnt" + s for s in site)]),
           "OMP_NUM_THREADS": "1", "HOME": "/tmp"}
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               " && ".join(stage) + ' && exec "$@"', "stage", "setpriv", "--reuid=65534",
               "--regid=65534", "--clear-groups", "--", python, "-c", script]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd="/")
    if "cannot isolate" in out.stderr:
        pytest.skip(f"unprivileged user namespaces are not allowed here: {out.stderr[-300:]}")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["euid"] == 65534
    cell = json.loads(report["cell"])
    assert cell["uid"] == 1000 and cell["pids"] == 1 and cell["net"] == 101 and not cell["wrote"]
    assert set(cell["env"]) <= set(isolation.CELL_ENV) | {"PWD"}
    assert not (PROJECT / MARKER).exists()


_PRIVILEGED_CELL = """
import json, os, socket, subprocess, sys
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=1); net = "connected"
except OSError as e:
    net = e.errno
wrote = []
for path in PATHS:
    try:
        open(path, "w"); wrote.append(path)
    except OSError:
        pass
killed = []
for pid in (ENV_PID, 2, 3):
    try:
        os.kill(pid, 9); killed.append(pid)
    except OSError:
        pass
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", MARKER], start_new_session=True)
status = open("/proc/self/status").read()
print(json.dumps({"pid": os.getpid(), "uid": os.getuid(), "net": net, "wrote": wrote, "killed": killed,
                  "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()), "env": sorted(os.environ),
                  "cap": status.split("CapEff:")[1].split()[0], "bnd": status.split("CapBnd:")[1].split()[0],
                  "secret": SECRET in open("/proc/1/environ").read()}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the privileged fallback mode is for root")
def test_privileged_fallback_mode(listener):
    """Root on a machine without unprivileged user namespaces: bwrap runs privileged and each
    cell becomes a host uid of its own (ARLGYM_SANDBOX_MODE=root pins the mode here)."""
    cell = (_PRIVILEGED_CELL.replace("PORT", str(listener.getsockname()[1]))
            .replace("PATHS", repr((str(PROJECT / MARKER), str(Path.home() / MARKER), f"/etc/{MARKER}")))
            .replace("ENV_PID", str(ENV_PID)).replace("MARKER", repr(MARKER)).replace("SECRET", repr(SECRET)))
    script = (
        "import json, sys\n"
        "from arlgym.envs.tir_math import isolation\n"
        "from arlgym.envs.tir_math.sandbox import PythonSandbox\n"
        "assert isolation.isolation_mode(sys.executable) == 'root', isolation.isolation_problem(sys.executable)\n"
        "box = PythonSandbox(timeout=5.0, memory_mb=256)\n"
        f"first, second = box.run({cell!r}), box.run({cell!r})\n"
        "box.close()\n"
        "print(json.dumps({'first': first.stdout.strip(), 'err': first.stderr[-500:], 'second': second.stdout.strip()}))\n")
    env = dict(os.environ, ARLGYM_SANDBOX_MODE="root", PYTHONPATH=str(PROJECT))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    first, second = json.loads(report["first"]), json.loads(report["second"])
    assert first["pid"] == 1 and first["pids"][0] == "1", first
    assert first["uid"] >= 3_000_000_000 and second["uid"] != first["uid"]  # one uid per cell
    assert first["cap"] == first["bnd"] == "0" * 16
    assert first["net"] == 101 and first["wrote"] == [] and first["killed"] == []
    assert set(first["env"]) <= set(isolation.CELL_ENV) | {"PWD"} and not first["secret"]
