"""The TIR Python sandbox: each code cell in its own isolated, resource-limited process.

ARLArena's sandbox is a FastAPI service that runs ``python3 main.py`` in a temp dir with a
wall-clock timeout — its Firejail isolation is commented out — and its client sleeps 2 s after
every call. Here there is no HTTP service and no sleep, and two modes:

* ``isolation="isolated"`` (the default; **fails closed**): cells are forked from a warm
  interpreter (numpy and sympy imported once) that lives inside a bubblewrap sandbox, each cell
  in fresh user/mount/PID/network/IPC/UTS namespaces with its own tmpfs ``/tmp``, its own
  ``/proc``, no capabilities and no host environment; see
  :mod:`~arlgym.envs.tir_math.isolation` and ``docs/security.md``. Where this is impossible
  (no ``bwrap``, user namespaces disabled) constructing the sandbox raises
  :class:`~arlgym.errors.MissingDependency` naming what is missing and how to install it.
* ``isolation="unisolated"`` (explicit opt-in): the old engines — forked from a warm
  interpreter on the host (``engine="fork"``) or a fresh ``python -I`` (``"subprocess"``), in a
  private temporary directory, without network where ``unshare -n`` works. It bounds runaway
  code; it is not a security boundary.

Both modes: resource limits set before the cell runs — CPU seconds, address space (with the
fork engine on top of what the warm interpreter maps), file size (output stops at the cap),
process count (isolated), no core dumps — and a wall-clock timeout that kills the cell with
every process it started. ``final_answer(x)`` is predefined and prints ``\\boxed{x}``, as in the
paper's TIR prompt. Nothing a cell does (replacing or deleting its output, lone surrogates in
its code, killing its own processes) can make :meth:`PythonSandbox.run` hang or raise.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from functools import cache
from numbers import Real
from pathlib import Path
from typing import Any

from arlgym.envs.tir_math import isolation as _iso
from arlgym.envs.tir_math.forkserver import ForkServer, ForkServerError
from arlgym.errors import ConfigError

__all__ = ["ExecutionResult", "PythonSandbox", "PRELUDE", "FINAL_ANSWER_SOURCE",
           "network_isolation_available", "fork_engine_available", "ISOLATION_MODES"]

#: ``final_answer(x)`` as every cell sees it (both engines): prints ``\\boxed{x}``.
FINAL_ANSWER_SOURCE = "def final_answer(answer):\n    print('\\\\boxed{' + str(answer) + '}')\n"

#: What a subprocess cell runs first: its resource limits (a dict literal filled in per sandbox)
#: and ``final_answer``. The fork engine applies the same limits in its child.
PRELUDE = """\
import resource as _r
for _k, _v in ({limits!r}).items():
    if _v is not None and hasattr(_r, _k):
        try:
            _r.setrlimit(getattr(_r, _k), (_v, _v))
        except (ValueError, OSError):
            pass
del _r, _k, _v
{final_answer}
"""

ISOLATION_MODES = ("isolated", "unisolated")

#: Memory the warm interpreter itself needs inside a server's cgroup, on top of ``memory_mb``.
SERVER_HEADROOM_MB = 384


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """What one cell did."""

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def feedback(self, max_chars: int = 512) -> str:
        """The text the agent sees: stdout, else the error's last line (as ARLArena shows it),
        truncated to ``max_chars``."""
        if self.stdout.strip():
            text = self.stdout.strip()
        elif self.timed_out:
            text = "interpreter timeout"
        elif self.stderr.strip():
            text = self.stderr.strip().splitlines()[-1]
        elif self.returncode is not None and self.returncode < 0:
            text = f"the process was killed ({_signal_name(-self.returncode)})"
        else:
            text = "(no output; use print() to see values)"
        if len(text) > max_chars:
            text = text[:max_chars] + "...(truncated)"
        return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@cache
def _unshare_prefix() -> tuple[str, ...] | None:
    """The command prefix that runs a process without network, or ``None`` if none works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ((unshare, "-n"), (unshare, "-Urn")):  # root; unprivileged user namespace
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def network_isolation_available() -> bool:
    """Whether unisolated cells can run in their own (empty) network namespace here."""
    return _unshare_prefix() is not None


@cache
def fork_engine_available() -> bool:
    """The fork engine needs ``os.fork`` and a working ``os.pidfd_open`` (Linux ≥ 5.3)."""
    if not (hasattr(os, "fork") and hasattr(os, "pidfd_open") and sys.platform.startswith("linux")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel
        return False
    return True


def _scratch_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


# --------------------------------------------------------------------------- shared servers
_LAUNCHER: tuple[int, queue.SimpleQueue] | None = None
_LAUNCHER_LOCK = threading.Lock()


def _in_launcher_thread(make: Any) -> Any:
    """Run ``make()`` in one long-lived daemon thread of this process. bwrap's
    ``--die-with-parent`` ties the sandbox to the *thread* that started it: started from a
    short-lived thread (a thread pool stepping envs), it would die with that thread."""
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None or _LAUNCHER[0] != os.getpid():  # (a forked child needs its own)
            jobs: queue.SimpleQueue = queue.SimpleQueue()

            def serve() -> None:
                while True:
                    job, result, done = jobs.get()
                    try:
                        result.append((True, job()))
                    except BaseException as e:  # handed back to the caller
                        result.append((False, e))
                    done.set()

            threading.Thread(target=serve, name="arlgym-sandbox-launcher", daemon=True).start()
            _LAUNCHER = (os.getpid(), jobs)
        jobs = _LAUNCHER[1]
    result: list[tuple[bool, Any]] = []
    done = threading.Event()
    jobs.put((make, result, done))
    done.wait()
    ok, value = result[0]
    if not ok:
        raise value
    return value

class _Server:
    """A fork server shared by the sandboxes of one process with the same settings, with the
    cgroup it runs in; stopped when its last sandbox closes (or at exit)."""

    def __init__(self, key: tuple, isolated: bool, python: str, memory_mb: int | None,
                 max_processes: int, prefix: tuple[str, ...]) -> None:
        self.key = key
        self.users: set[int] = set()
        self.cgroup = None
        if isolated:
            command = _iso.server_command(python, _iso.isolation_mode(python))
            if memory_mb is not None:
                self.cgroup = _iso.MemoryCgroup.create((memory_mb + SERVER_HEADROOM_MB) << 20,
                                                            max_processes + 16)
            if self.cgroup is not None:
                command = self.cgroup.wrap(command)
            env = dict(_iso.CELL_ENV)
        else:
            command = [*prefix, python, "-I", "-c"]
            env = dict(_iso.CELL_ENV, HOME=_scratch_root() or tempfile.gettempdir(),
                       TMPDIR=_scratch_root() or tempfile.gettempdir())
        try:
            binds = _iso.cell_binds(python) if isolated else ()
            self.client = _in_launcher_thread(lambda: ForkServer(command, env, FINAL_ANSWER_SOURCE,
                                                                 cell_binds=binds))
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise

    @property
    def alive(self) -> bool:
        return self.client.alive

    def close(self) -> None:
        self.client.close()
        if self.cgroup is not None:
            self.cgroup.remove()


_SERVERS: dict[tuple, _Server] = {}
_SERVERS_LOCK = threading.Lock()


@atexit.register
def _close_all_servers() -> None:
    with _SERVERS_LOCK:
        servers = [s for k, s in _SERVERS.items() if k[0] == os.getpid()]
        for server in servers:
            _SERVERS.pop(server.key, None)
    for server in servers:
        server.close()


def _check_number(name: str, value: Any, minimum: float, integer: bool = False,
                  none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and (
        not integer or float(value).is_integer()) and value >= minimum
    if not ok:
        kind = "an integer" if integer else "a number"
        extra = " (or None for no limit)" if none_ok else ""
        raise ConfigError(f"sandbox {name} must be {kind} >= {minimum}{extra}, got {value!r} "
                          f"({type(value).__name__})")


class PythonSandbox:
    """Runs code cells in fresh, isolated, resource-limited processes.

    Args:
        timeout: wall-clock seconds per cell (ARLArena: 3–10 s).
        memory_mb: memory limit in MiB (``None``: none): address space of every process of a
            cell and, where a memory cgroup is writable, the server's whole tree.
        max_output_bytes: stdout/stderr beyond this are cut off (file-size limit).
        python: the interpreter; the current one by default, so numpy/sympy of this
            environment are importable in cells.
        network: isolated cells never have network (``None``/``False``); ``True`` needs
            ``isolation="unisolated"``. Unisolated: ``False`` cuts cells off (an error where
            that is impossible), ``None`` (default) cuts them off where possible.
        engine: unisolated only: ``"fork"``, ``"subprocess"`` or ``"auto"`` (fork where
            available). Isolated cells are always forked inside the boundary.
        isolation: ``"isolated"`` (default, fails closed) or ``"unisolated"``; see the module
            docstring.
        max_processes: processes (and threads) a cell may run at once (isolated).
        tmp_mb: size of an isolated cell's private ``/tmp`` (and ``/dev/shm``) in MiB.
    """

    def __init__(self, timeout: float = 5.0, memory_mb: int | None = 2048,
                 max_output_bytes: int = 1 << 20, python: str | None = None,
                 network: bool | None = None, engine: str = "auto", isolation: str = "isolated",
                 max_processes: int = 32, tmp_mb: int = 64) -> None:
        _check_number("timeout", timeout, 0.01)
        _check_number("memory_mb", memory_mb, 64, integer=True, none_ok=True)
        _check_number("max_output_bytes", max_output_bytes, 256, integer=True)
        _check_number("max_processes", max_processes, 1, integer=True)
        _check_number("tmp_mb", tmp_mb, 1, integer=True)
        if network is not None and not isinstance(network, bool):
            raise ConfigError(f"sandbox network must be True, False or None, got {network!r} "
                              f"({type(network).__name__}); a string such as 'false' is not a boolean")
        if isolation not in ISOLATION_MODES:
            raise ConfigError(f"sandbox isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        if engine not in ("auto", "fork", "subprocess"):
            raise ConfigError(f"sandbox engine must be 'auto', 'fork' or 'subprocess', got {engine!r}")
        self.timeout = float(timeout)
        self.memory_mb = None if memory_mb is None else int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.max_processes = int(max_processes)
        self.tmp_mb = int(tmp_mb)
        self.isolation = isolation
        self.python = python or sys.executable
        if not isinstance(self.python, str) or (shutil.which(self.python) is None
                                                and not Path(self.python).is_file()):
            raise ConfigError(f"sandbox interpreter {self.python!r} not found")
        self.python = os.path.abspath(shutil.which(self.python) or self.python)
        self._server: _Server | None = None
        self._lock = threading.Lock()
        if isolation == "isolated":
            if network:
                raise ConfigError("isolated cells have no network; sandbox network=True needs "
                                  "isolation='unisolated' (an explicit opt-out of the boundary)")
            if engine == "subprocess":
                raise ConfigError("isolated cells are forked inside the boundary; engine='subprocess' "
                                  "needs isolation='unisolated'")
            _iso.require_isolation(self.python)  # fail closed, naming the fix
            self._prefix: tuple[str, ...] = ()
            self.engine = "fork"
            return
        prefix = None if network else _unshare_prefix()
        if network is False and prefix is None:
            raise ConfigError("network=False needs a network namespace (`unshare -n`), which this "
                              "machine does not allow; pass network=None to run cells with it")
        self._prefix = prefix or ()
        if engine == "fork" and not fork_engine_available():
            raise ConfigError("the fork engine needs Linux (os.fork and os.pidfd_open); use engine='subprocess'")
        self.engine = "fork" if engine == "auto" and fork_engine_available() else (
            "subprocess" if engine == "auto" else engine)

    @property
    def isolated(self) -> bool:
        return self.isolation == "isolated"

    @property
    def network_isolated(self) -> bool:
        return self.isolated or bool(self._prefix)

    def _limits(self) -> dict[str, int | None]:
        """The resource limits of a cell (CPU seconds, address-space and file-size bytes...)."""
        limits: dict[str, int | None] = {
            "RLIMIT_CPU": int(self.timeout) + 1,
            "RLIMIT_AS": None if self.memory_mb is None else self.memory_mb << 20,
            "RLIMIT_FSIZE": self.max_output_bytes, "RLIMIT_CORE": 0}
        if self.isolated:  # counted in the cell's own user namespace (see isolation.py)
            limits["RLIMIT_NPROC"] = self.max_processes
        return limits

    # ------------------------------------------------------------------ servers
    def _acquire_server(self) -> _Server:
        key = (os.getpid(), self.isolation, self.python, self._prefix,
               self.memory_mb if self.isolated else None, self.max_processes if self.isolated else None)
        with _SERVERS_LOCK:
            server = _SERVERS.get(key)
            if server is None or not server.alive:
                if server is not None:
                    server.close()
                server = _SERVERS[key] = _Server(key, self.isolated, self.python, self.memory_mb,
                                                 self.max_processes, self._prefix)
            server.users.add(id(self))
            self._server = server
            return server

    def close(self) -> None:
        """Release this sandbox's fork server; the last sandbox using it stops it (its running
        cells are killed; nothing of them survives)."""
        with _SERVERS_LOCK:
            server, self._server = self._server, None
            if server is None:
                return
            server.users.discard(id(self))
            if server.users or _SERVERS.get(server.key) is not server:
                if not server.users:
                    server.close()
                return
            _SERVERS.pop(server.key, None)
        server.close()

    @property
    def server_pid(self) -> int | None:
        """The host pid of the fork server (or its launcher) in use, if one is running."""
        server = self._server
        return server.client.pid if server is not None and server.alive else None

    # ------------------------------------------------------------------ running
    def run(self, code: str) -> ExecutionResult:
        """Run ``code`` as a complete script; never raises for anything the code does.

        Isolated, it raises :class:`ForkServerError` only when the boundary itself fails (the
        server cannot be restarted, or a cell cannot enter its namespaces) — never running the
        cell outside it."""
        code = code if isinstance(code, str) else str(code)
        started = time.perf_counter()
        if self.engine == "fork":
            try:
                reply = self._run_forked(code)
            except ForkServerError as e:
                if self.isolated:
                    raise
                warnings.warn(f"TIR sandbox: {e}; running cells as subprocesses from now on",
                              RuntimeWarning, stacklevel=2)
                self.engine = "subprocess"
                return self.run(code)
            return ExecutionResult(stdout=reply["stdout"], stderr=reply["stderr"],
                                   returncode=reply["returncode"], timed_out=bool(reply["timed_out"]),
                                   seconds=time.perf_counter() - started)
        return self._run_subprocess(code, started)

    def _request(self, code: str) -> dict[str, Any]:
        return {"code": code, "timeout": self.timeout, "limits": self._limits(),
                "max_output": self.max_output_bytes, "isolate": self.isolated, "tmp_mb": self.tmp_mb,
                "scratch": _scratch_root()}

    def _run_forked(self, code: str) -> dict[str, Any]:
        request = self._request(code)
        for attempt in range(2):  # a server killed between cells is replaced once
            server = self._server
            if server is None or not server.alive:
                server = self._acquire_server()
            try:
                reply = server.client.run(request)
            except ForkServerError:
                if attempt:
                    raise
                continue
            if reply.get("setup_error"):
                raise ForkServerError(f"a cell could not enter its sandbox: {reply['setup_error'][-500:]}")
            return reply
        raise AssertionError("unreachable")

    def _run_subprocess(self, code: str, started: float) -> ExecutionResult:
        workdir = tempfile.mkdtemp(prefix="arlgym-cell-", dir=_scratch_root())
        try:
            script = Path(workdir, "main.py")
            prelude = PRELUDE.format(limits=self._limits(), final_answer=FINAL_ANSWER_SOURCE)
            # a lone surrogate cannot be UTF-8: written as is, Python reports a SyntaxError
            script.write_bytes((prelude + code).encode("utf-8", "surrogatepass"))
            env = dict(_iso.CELL_ENV, HOME=workdir, TMPDIR=workdir)
            with open(Path(workdir, "stdout"), "wb") as out, open(Path(workdir, "stderr"), "wb") as err:
                proc = subprocess.Popen([*self._prefix, self.python, "-I", str(script)], cwd=workdir,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        env=env, start_new_session=True)
                try:
                    proc.wait(timeout=self.timeout)
                    returncode, timed_out = proc.returncode, False
                except subprocess.TimeoutExpired:
                    returncode, timed_out = None, True
                self._kill(proc)  # also what it left behind in its group
            return ExecutionResult(stdout=self._read(Path(workdir, "stdout")),
                                   stderr=self._read(Path(workdir, "stderr")),
                                   returncode=returncode, timed_out=timed_out,
                                   seconds=time.perf_counter() - started)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _read(self, path: Path) -> str:
        """The start of a cell's output file; a cell that replaced it (a FIFO, a directory) or
        deleted it reads as empty — never blocks, never raises."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return ""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            return os.read(fd, self.max_output_bytes).decode("utf-8", errors="replace")
        except OSError:
            return ""
        finally:
            os.close(fd)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the cell and anything it spawned
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()
