"""A fork server for code cells: one interpreter imports numpy and sympy once, then forks a
fresh child per cell (``shared/reference/offline-stack.md`` measured ~3 ms a cell this way
against ~10 ms for a bare ``python`` start and ~0.4 s once a cell imports sympy).

The server is a single-threaded ``select`` loop (so forking it is safe) that talks JSON lines
over its stdin/stdout, which it first moves off fds 0/1. A request names a working directory
that holds ``main.py``; the server forks, and the child starts its own session (so the whole
group can be killed), enters the directory, points fds 0/1/2 at ``/dev/null`` / ``stdout`` /
``stderr`` files there, reseeds ``random``/``numpy.random``, sets the resource limits (address
space counted on top of what the preloaded interpreter already maps) and runs the cell with
``final_answer`` predefined. The server replies when the child exits or, past the wall-clock
deadline, after killing its process group — and kills the group after a normal exit as well,
so nothing a cell started outlives it. Several cells run at once; the client matches replies
by id. If the server dies, the client says so and the sandbox falls back to one subprocess
per cell.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

__all__ = ["ForkServer", "SERVER_CODE", "ForkServerError"]


class ForkServerError(RuntimeError):
    """The fork server is gone (crashed, killed) or did not answer."""


SERVER_CODE = r'''
import json, os, select, signal, sys, time
for _name in PRELOAD:
    try:
        __import__(_name)
    except Exception:
        pass

proto_in = os.dup(0)
proto_out = os.fdopen(os.dup(1), "w", buffering=1)
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)


def child(req):
    os.setsid()
    os.chdir(req["workdir"])
    os.environ["HOME"] = os.environ["TMPDIR"] = req["workdir"]
    out = os.open("stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open("stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(_null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (out, err, proto_in, proto_out.fileno()):
        try:
            os.close(fd)
        except OSError:
            pass
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    import resource
    limits = dict(req["limits"])
    if limits.get("RLIMIT_AS") is not None:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limits["RLIMIT_AS"] += mapped
    for key, value in limits.items():
        if value is not None and hasattr(resource, key):
            try:
                resource.setrlimit(getattr(resource, key), (value, value))
            except (ValueError, OSError):
                pass
    code = 0
    try:
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(FINAL_ANSWER, "<prelude>", "exec"), namespace)
        with open("main.py", encoding="utf-8") as f:
            source = f.read()
        sys.argv = ["main.py"]
        exec(compile(source, "main.py", "exec"), namespace)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


running = {}  # pidfd -> (pid, request id, deadline)


def finish(fd, status, timed_out):
    pid, rid, _ = running.pop(fd)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever the cell left behind
    except OSError:
        pass
    if status is None:
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    code = None if timed_out else os.waitstatus_to_exitcode(status)
    proto_out.write(json.dumps({"id": rid, "returncode": code, "timed_out": timed_out}) + "\n")


buffer = b""
while True:
    now = time.monotonic()
    wait = min((d for _, _, d in running.values()), default=None)
    r, _, _ = select.select([proto_in, *running], [], [], None if wait is None else max(0.0, wait - now))
    for fd in r:
        if fd == proto_in:
            chunk = os.read(proto_in, 1 << 16)
            if not chunk:  # the client is gone
                for fd2 in list(running):
                    finish(fd2, None, True)
                os._exit(0)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    child(req)
                running[os.pidfd_open(pid)] = (pid, req["id"], time.monotonic() + req["timeout"])
        elif fd in running:
            pid = running[fd][0]
            _, status = os.waitpid(pid, 0)
            finish(fd, status, False)
    now = time.monotonic()
    for fd, (_, _, deadline) in list(running.items()):
        if deadline <= now:
            finish(fd, None, True)
'''


class ForkServer:
    """Client of one fork-server process (see the module docstring); thread-safe."""

    def __init__(self, command_prefix: tuple[str, ...], python: str, env: dict[str, str],
                 final_answer_source: str, preload: tuple[str, ...] = ("numpy", "sympy")) -> None:
        code = f"PRELOAD = {list(preload)!r}\nFINAL_ANSWER = {final_answer_source!r}\n" + SERVER_CODE
        self._proc = subprocess.Popen([*command_prefix, python, "-I", "-c", code],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        self._write_lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._next_id = 0
        self._reader = threading.Thread(target=self._read_replies, name="arlgym-forkserver",
                                        daemon=True)
        self._reader.start()
        atexit.register(self.close)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def _read_replies(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            reply = json.loads(line)
            waiter = self._waiting.pop(reply["id"], None)
            if waiter is not None:
                waiter[1].update(reply)
                waiter[0].set()
        for event, _ in list(self._waiting.values()):  # the server died: wake everyone
            event.set()

    def run(self, workdir: Path, timeout: float, limits: dict[str, int | None]) -> tuple[int | None, bool]:
        """Run ``workdir/main.py``; returns (exit code or ``None``, timed out)."""
        event, reply = threading.Event(), {}
        with self._write_lock:
            if not self.alive:
                raise ForkServerError("the fork server has exited")
            self._next_id += 1
            rid = self._next_id
            self._waiting[rid] = (event, reply)
            request = {"id": rid, "workdir": str(workdir), "timeout": timeout, "limits": limits}
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                self._waiting.pop(rid, None)
                raise ForkServerError("the fork server has exited") from e
        if not event.wait(timeout + 30) or "returncode" not in reply:
            self._waiting.pop(rid, None)
            raise ForkServerError("the fork server did not answer")
        return reply["returncode"], bool(reply["timed_out"])

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()  # the server kills its running cells and exits
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
