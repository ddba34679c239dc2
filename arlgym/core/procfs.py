"""Race-free reads of Linux ``/proc``: the process table as the env's supervisors and tests see it.

Why one module: several places (the browser env's process-group sweep, the TIR sandbox's escape
tests, the soak bench) walk ``/proc`` to find what a process left behind. A process may exit
between listing ``/proc`` and reading its ``stat`` file; the kernel then answers ENOENT or, when
the exit happens mid-read, ESRCH (``ProcessLookupError``). Each read here treats that as "gone"
instead of raising, which is the only correct reading and the one a hand-rolled copy forgets
(CI once failed on exactly that). On systems without ``/proc`` every function returns "nothing".
"""
from __future__ import annotations

import os
import time

__all__ = ["stat_fields", "process_table", "descendants", "children", "alive", "rss_mib", "busy_cores"]

#: States of a process that has exited and holds nothing but its table entry.
_DEAD_STATES = ("Z", "X")


def stat_fields(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name: ``[state, ppid, pgrp, ...]``, or
    None if the process is gone (or never existed)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_table() -> dict[int, list[str]]:
    """``stat_fields`` of every live (not zombie) process, by pid."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    table: dict[int, list[str]] = {}
    for entry in entries:
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields is not None and fields[0] not in _DEAD_STATES:
                table[int(entry)] = fields
    return table


def descendants(pid: int, table: dict[int, list[str]] | None = None) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    table = process_table() if table is None else table
    kids: dict[int, list[int]] = {}
    for child, fields in table.items():
        kids.setdefault(int(fields[1]), []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def children(pid: int, table: dict[int, list[str]] | None = None) -> set[int]:
    """Live direct children of ``pid``."""
    table = process_table() if table is None else table
    return {child for child, fields in table.items() if fields[1] == str(pid)}


def alive(pid: int) -> bool:
    """Running, sleeping or stopped: not exited and not a zombie waiting to be reaped."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in _DEAD_STATES


def rss_mib(pid: int | str) -> float:
    """Resident set size of ``pid`` in MiB (``/proc/<pid>/statm``); 0.0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs together from ``/proc/stat``, or None."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user..steal; guest time is already inside user
    return total - idle, total


def busy_cores(interval: float = 0.5) -> float | None:
    """How many CPUs other processes keep busy now: the busy share of all CPUs over
    ``interval`` seconds, times the CPU count, less this process's own CPU time in that window.

    Why not the load average: its 1-minute mean still holds this process's own previous phase
    (two SFT threads leave it near 2 for a minute), so a program choosing threads phase by
    phase would mistake itself for a busy neighbour. None where ``/proc/stat`` is unreadable."""
    before, self_before = _cpu_jiffies(), os.times()
    time.sleep(interval)
    after, self_after = _cpu_jiffies(), os.times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    cpus = os.cpu_count() or 1
    window = (after[1] - before[1]) / cpus  # jiffies per CPU in the window
    busy = (after[0] - before[0]) / window
    own_seconds = (self_after.user - self_before.user) + (self_after.system - self_before.system)
    own = own_seconds * os.sysconf("SC_CLK_TCK") / window
    return max(0.0, busy - own)
