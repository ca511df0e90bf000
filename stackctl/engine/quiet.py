"""Wait for a server to go quiet: the processes of its container using (almost) no CPU.

After answering a request, LMCache writes the KV it stored on to its lower tiers (disk, fs, S3) in background threads
of the server. On a 2-core host those writes share the CPU with the next request. Measured on a cpu-lmcache stack
(float32, 2,000-token prompts): a vLLM prefix-cache hit asked right after the store took 630-910 ms, and 230 ms once
the writes were done (they took about a second, then the container's CPU use fell to zero). A figure taken during the
writes measures them, not the cache; one taken after a fixed pause is right only on the host the pause was tuned on.

The signal is positive: the CPU time the container's processes used, read from this machine's /proc, rising by
less than IDLE_CORES over QUIET_WINDOWS windows in a row. A container this machine cannot see (an engine elsewhere)
gives no signal, and the caller says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from stackctl.engine import docker_adapter as dk
from stackctl.engine.handles import Container

WINDOW_S = 0.1
QUIET_WINDOWS = 2
# An idle vLLM server uses ~0: its workers wait on a socket. For the first second after their last message they poll
# vLLM's shared-memory queue instead, yielding the CPU on each turn (vLLM 0.32
# vllm/distributed/device_communicators/shm_broadcast.py:138,207): about one core for a second after every request,
# which a wait sits through. The writes use 0.4-1 core. One clock tick (10 ms) in a window is 0.1 core, which an
# idle server shows now and then.
IDLE_CORES = 0.15
TIMEOUT_S = 20.0


def process_tree_cpu_seconds(init_pid: int, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds (user + system) used so far by `init_pid` and every process below it; None when `init_pid` is
    not a process here."""
    parents: dict[str, str] = {}
    used: dict[str, int] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            stat = (proc / entry / "stat").read_text()
        except OSError:
            continue  # gone since the listing
        # "PID (comm) state ppid ... utime stime": comm may hold spaces and parentheses, so split after the last ")".
        fields = stat[stat.rindex(")") + 2:].split()
        parents[entry] = fields[1]
        used[entry] = int(fields[11]) + int(fields[12])
    root = str(init_pid)
    if root not in used:
        return None
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(used[pid] for pid in tree) / os.sysconf("SC_CLK_TCK")


def container_cpu_seconds(container: Container, proc: Path = Path("/proc")) -> Callable[[], float | None] | None:
    """A reader of the CPU seconds `container` has used; None when this machine's /proc does
    not hold it (its init process is not in the container's cgroup: an engine on another machine)."""
    pid = dk.container_state(container).pid
    try:
        if not pid or container.id not in (proc / str(pid) / "cgroup").read_text():
            return None
    except OSError:
        return None
    return lambda: process_tree_cpu_seconds(pid, proc)


def wait_until_quiet(cpu_seconds: Callable[[], float | None], timeout_s: float = TIMEOUT_S,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> float | None:
    """Seconds waited until `cpu_seconds` rose by less than IDLE_CORES per second over QUIET_WINDOWS windows of
    WINDOW_S in a row; None when it cannot be read or the server stayed busy for `timeout_s`."""
    started = clock()
    last, last_at = cpu_seconds(), clock()
    quiet = 0
    while last is not None and clock() - started < timeout_s:
        sleep(WINDOW_S)
        now, now_at = cpu_seconds(), clock()
        if now is None:
            return None
        busy = (now - last) / max(now_at - last_at, 1e-6)
        quiet = quiet + 1 if busy < IDLE_CORES else 0
        if quiet >= QUIET_WINDOWS:
            return now_at - started
        last, last_at = now, now_at
    return None


def wait_for_container(container: Container) -> float | None:
    """Seconds waited until `container` went quiet; None, at once, when this machine cannot
    see its processes, or when it stayed busy."""
    reader = container_cpu_seconds(container)
    return wait_until_quiet(reader) if reader is not None else None
