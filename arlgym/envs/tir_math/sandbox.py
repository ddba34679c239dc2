"""A local Python sandbox for tool-integrated reasoning: a fresh process per code cell.

ARLArena's sandbox is a FastAPI service that runs ``python3 main.py`` in a temp dir with a
wall-clock timeout — its Firejail isolation is commented out — and its client sleeps 2 s after
every call. Here a cell runs in a fresh process, with no HTTP service and no sleep — forked from
a warm interpreter that has numpy and sympy imported (``engine="fork"``, the default on Linux;
:mod:`~arlgym.envs.tir_math.forkserver`) or a new ``python -I`` (``engine="subprocess"``):

* a private temporary working directory (on ``/dev/shm`` when there is one), removed afterwards;
* isolated mode (``python -I``: no user site, no ``PYTHON*`` variables) and a stripped
  environment (no proxies, one BLAS thread);
* resource limits set before the cell runs: CPU seconds, address space (with the fork engine:
  on top of what the warm interpreter maps), file size (stdout and stderr go to files, so an
  endless ``print`` loop stops at the file-size limit instead of filling memory), no core dumps;
* a wall-clock timeout that kills the cell's whole process group;
* no network, where the machine allows a network namespace (``unshare -n``: root, or
  unprivileged user namespaces); see :func:`network_isolation_available`.

It bounds runaway code; it is not a security boundary (no filesystem namespace — run
untrusted models in a container). ``final_answer(x)`` is predefined and prints
``\\boxed{x}``, as in the paper's TIR prompt.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from arlgym.envs.tir_math.forkserver import ForkServer, ForkServerError
from arlgym.errors import ConfigError

__all__ = ["ExecutionResult", "PythonSandbox", "PRELUDE", "FINAL_ANSWER_SOURCE",
           "network_isolation_available", "fork_engine_available"]

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
        else:
            text = "(no output; use print() to see values)"
        if len(text) > max_chars:
            text = text[:max_chars] + "...(truncated)"
        return text


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
    """Whether cells can run in their own (empty) network namespace on this machine."""
    return _unshare_prefix() is not None


_SERVERS: dict[tuple, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def _fork_server(prefix: tuple[str, ...], python: str, env: dict[str, str]) -> ForkServer:
    """The process's fork server for this interpreter and isolation (started on first use).

    Keyed by pid as well: a worker forked from this process must not write to its parent's
    server pipe (whose reader thread did not survive the fork)."""
    key = (os.getpid(), prefix, python)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive:
            server = _SERVERS[key] = ForkServer(prefix, python, env, FINAL_ANSWER_SOURCE)
        return server


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


class PythonSandbox:
    """Runs code cells in fresh, resource-limited Python subprocesses.

    Args:
        timeout: wall-clock seconds per cell (ARLArena: 3–10 s).
        memory_mb: address-space limit in MiB (``None``: no limit).
        max_output_bytes: stdout/stderr beyond this are cut off (file-size limit).
        python: the interpreter; the current one by default, so numpy/sympy of this
            environment are importable in cells.
        network: ``False`` cuts cells off the network (an error where that is impossible),
            ``True`` leaves it, ``None`` (default) cuts it where possible.
        engine: ``"fork"`` (cells forked from a warm interpreter with numpy/sympy imported,
            shared by every sandbox of the process), ``"subprocess"`` (a new interpreter per
            cell) or ``"auto"`` (fork where available).
    """

    def __init__(self, timeout: float = 5.0, memory_mb: int | None = 2048,
                 max_output_bytes: int = 1 << 20, python: str | None = None,
                 network: bool | None = None, engine: str = "auto") -> None:
        if not timeout or timeout <= 0:
            raise ConfigError(f"sandbox timeout must be > 0 seconds, got {timeout!r}")
        if memory_mb is not None and memory_mb < 64:
            raise ConfigError(f"sandbox memory_mb must be >= 64 (or None), got {memory_mb!r}")
        self.timeout = float(timeout)
        self.memory_mb = memory_mb
        self.max_output_bytes = int(max_output_bytes)
        self.python = python or sys.executable
        if shutil.which(self.python) is None and not Path(self.python).is_file():
            raise ConfigError(f"sandbox interpreter {self.python!r} not found")
        prefix = None if network else _unshare_prefix()
        if network is False and prefix is None:
            raise ConfigError("network=False needs a network namespace (`unshare -n`), which this "
                              "machine does not allow; pass network=None to run cells with it")
        self._prefix: tuple[str, ...] = prefix or ()
        if engine not in ("auto", "fork", "subprocess"):
            raise ConfigError(f"sandbox engine must be 'auto', 'fork' or 'subprocess', got {engine!r}")
        if engine == "fork" and not fork_engine_available():
            raise ConfigError("the fork engine needs Linux (os.fork and os.pidfd_open); use engine='subprocess'")
        self.engine = "fork" if engine == "auto" and fork_engine_available() else (
            "subprocess" if engine == "auto" else engine)

    @property
    def network_isolated(self) -> bool:
        return bool(self._prefix)

    def _limits(self) -> dict[str, int | None]:
        """The resource limits of a cell (CPU seconds, address-space and file-size bytes)."""
        return {"RLIMIT_CPU": int(self.timeout) + 1,
                "RLIMIT_AS": None if self.memory_mb is None else self.memory_mb << 20,
                "RLIMIT_FSIZE": self.max_output_bytes, "RLIMIT_CORE": 0}

    def _environment(self, workdir: str) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "MPLBACKEND": "Agg"}

    def run(self, code: str) -> ExecutionResult:
        """Run ``code`` as a complete script; never raises for anything the code does."""
        workdir = tempfile.mkdtemp(prefix="arlgym-cell-", dir=_scratch_root())
        started = time.perf_counter()
        try:
            if self.engine == "fork":
                try:
                    returncode, timed_out = self._run_forked(code, workdir)
                except ForkServerError as e:
                    warnings.warn(f"TIR sandbox: {e}; running cells as subprocesses from now on",
                                  RuntimeWarning, stacklevel=2)
                    self.engine = "subprocess"
                    returncode, timed_out = self._run_subprocess(code, workdir)
            else:
                returncode, timed_out = self._run_subprocess(code, workdir)
            return ExecutionResult(stdout=self._read(Path(workdir, "stdout")),
                                   stderr=self._read(Path(workdir, "stderr")),
                                   returncode=returncode, timed_out=timed_out,
                                   seconds=time.perf_counter() - started)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_forked(self, code: str, workdir: str) -> tuple[int | None, bool]:
        Path(workdir, "main.py").write_text(str(code), encoding="utf-8")
        server = _fork_server(self._prefix, self.python, self._environment(workdir))
        return server.run(Path(workdir), self.timeout, self._limits())

    def _run_subprocess(self, code: str, workdir: str) -> tuple[int | None, bool]:
        script = Path(workdir, "main.py")
        prelude = PRELUDE.format(limits=self._limits(), final_answer=FINAL_ANSWER_SOURCE)
        script.write_text(prelude + str(code), encoding="utf-8")
        with open(Path(workdir, "stdout"), "wb") as out, open(Path(workdir, "stderr"), "wb") as err:
            proc = subprocess.Popen([*self._prefix, self.python, "-I", str(script)], cwd=workdir,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=self._environment(workdir), start_new_session=True)
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                return None, True
        return proc.returncode, False

    def _read(self, path: Path) -> str:
        with open(path, "rb") as f:
            return f.read(self.max_output_bytes).decode("utf-8", errors="replace")

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the cell and anything it spawned
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()
