"""The fork server: one warm interpreter (numpy and sympy imported once, the heap frozen so that
cells do not copy it) forks a fresh child per code cell, instead of a new ``python`` per cell.

The server is a single-threaded ``select`` loop (so forking it is safe) that talks JSON lines
over its stdin/stdout, which it first moves off fds 0/1. It is started by
:mod:`~arlgym.envs.tir_math.isolation`, which puts it inside the isolation boundary
(bubblewrap); this module runs cells. A request carries the code itself (JSON, so any ``str``
travels, lone surrogates included); the server makes two anonymous in-memory files (``memfd``)
for the cell's stdout and stderr and a status pipe, and forks the cell:

* with ``isolate``: one raw ``clone()`` with **new user, mount, PID, network, IPC and UTS
  namespaces** (x86_64/aarch64; elsewhere ``unshare()`` and a second fork), so the cell is pid 1
  of its own PID namespace — when it exits or is killed, the kernel kills every process it left,
  ``setsid`` daemons included. It maps uid 1000 to the server's unprivileged uid, mounts a fresh
  size-limited tmpfs on ``/tmp`` (its working directory) and ``/dev/shm`` and a ``/proc`` that
  shows only its own processes, binds the interpreter's directories those tmpfs would hide (a
  venv under /tmp) again, read-only, over them, then drops every capability (bounding set too) and sets
  ``no_new_privs``;
* without ``isolate`` (the explicit ``sandbox="unisolated"`` mode): a fresh temporary directory
  that the server removes afterwards;
* both: its own session, first in line for the OOM killer (``oom_score_adj`` 1000), fds 0/1/2 on
  ``/dev/null`` and the two memfds and every other fd closed, ``random``/``numpy.random``
  reseeded, resource limits (address space on top of what the warm interpreter maps; processes;
  CPU; file size, so output stops at the cap), ``final_answer`` predefined.

Cells are forked **ahead of their request**: after each reply the server forks one spare cell
with the same settings, which sets itself up (namespaces, mounts, capabilities dropped) and
waits on an order pipe; the next request is written to it (JSON, until EOF) and only then does
the cell reseed its RNGs, apply the request's limits and run the code. So neither the fork of
the warm interpreter nor the namespaces are on the critical path of ``step`` (the model writes
its next turn meanwhile). A spare holds no file (an unisolated cell's directory is made when it
is ordered) and is killed when the server stops.

The cell reports on its status pipe: ``R`` once ordered and set up (or ``S`` and the reason: the
request then fails, the code never runs outside its namespaces), ``E<code>`` when its code has
finished. The server replies at ``E`` — or when the cell exits, or past the wall-clock deadline —
after sending ``SIGKILL`` to the cell and its process group; it reaps the cell afterwards, so the
kernel's teardown of the cell's namespaces is not on the critical path either. Output is
read from the memfds, which only the server and the cell hold: a cell cannot swap them for a
FIFO or delete them, and no file is left on any disk. Several cells run at once; the client
matches replies by id.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from typing import Any

from arlgym.errors import ArlgymError

__all__ = ["ForkServer", "SERVER_CODE", "ForkServerError"]


class ForkServerError(ArlgymError, RuntimeError):
    """The fork server is gone (crashed, killed), did not start, or did not answer."""


SERVER_CODE = r'''
import ctypes, json, os, random, select, shutil, signal, sys, tempfile, time, traceback
for _name in PRELOAD:
    try:
        __import__(_name)
    except Exception:
        pass
import gc, resource
random.seed()
if "numpy" in sys.modules:
    sys.modules["numpy"].random.seed()  # the first seeding builds state (~30 ms a cell if left to them)
gc.collect()
gc.freeze()  # a collection in a cell must not touch (and so copy) the preloaded heap

proto_in = os.dup(0)
proto_out = os.fdopen(os.dup(1), "w", buffering=1)
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
OUTER_UID, OUTER_GID = os.getuid(), os.getgid()
CELL_UID = 1000
# CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
NS_FLAGS = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000
# A server that runs as root is the privileged fallback (isolation.py: root, but no unprivileged
# user namespaces here): cells get the same namespaces but a user namespace, and then become an
# unprivileged host uid of their own (one per cell, so no two cells share a uid either).
ROOT_MODE = OUTER_UID == 0
if ROOT_MODE:
    NS_FLAGS &= ~0x10000000
ROOT_CELL_UIDS = 3_000_000_000 + random.randrange(100_000_000)
_cells_started = 0
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC = 2, 4, 8, 4096, 16384
PAGE = os.sysconf("SC_PAGE_SIZE")


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _mount(source, target, fstype, flags, data):
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode(), flags,
                       data.encode() if data else None), "mount " + fstype + " on " + target)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(uid):
    for cap in range(64):
        _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last one)
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    if ROOT_MODE:  # leave root for the cell's own host uid (this clears the capability sets)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, reset by the uid change: its own /proc/self
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    _check(_libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _map_user():
    if not ROOT_MODE:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", "%d %d 1" % (CELL_UID, OUTER_UID))
        _write("/proc/self/gid_map", "%d %d 1" % (CELL_UID, OUTER_GID))


def _enter_namespaces(tmp_mb, uid):
    """Fresh namespaces for one cell. Returns in a grandchild, pid 1 of the new PID namespace;
    the caller's process stays outside as the cell's handle (the server waits for and kills it)
    and exits with the grandchild's status. The grandchild dies with it (PDEATHSIG)."""
    gate_r, gate_w = os.pipe()
    _check(_libc.unshare(NS_FLAGS), "unshare")
    _map_user()
    pid = os.fork()
    if pid:
        os.close(gate_r)
        for fd in (1, 2, 3):
            os.dup2(0, fd)  # fd 0 is /dev/null; this process writes nothing
        _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
        status = os.waitpid(pid, 0)[1]
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.WEXITSTATUS(status))
    os.close(gate_w)
    _check(_libc.prctl(1, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    if select.select([gate_r], [], [], 0)[0]:  # the outer process died before PDEATHSIG was set
        os._exit(137)
    os.close(gate_r)
    _mount_and_drop(tmp_mb, uid)


# One clone() with all the namespace flags makes the cell pid 1 of its PID namespace directly,
# instead of unshare() + a second fork of the large warm process (about half the cost of a cell).
# Raw syscalls: x86_64 and aarch64 only (their clone numbers and argument orders); elsewhere, or
# if the kernel refuses, the two-step path of _enter_namespaces.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
_libc.syscall.restype = ctypes.c_long
_clone_ok = _SYS_CLONE is not None


def _clone_cell():
    """fork() into fresh namespaces; returns 0 in the child, its pid in the server."""
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _libc.syscall(ctypes.c_long(_SYS_CLONE), ctypes.c_ulong(NS_FLAGS | signal.SIGCHLD),
                        ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_void_p(0))
    errno = ctypes.get_errno()
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
    else:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(errno, "clone: " + os.strerror(errno))
    return pid


def _set_up_namespaces(tmp_mb, uid):
    """In a process that is already pid 1 of fresh namespaces (see _clone_cell)."""
    _map_user()
    _mount_and_drop(tmp_mb, uid)


def _mount_and_drop(tmp_mb, uid):
    # The interpreter's directories under /tmp or /dev/shm (a venv there): held by an fd while
    # the private tmpfs covers their path, then bound again (read-only, as the server sees
    # them) from that fd at the same path inside the new tmpfs.
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for path in CELL_BINDS]
    options = "size=%dm,nr_inodes=16384,mode=1777" % tmp_mb
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, options)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, options)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    for path, fd in kept:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount("/proc/self/fd/%d" % fd, path, "none", MS_BIND | MS_REC, None)
        os.close(fd)
        if os.access(path, os.W_OK):  # the server's bind is read-only: so is this copy of it
            raise OSError("the interpreter directory " + path + " is writable in the cell")
    _libc.sethostname(b"sandbox", 7)
    _drop_capabilities(uid)


def cell(setup, out, err, status, order, cloned=False, uid=CELL_UID):
    """The child. Sets up (namespaces, files, output), then waits on fd 4 for its order — the
    request, JSON, until EOF — applies the request's limits, tells the server (fd 3: 'R' about
    to run, or 'S' and why it could not be set up), runs the code, says 'E' and the exit code,
    exits. Cells are forked ahead of their request (the server keeps one spare), so the fork and
    the namespaces are not on the critical path either."""
    try:
        os.setsid()
        try:
            _write("/proc/self/oom_score_adj", "1000")
        except OSError:
            pass
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * PAGE
        os.dup2(_null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(status, 3, inheritable=False)
        os.dup2(order, 4, inheritable=False)
        os.closerange(5, 1 << 20)
        if cloned:
            _set_up_namespaces(setup["tmp_mb"], uid)
        elif setup["isolate"]:
            _enter_namespaces(setup["tmp_mb"], uid)
        sys.stdout = open(1, "w", buffering=1, closefd=False, encoding="utf-8", errors="backslashreplace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, encoding="utf-8", errors="backslashreplace")
        chunks = []
        while True:
            chunk = os.read(4, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(4)
        if not chunks:  # a spare that is no longer wanted
            os._exit(0)
        req = json.loads(b"".join(chunks))
        workdir = "/tmp" if req["isolate"] else req["workdir"]  # (unisolated: made at the order)
        os.chdir(workdir)
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        limits = dict(req["limits"])
        if limits.get("RLIMIT_AS") is not None:
            limits["RLIMIT_AS"] += mapped
        for key, value in limits.items():
            if value is not None and hasattr(resource, key):
                try:
                    resource.setrlimit(getattr(resource, key), (value, value))
                except (ValueError, OSError):
                    if req["isolate"]:
                        raise
        os.write(3, b"R")
    except BaseException:
        try:
            os.write(3, ("S" + traceback.format_exc()[-3000:]).encode("utf-8", "replace"))
        finally:
            os._exit(70)
    code = 0
    try:
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(FINAL_ANSWER, "<prelude>", "exec"), namespace)
        sys.argv = ["main.py"]
        exec(compile(req["code"], "main.py", "exec"), namespace)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        code = code & 0xFF if isinstance(code, int) else 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        try:
            # The server replies now, and kills and reaps this cell in the background: the
            # teardown of its namespaces is not on the critical path of step().
            os.write(3, b"E%d\n" % code)
        except BaseException:
            pass
        os._exit(code)


running = {}   # pidfd -> the cell's record (a dict)
statuses = {}  # read end of a cell's status pipe -> its pidfd
reaping = {}   # pidfd -> pid of a cell already answered for, killed, not yet reaped
spare = None   # a cell forked ahead of its request: (settings key, record)


def _read(fd, limit):
    data = os.pread(fd, limit, 0)
    os.close(fd)
    return data.decode("utf-8", "replace")


def _kill(pid):
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()  # the cell (its namespaces die with it) and whatever it left in its group
        except OSError:
            pass


def _settings(req):
    return (bool(req["isolate"]), req.get("tmp_mb"), req.get("scratch"))


def spawn(req):
    """Fork a cell for requests with ``req``'s settings; it sets itself up and waits."""
    global _clone_ok, _cells_started
    _cells_started += 1
    uid = ROOT_CELL_UIDS + _cells_started % 1_000_000 if ROOT_MODE else CELL_UID
    out, err = (os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdout", "stderr"))
    status_r, status_w = os.pipe()
    order_r, order_w = os.pipe()
    cloned = False
    if req["isolate"] and _clone_ok:
        try:
            pid = _clone_cell()
            cloned = True
        except OSError:
            _clone_ok = False  # this kernel or architecture: unshare() + fork from now on
    if not cloned:
        pid = os.fork()
    if pid == 0:
        cell(req, out, err, status_w, order_r, cloned, uid)
    os.close(status_w)
    os.close(order_r)
    return {"pid": pid, "fd": os.pidfd_open(pid), "out": out, "err": err, "status": status_r,
            "order": order_w, "report": b"", "workdir": None}


def discard(c):
    """A cell that never ran: kill, reap, free."""
    _kill(c["pid"])
    try:
        os.waitpid(c["pid"], 0)
    except ChildProcessError:  # already reaped
        pass
    for fd in (c["fd"], c["out"], c["err"], c["status"], c["order"]):
        try:
            os.close(fd)
        except OSError:
            pass
    if c["workdir"] is not None:
        shutil.rmtree(c["workdir"], ignore_errors=True)


def _order(c, req):
    if not req["isolate"]:  # a private directory, made now (a spare holds none while it waits)
        if c["workdir"] is None:
            c["workdir"] = tempfile.mkdtemp(prefix="arlgym-cell-", dir=req.get("scratch"))
        req = dict(req, workdir=c["workdir"])
    data = json.dumps(req).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(c["order"], view):]
    os.close(c["order"])
    c["order"] = -1


def start(req):
    global spare
    key = _settings(req)
    c = None
    if spare is not None:
        spare_key, candidate = spare
        spare = None
        if spare_key == key and os.waitpid(candidate["pid"], os.WNOHANG) == (0, 0):
            c = candidate
        else:
            discard(candidate)
    for attempt in range(2):
        if c is None:
            c = spawn(req)
        try:
            _order(c, req)
            break
        except OSError:  # it died before reading its order (e.g. its set-up failed)
            discard(c)
            c = None
            if attempt:
                raise
    c.update(id=req["id"], deadline=time.monotonic() + req["timeout"], limit=req["max_output"],
             request=req)
    running[c["fd"]] = c
    statuses[c["status"]] = c["fd"]


def refill(req):
    """Fork the next cell (settings of ``req``) after a reply: it sets itself up while the
    client reads the reply and the model writes its next turn, off the critical path."""
    global spare
    if spare is None:
        try:
            spare = (_settings(req), spawn(req))
        except Exception:
            spare = None


def finish(fd, returncode, timed_out, exited):
    """Answer for the cell of pidfd ``fd``: kill what is left of it, send the reply; reap it now
    if it has exited, else when it has (select on its pidfd)."""
    c = running.pop(fd)
    _kill(c["pid"])
    if exited:
        os.close(fd)
    else:
        reaping[fd] = c["pid"]
    statuses.pop(c["status"], None)
    os.close(c["status"])
    reply = {"id": c["id"], "returncode": None if timed_out else returncode, "timed_out": timed_out,
             "stdout": _read(c["out"], c["limit"]), "stderr": _read(c["err"], c["limit"])}
    if c["report"][:1] != b"R" and not timed_out:
        reply["setup_error"] = c["report"][1:].decode("utf-8", "replace") or "the cell died during its set-up"
    if c["workdir"] is not None:
        shutil.rmtree(c["workdir"], ignore_errors=True)
    proto_out.write(json.dumps(reply) + "\n")
    if not closing:
        refill(c["request"])


closing = False


def on_status(status_fd):
    fd = statuses[status_fd]
    c = running[fd]
    chunk = os.read(status_fd, 1 << 16)
    if not chunk:  # closed: the cell is exiting; its pidfd says when
        statuses.pop(status_fd)
        return
    c["report"] += chunk
    if c["report"][:1] == b"R" and b"\n" in c["report"]:
        tail = c["report"][1:].split(b"\n", 1)[0]
        if tail[:1] == b"E" and tail[1:].isdigit():
            finish(fd, int(tail[1:]), False, exited=False)


def on_exit(fd):
    if fd in reaping:
        os.waitpid(reaping.pop(fd), 0)
        os.close(fd)
        return
    c = running[fd]
    _, status = os.waitpid(c["pid"], 0)
    if c["status"] in statuses:  # what the cell wrote just before exiting
        try:
            while True:
                chunk = os.read(c["status"], 1 << 16)
                if not chunk:
                    break
                c["report"] += chunk
        except OSError:
            pass
    finish(fd, os.waitstatus_to_exitcode(status), False, exited=True)


proto_out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
buffer = b""
while True:
    now = time.monotonic()
    wait = min((c["deadline"] for c in running.values()), default=None)
    r, _, _ = select.select([proto_in, *running, *statuses, *reaping], [], [],
                            None if wait is None else max(0.0, wait - now))
    for fd in r:
        if fd == proto_in:
            chunk = os.read(proto_in, 1 << 20)
            if not chunk:  # the client is gone: kill every cell, the spare too, then exit
                closing = True
                for fd2 in list(running):
                    finish(fd2, None, True, exited=False)
                if spare is not None:
                    discard(spare[1])
                os._exit(0)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                req = json.loads(line)
                try:
                    start(req)
                except Exception as e:  # e.g. no memfd, no scratch directory: say so, go on
                    proto_out.write(json.dumps({"id": req["id"], "returncode": None, "timed_out": False,
                                                "stdout": "", "stderr": "", "setup_error": repr(e)}) + "\n")
        elif fd in statuses:
            on_status(fd)
        elif fd in running or fd in reaping:
            on_exit(fd)
    now = time.monotonic()
    for fd, c in list(running.items()):
        if c["deadline"] <= now:
            finish(fd, None, True, exited=False)
'''


class ForkServer:
    """Client of one fork-server process (see the module docstring); thread-safe.

    Args:
        command: the command line that runs a Python interpreter with the server code appended
            as its last argument (e.g. ``[..bwrap.., python, "-I", "-c"]``).
        env: the environment of that command.
        final_answer_source: the prelude every cell runs first.
        preload: modules the server imports once.
        start_timeout: seconds to wait for the server's first line.
        cell_binds: directories (of the interpreter) under ``/tmp`` or ``/dev/shm`` that each
            isolated cell binds again over its private tmpfs, so that it can still import from
            them (``isolation.cell_binds``).
    """

    def __init__(self, command: list[str], env: dict[str, str], final_answer_source: str,
                 preload: tuple[str, ...] = ("numpy", "sympy"), start_timeout: float = 120.0,
                 cell_binds: tuple[str, ...] = ()) -> None:
        code = (f"PRELOAD = {list(preload)!r}\nFINAL_ANSWER = {final_answer_source!r}\n"
                f"CELL_BINDS = {list(cell_binds)!r}\n" + SERVER_CODE)
        self._stderr = tempfile.TemporaryFile()  # unlinked: what bwrap says if it cannot start
        self._proc = subprocess.Popen([*command, code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=env, start_new_session=True)
        self.pid = self._proc.pid
        self._write_lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._next_id = 0
        self._started = threading.Event()
        self._closed = False
        self._reader = threading.Thread(target=self._read_replies, name="arlgym-forkserver", daemon=True)
        self._reader.start()
        if not self._started.wait(start_timeout) or not self.alive:
            if self.alive:
                self._proc.kill()
            self._proc.wait()
            message = self.diagnostics()
            self.close()
            raise ForkServerError(f"the sandbox's fork server did not start: {message}")

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def diagnostics(self) -> str:
        """What the server's launcher wrote to stderr (e.g. bwrap's reason for failing)."""
        try:
            self._stderr.seek(0)
            text = self._stderr.read(4096).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            text = ""
        code = self._proc.poll()
        return (text or "no message") + ("" if code is None else f" (exit status {code})")

    def _read_replies(self) -> None:
        assert self._proc.stdout is not None
        try:
            for line in self._proc.stdout:
                reply = json.loads(line)
                if reply.get("ready"):
                    self._started.set()
                    continue
                waiter = self._waiting.pop(reply["id"], None)
                if waiter is not None:
                    waiter[1].update(reply)
                    waiter[0].set()
        except (ValueError, OSError):
            pass
        self._started.set()
        for event, _ in list(self._waiting.values()):  # the server died: wake everyone
            event.set()

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one cell (``code``, ``timeout``, ``limits``, ``max_output``, ``isolate``...);
        returns the server's reply (``returncode``, ``timed_out``, ``stdout``, ``stderr`` and,
        when the cell could not be set up, ``setup_error``)."""
        event, reply = threading.Event(), {}
        with self._write_lock:
            if not self.alive:
                raise ForkServerError("the fork server has exited")
            self._next_id += 1
            rid = self._next_id
            self._waiting[rid] = (event, reply)
            line = json.dumps({**request, "id": rid}) + "\n"  # ASCII: lone surrogates escaped
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(line.encode("ascii"))
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError) as e:
                self._waiting.pop(rid, None)
                raise ForkServerError("the fork server has exited") from e
        if not event.wait(float(request["timeout"]) + 30) or "returncode" not in reply:
            self._waiting.pop(rid, None)
            raise ForkServerError("the fork server did not answer")
        return reply

    def close(self) -> None:
        """Stop the server: it kills its running cells and exits (killed if it does not)."""
        if self._closed:
            return
        self._closed = True
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()  # EOF: the server kills its cells and exits ...
                self._proc.wait(timeout=3)  # ... unless a forked child of ours still holds the pipe
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._stderr.close()
