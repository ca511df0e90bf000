"""Where the live server runs, read from /proc inside its container, judged against the pinning decision.

`PROC_SCRIPT` runs in the container (`docker exec`, a POSIX shell and grep: every image has them) and prints each
process's Name, PPid, Cpus_allowed_list and Mems_allowed_list, and where numactl is. The server is PID 1 (serve.sh
execs the launcher, which execs the server); its workers are PID 1's descendants. Processes that `docker exec`
started have PPid 0 and are not part of the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stackctl.host.cpulist import format_cpulist, parse_cpulist

PROC_SCRIPT = ('echo "numactl=$(command -v numactl || true)"; '
               "grep -H -E '^(Name|PPid|Cpus_allowed_list|Mems_allowed_list):' /proc/[0-9]*/status 2>/dev/null; "
               "true")
_LINE = re.compile(r"^/proc/(\d+)/status:(Name|PPid|Cpus_allowed_list|Mems_allowed_list):\s*(.*)$")


FIELDS = ("Name", "PPid", "Cpus_allowed_list", "Mems_allowed_list")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def host_proc_text(container_id: str, init_pid: int, path: str, numactl_wanted: bool,
                   proc: Path = Path("/proc")) -> str | None:
    """PROC_SCRIPT's output, read from this machine's /proc instead of through a `docker exec` (a process started in
    the container: the slowest step of a warm doctor's server scope). The container's processes are this machine's
    processes seen from outside: Cpus_allowed_list and Mems_allowed_list are the kernel's, whichever namespace reads
    them. `init_pid` is the engine's `State.Pid`, the container's PID 1 as this machine numbers it. Lines carry the
    container's own PIDs (NSpid at the container's level), so parse_proc reads them as it reads the exec's output.

    None (the caller runs PROC_SCRIPT in the container) unless every fact is certain: the process is in the
    container's cgroup (its id in /proc/PID/cgroup: not another process that happens to have the number, as with an
    engine on another machine) and is PID 1 of its namespace (NSpid, kernel 4.1+); and, when `numactl_wanted`,
    numactl found on the container's PATH through /proc/PID/root (absence is left to the exec to confirm)."""
    init = _status(proc / str(init_pid))
    if init is None or container_id not in _read(proc / str(init_pid) / "cgroup"):
        return None
    nspids = init.get("NSpid", "").split()
    if len(nspids) < 2 or nspids[0] != str(init_pid) or nspids[-1] != "1":
        return None
    level = len(nspids) - 1
    numactl = ""
    if numactl_wanted:
        numactl = _on_path(proc / str(init_pid) / "root", path or DEFAULT_PATH, "numactl")
        if not numactl:
            return None
    table: dict[str, dict[str, str]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            status = _status(entry)
            if status is not None:
                table[entry.name] = status
    inside: dict[str, str] = {str(init_pid): "1"}  # this machine's PID -> the container's
    frontier = [str(init_pid)]
    while frontier:
        parent = frontier.pop(0)
        for pid, status in table.items():
            ids = status.get("NSpid", "").split()
            if status.get("PPid") == parent and pid not in inside and len(ids) > level:
                inside[pid] = ids[level]
                frontier.append(pid)
    lines = [f"numactl={numactl}"]
    for pid, own in inside.items():
        status = table.get(pid, init if pid == str(init_pid) else {})
        values = {**status, "PPid": "0" if own == "1" else inside.get(status.get("PPid", ""), "0")}
        lines.extend(f"/proc/{own}/status:{name}:\t{values[name]}" for name in FIELDS if name in values)
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _status(directory: Path) -> dict[str, str] | None:
    """A process's /proc status fields; None when it is gone or unreadable."""
    text = _read(directory / "status")
    if not text:
        return None
    return {name: value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())}


def _on_path(root: Path, path: str, program: str) -> str:
    """Where `command -v program` finds it under `root` ('' when this cannot see it: not there, or not readable)."""
    import os

    for folder in path.split(":"):
        if folder.startswith("/") and os.access(root / folder.lstrip("/") / program, os.X_OK):
            return f"{folder.rstrip('/')}/{program}"
    return ""


@dataclass(frozen=True)
class ServerProcess:
    pid: int
    ppid: int
    name: str
    cpus: set[int]
    mems: set[int]

    def label(self) -> str:
        return f"{self.name} (pid {self.pid})"


@dataclass(frozen=True)
class ContainerView:
    numactl: str | None  # path inside the container, None when absent
    processes: list[ServerProcess]  # PID 1 first, then its descendants


def parse_proc(text: str) -> ContainerView:
    """PROC_SCRIPT's output -> the server's processes (PID 1 and its descendants) and numactl's path."""
    numactl: str | None = None
    fields: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("numactl="):
            numactl = line.split("=", 1)[1].strip() or None
            continue
        match = _LINE.match(line.strip())
        if match:
            fields.setdefault(int(match.group(1)), {})[match.group(2)] = match.group(3).strip()
    procs = {}
    for pid, values in fields.items():
        try:
            procs[pid] = ServerProcess(pid, int(values.get("PPid", "0")), values.get("Name", "?"),
                                       set(parse_cpulist(values.get("Cpus_allowed_list", ""))),
                                       set(parse_cpulist(values.get("Mems_allowed_list", ""))))
        except ValueError:
            continue  # a process that exited while being read
    tree, frontier = [], [1]
    while frontier:
        pid = frontier.pop(0)
        if pid in procs:
            tree.append(procs[pid])
            frontier.extend(sorted(p for p, proc in procs.items() if proc.ppid == pid))
    return ContainerView(numactl, tree)


@dataclass(frozen=True)
class Expected:
    """What the decision asked for, as sets; `cpus_text`/`mems_text` are docker's cpuset strings ("" when unset)."""

    cpus: set[int]
    mems: set[int]
    cpus_text: str
    mems_text: str


def compare(view: ContainerView, expected: Expected, docker_cpuset: tuple) -> list[str]:
    """Every difference between what runs and what was asked for, one line each, naming the process.

    The server process must have exactly the decided CPUs and memory nodes. Its workers may narrow themselves
    inside them (vLLM's CPU backend binds each worker to its OpenMP cores) but never step outside."""
    problems = []
    docker_cpus, docker_mems = (_normal(text) for text in docker_cpuset)
    if docker_cpus != expected.cpus_text:
        problems.append(f"container cpuset cpus {docker_cpus or 'unset'}, asked for {expected.cpus_text or 'unset'}")
    if docker_mems != expected.mems_text:
        problems.append(f"container cpuset mems {docker_mems or 'unset'}, asked for {expected.mems_text or 'unset'}")
    if not view.processes:
        problems.append("no server process (PID 1) found in the container")
        return problems
    main, workers = view.processes[0], view.processes[1:]
    for what, have, want in (("CPUs", main.cpus, expected.cpus), ("memory nodes", main.mems, expected.mems)):
        if want and have != want:
            problems.append(f"{main.label()} has {what} {format_cpulist(have)}, asked for {format_cpulist(want)}")
    for proc in workers:
        for what, have, want in (("CPUs", proc.cpus, expected.cpus), ("memory nodes", proc.mems, expected.mems)):
            if want and not have <= want:
                problems.append(f"{proc.label()} has {what} {format_cpulist(have)}, asked for {format_cpulist(want)}")
    return problems


def narrowed(view: ContainerView, expected: Expected) -> list[str]:
    """Workers that bound themselves to part of the decided CPUs (shown, not failed)."""
    return [f"{p.label()} on CPUs {format_cpulist(p.cpus)}" for p in view.processes[1:]
            if expected.cpus and p.cpus < expected.cpus]


def _normal(cpulist: str) -> str:
    try:
        return format_cpulist(parse_cpulist(cpulist or ""))
    except ValueError:
        return cpulist
