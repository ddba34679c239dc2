"""``arlgym.core.procfs``: the process table, and a process that exits mid-walk reads as gone."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys

import pytest

from arlgym.core import procfs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc only")


def test_tree_of_a_child_and_grandchild_then_gone_after_kill():
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time;"
                              "p = subprocess.Popen(['sleep', '30']); print(p.pid, flush=True);"
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert procfs.children(os.getpid()) >= {child.pid}
        assert grandchild not in procfs.children(os.getpid())
        assert {child.pid, grandchild} <= procfs.descendants(os.getpid())
        assert procfs.alive(child.pid) and procfs.alive(grandchild)
        assert procfs.stat_fields(grandchild)[1] == str(child.pid)
        assert procfs.rss_mib(child.pid) > 1.0
    finally:
        subprocess.run(["kill", "-9", str(grandchild)])
        child.kill()
        child.wait()
    # The child is reaped: no entry at all. The grandchild is a zombie or reparented and reaped.
    assert procfs.stat_fields(child.pid) is None and not procfs.alive(child.pid)
    assert procfs.rss_mib(child.pid) == 0.0
    assert child.pid not in procfs.descendants(os.getpid())


@pytest.mark.parametrize("error", [ProcessLookupError(3, "No such process"),
                                   FileNotFoundError(2, "No such file")])
def test_a_process_that_exits_while_its_stat_is_read_is_gone(monkeypatch, error):
    """CI once failed on this race: ``open`` succeeded, ``read`` raised ESRCH. It is "gone"."""
    victim = os.getppid()  # any live process
    real_open = builtins.open

    class _DiesOnRead:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            raise error

    def fake_open(path, *args, **kwargs):
        if str(path) == f"/proc/{victim}/stat":
            return _DiesOnRead()
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert procfs.stat_fields(victim) is None
    assert not procfs.alive(victim)
    assert victim not in procfs.process_table()
    assert procfs.alive(os.getpid())  # the others are still read


def test_busy_cores_sees_a_neighbour_but_not_this_process():
    """``busy_cores`` (the quickstart's auto thread rule) measures other processes' CPU use now:
    a busy neighbour counts, this process's own busy thread does not (the 1-minute load average
    counted both)."""
    import threading
    import time

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert procfs.busy_cores(interval=1.0) >= 0.6
    finally:
        spinner.kill()
        spinner.wait()
    quiet = procfs.busy_cores(interval=1.0)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        own = procfs.busy_cores(interval=1.0)
    finally:
        stop.set()
        thread.join()
    assert own < quiet + 0.5
