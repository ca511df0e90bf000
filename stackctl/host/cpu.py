"""CPU and NUMA facts: nodes and their CPUs, isolated CPUs, frequency governors, kernel.numa_balancing."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stackctl.host.cpulist import format_cpulist, parse_cpulist
from stackctl.host.sysfs import is_live, read_int, read_text, under

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
CMDLINE = "/proc/cmdline"


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its number, its CPUs and (when the kernel says) its memory."""

    node: int
    cpus: list[int]
    mem_total_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "cpus": format_cpulist(self.cpus), "mem_total_bytes": self.mem_total_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NumaNode:
        return cls(data["node"], parse_cpulist(data.get("cpus", "")), data.get("mem_total_bytes"))


@dataclass(frozen=True)
class Isolation:
    """Isolated CPUs and where that came from.

    `cpus` is what stackctl pins to: the kernel's own list (sysfs `isolated`) when it has one, else the
    `isolcpus=` CPUs of the command line, else the `nohz_full=` CPUs. `domain_isolated` means the scheduler does
    no load balancing across them, so processes given several of them are not spread out by the kernel.
    """

    cpus: list[int] = field(default_factory=list)
    source: str | None = None  # "sysfs" | "cmdline:isolcpus" | "cmdline:nohz_full" | "sysfs:nohz_full" | None
    isolcpus: list[int] = field(default_factory=list)
    isolcpus_flags: list[str] = field(default_factory=list)
    nohz_full: list[int] = field(default_factory=list)
    domain_isolated: bool = False
    rcu_nocbs: list[int] = field(default_factory=list)  # CPUs whose RCU callbacks run elsewhere (cmdline)
    sysfs_isolated: list[int] = field(default_factory=list)  # /sys/devices/system/cpu/isolated as the kernel says

    def kernel_summary(self) -> str:
        """What the kernel has, in its own words: the command-line parameters and the sysfs list."""
        parts = []
        if self.isolcpus:
            flags = ",".join(self.isolcpus_flags)
            parts.append(f"isolcpus={flags + ',' if flags else ''}{format_cpulist(self.isolcpus)}")
        for name, cpus in (("nohz_full", self.nohz_full), ("rcu_nocbs", self.rcu_nocbs)):
            if cpus:
                parts.append(f"{name}={format_cpulist(cpus)}")
        parts.append(f"isolated={format_cpulist(self.sysfs_isolated) or '(none)'}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpus": format_cpulist(self.cpus),
            "source": self.source,
            "isolcpus": format_cpulist(self.isolcpus),
            "isolcpus_flags": list(self.isolcpus_flags),
            "nohz_full": format_cpulist(self.nohz_full),
            "domain_isolated": self.domain_isolated,
            "rcu_nocbs": format_cpulist(self.rcu_nocbs),
            "sysfs_isolated": format_cpulist(self.sysfs_isolated),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Isolation:
        return cls(
            cpus=parse_cpulist(data.get("cpus", "")),
            source=data.get("source"),
            isolcpus=parse_cpulist(data.get("isolcpus", "")),
            isolcpus_flags=list(data.get("isolcpus_flags", [])),
            nohz_full=parse_cpulist(data.get("nohz_full", "")),
            domain_isolated=bool(data.get("domain_isolated", False)),
            rcu_nocbs=parse_cpulist(data.get("rcu_nocbs", "")),
            sysfs_isolated=parse_cpulist(data.get("sysfs_isolated", "")),
        )


@dataclass(frozen=True)
class CpuFacts:
    """The host's CPUs as pinning and `doctor` need them."""

    online_cpus: list[int]
    numa_nodes: list[NumaNode]
    isolation: Isolation
    governors: dict[int, str | None]  # CPU -> scaling governor; None where cpufreq is absent (VMs)
    numa_balancing: int | None  # kernel.numa_balancing; None when the kernel has no such switch
    physical_cores: int | None = None
    cmdline: str | None = None

    @property
    def isolated_cpus(self) -> list[int]:
        return self.isolation.cpus

    def node_of(self, cpu: int) -> int | None:
        """The NUMA node a CPU belongs to (None when the host reports no node for it)."""
        for node in self.numa_nodes:
            if cpu in node.cpus:
                return node.node
        return None

    def governor_summary(self) -> dict[str, str]:
        """Governor -> cpulist; CPUs without cpufreq are listed under "none"."""
        groups: dict[str, list[int]] = {}
        for cpu, governor in self.governors.items():
            groups.setdefault(governor or "none", []).append(cpu)
        return {name: format_cpulist(cpus) for name, cpus in sorted(groups.items())}

    def to_dict(self) -> dict[str, Any]:
        return {
            "online_cpus": format_cpulist(self.online_cpus),
            "physical_cores": self.physical_cores,
            "numa_nodes": [node.to_dict() for node in self.numa_nodes],
            "isolation": self.isolation.to_dict(),
            "governors": self.governor_summary(),
            "numa_balancing": self.numa_balancing,
            "cmdline": self.cmdline,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuFacts:
        governors: dict[int, str | None] = {}
        for name, cpus in data.get("governors", {}).items():
            for cpu in parse_cpulist(cpus):
                governors[cpu] = None if name == "none" else name
        return cls(
            online_cpus=parse_cpulist(data.get("online_cpus", "")),
            numa_nodes=[NumaNode.from_dict(n) for n in data.get("numa_nodes", [])],
            isolation=Isolation.from_dict(data.get("isolation", {})),
            governors=dict(sorted(governors.items())),
            numa_balancing=data.get("numa_balancing"),
            physical_cores=data.get("physical_cores"),
            cmdline=data.get("cmdline"),
        )


# -- readers ----------------------------------------------------------------------------------------------------


def read_cpulist_file(root: Path, path: str) -> list[int] | None:
    """A sysfs cpulist file; None when absent or unparsable. nohz_full says "(null)" when unset."""
    text = read_text(root, path)
    if text is None:
        return None
    text = text.strip()
    if text in ("", "(null)"):
        return []
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def read_online_cpus(root: Path = Path("/")) -> list[int]:
    online = read_cpulist_file(root, f"{CPU_DIR}/online")
    if online is not None:
        return online
    cpu_dir = under(root, CPU_DIR)
    if not cpu_dir.is_dir():
        return []
    return sorted(int(p.name[3:]) for p in cpu_dir.glob("cpu[0-9]*") if p.name[3:].isdigit())


def read_numa_nodes(root: Path = Path("/")) -> list[NumaNode]:
    """NUMA nodes that have CPUs or memory, from /sys/devices/system/node/nodeN."""
    node_ids = read_cpulist_file(root, f"{NODE_DIR}/online")
    if node_ids is None:
        node_dir = under(root, NODE_DIR)
        node_ids = sorted(int(p.name[4:]) for p in node_dir.glob("node[0-9]*") if p.name[4:].isdigit()) \
            if node_dir.is_dir() else []
    nodes = []
    for node in node_ids:
        cpus = read_cpulist_file(root, f"{NODE_DIR}/node{node}/cpulist")
        if cpus is None:
            continue
        nodes.append(NumaNode(node, cpus, _node_mem_total(root, node)))
    return nodes


def _node_mem_total(root: Path, node: int) -> int | None:
    # Lines look like "Node 0 MemTotal:       792458900 kB".
    text = read_text(root, f"{NODE_DIR}/node{node}/meminfo") or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "MemTotal:" and parts[3].isdigit():
            return int(parts[3]) * 1024
    return None


def read_governors(root: Path, cpus: list[int]) -> dict[int, str | None]:
    governors = {}
    for cpu in cpus:
        text = read_text(root, f"{CPU_DIR}/cpu{cpu}/cpufreq/scaling_governor")
        governors[cpu] = text.strip() if text and text.strip() else None
    return governors


def kernel_args(cmdline: str) -> list[tuple[str, str | None]]:
    """(name, value) of each kernel parameter, in order; what follows "--" belongs to init and is dropped."""
    try:
        words = shlex.split(cmdline)
    except ValueError:
        words = cmdline.split()
    args = []
    for word in words:
        if word == "--":
            break
        name, sep, value = word.partition("=")
        args.append((name, value if sep else None))
    return args


def parse_isolcpus(value: str) -> tuple[list[str], list[int]]:
    """`isolcpus=[flag,...,]cpulist` -> (flags, cpus); e.g. "managed_irq,domain,2-7" -> (["managed_irq",
    "domain"], [2..7]). Flags come first; an unparsable cpulist gives no CPUs."""
    items = [item.strip() for item in value.split(",")]
    flags = []
    while items and re.fullmatch(r"[a-z_]+", items[0]):
        flags.append(items.pop(0))
    try:
        cpus = parse_cpulist(",".join(items))
    except ValueError:
        cpus = []
    return flags, cpus


def read_isolation(root: Path = Path("/"), cmdline: str | None = None) -> Isolation:
    """Isolated CPUs from sysfs, else from isolcpus=/nohz_full= on the kernel command line."""
    if cmdline is None:
        cmdline = read_text(root, CMDLINE) or ""
    isolcpus_flags: list[str] = []
    isolcpus: list[int] = []
    cmdline_nohz: list[int] = []
    rcu_nocbs: list[int] = []
    for name, value in kernel_args(cmdline):  # a repeated parameter: the last one is used
        if name == "isolcpus" and value is not None:
            isolcpus_flags, isolcpus = parse_isolcpus(value)
        elif name == "nohz_full" and value is not None:
            try:
                cmdline_nohz = parse_cpulist(value)
            except ValueError:
                cmdline_nohz = []
        elif name == "rcu_nocbs" and value:
            try:
                rcu_nocbs = parse_cpulist(value)
            except ValueError:
                rcu_nocbs = []
    # Without flags isolcpus means domain isolation; with flags, only the ones named.
    cmdline_domain = bool(isolcpus) and (not isolcpus_flags or "domain" in isolcpus_flags)
    sysfs_isolated = read_cpulist_file(root, f"{CPU_DIR}/isolated")
    sysfs_nohz = read_cpulist_file(root, f"{CPU_DIR}/nohz_full")
    nohz_full = sysfs_nohz if sysfs_nohz else cmdline_nohz
    kernel = Isolation(isolcpus=isolcpus, isolcpus_flags=isolcpus_flags, nohz_full=nohz_full, rcu_nocbs=rcu_nocbs,
                       sysfs_isolated=sysfs_isolated or [])
    if sysfs_isolated:
        return replace(kernel, cpus=sysfs_isolated, source="sysfs", domain_isolated=True)
    if isolcpus:
        return replace(kernel, cpus=isolcpus, source="cmdline:isolcpus", domain_isolated=cmdline_domain)
    if nohz_full:
        return replace(kernel, cpus=nohz_full, source="sysfs:nohz_full" if sysfs_nohz else "cmdline:nohz_full")
    return kernel


def read_numa_balancing(root: Path = Path("/")) -> int | None:
    return read_int(root, NUMA_BALANCING)


def read_cpu_facts(root: Path = Path("/")) -> CpuFacts:
    root = Path(root)
    cmdline = read_text(root, CMDLINE)
    online = read_online_cpus(root)
    return CpuFacts(
        online_cpus=online,
        numa_nodes=read_numa_nodes(root),
        isolation=read_isolation(root, cmdline or ""),
        governors=read_governors(root, online),
        numa_balancing=read_numa_balancing(root),
        physical_cores=physical_cores(root) if is_live(root) else None,
        cmdline=cmdline.strip() if cmdline else None,
    )


def physical_cores(root: Path = Path("/")) -> int | None:
    """The number of CPU cores: the distinct sibling lists of the CPUs' topology, read as psutil 7.2
    (psutil/_pslinux.py:564-580, cpu_count_cores method 1) reads them, without importing psutil (tens of ms of every
    doctor run); psutil itself where sysfs has no topology."""
    siblings = set()
    for name in ("core_cpus_list", "thread_siblings_list"):
        for path in (root / "sys/devices/system/cpu").glob(f"cpu[0-9]*/topology/{name}"):
            try:
                siblings.add(path.read_bytes().strip())
            except OSError:
                continue
        if siblings:
            return len(siblings)
    return _psutil_cores()


def _psutil_cores() -> int | None:
    try:
        import psutil  # noqa: PLC0415 - optional here, so the module also runs where only the stdlib is
    except ImportError:
        return None
    try:
        return psutil.cpu_count(logical=False)
    except (OSError, psutil.Error):  # /proc or /sys unreadable: the count is unknown
        return None
