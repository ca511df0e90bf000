"""Where the server runs: CPUs and memory nodes near its GPUs, from the recipe's [host] policy and host facts.

A pure function of its inputs and the only source of truth for pinning. It returns the CPU list and memory nodes,
and one human-readable reason per decision, so `up --dry-run` and `doctor` can show why. `host/placement.py` alone
turns a decision into what runs (the container's cpuset and the server's launcher).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from stackctl.errors import StackctlError
from stackctl.host.cpu import NumaNode
from stackctl.host.cpulist import format_cpulist, parse_cpulist
from stackctl.host.gpus import GpuInfo

NumaPolicy = Union[str, int, Sequence[int]]


class PinningError(StackctlError):
    """The recipe asks for GPUs, nodes or CPUs this host does not have, or for a placement that cannot work."""

    def __init__(self, message: str, key: tuple[str, ...], fix: str):
        super().__init__(f"{'.'.join(key)}: {message} (fix: {fix})")
        self.message, self.key, self.fix = message, key, fix

    def located(self, recipe: Any) -> StackctlError:
        """The same error as one line naming the recipe file, the key's line and the fix."""
        from stackctl.findings import Finding, key_path_text
        from stackctl.recipe.positions import lookup

        line, col = lookup(getattr(recipe, "positions", {}), self.key)
        finding = Finding(getattr(recipe, "source", "<recipe>"), line, col, key_path_text(self.key), self.message,
                          self.fix)
        return StackctlError(finding.format())


@dataclass(frozen=True)
class PinningDecision:
    """The server's CPU list and memory nodes as cpulist strings (None: not pinned), and why."""

    cpuset_cpus: str | None
    cpuset_mems: str | None
    reasons: list[str] = field(default_factory=list, hash=False)
    nodes: tuple[int, ...] = ()  # NUMA nodes the memory is bound to
    whole_nodes: bool = False  # cpuset_cpus is exactly the CPUs of `nodes`
    warnings: list[str] = field(default_factory=list, hash=False)  # placements that work but cost throughput

    @property
    def pinned(self) -> bool:
        return self.cpuset_cpus is not None or self.cpuset_mems is not None

    @property
    def kind(self) -> str:
        """node (whole NUMA nodes), cpulist (chosen CPUs, memory bound or not), membind (memory only) or off."""
        if not self.pinned:
            return "off"
        if self.whole_nodes:
            return "node"
        return "cpulist" if self.cpuset_cpus else "membind"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "cpus": self.cpuset_cpus, "mems": self.cpuset_mems, "nodes": list(self.nodes),
                "reasons": list(self.reasons), "warnings": list(self.warnings)}


def select_gpus(gpus: Sequence[GpuInfo], tensor_parallel: int = 1,
                gpu_indices: Sequence[int] | None = None) -> list[GpuInfo]:
    """The GPUs a server uses: `gpu_indices` when given, else the first `tensor_parallel`. [] on a GPU-less host."""
    if not gpus:
        return []
    by_index = {gpu.index: gpu for gpu in gpus}
    have = format_cpulist(by_index)
    if gpu_indices is not None:
        missing = [i for i in gpu_indices if i not in by_index]
        if missing:
            raise PinningError(f"names GPU(s) {format_cpulist(missing)} but this host has GPUs {have}",
                               ("host", "gpus"), "name GPUs this host has (`stackctl doctor --scope host` lists them)")
        return [by_index[i] for i in gpu_indices]
    if tensor_parallel > len(gpus):
        raise PinningError(f"asks for {tensor_parallel} GPUs; this host has {len(gpus)} ({have})",
                           ("model", "tensor_parallel"), "lower tensor_parallel or run on a bigger host")
    return sorted(gpus, key=lambda gpu: gpu.index)[:tensor_parallel]


def decide_pinning(
    gpus: Sequence[GpuInfo],
    numa_nodes: Sequence[NumaNode],
    isolated_cpus: Iterable[int] = (),
    numa: NumaPolicy = "auto",
    isolcpus: str = "auto",
    tensor_parallel: int = 1,
    gpu_indices: Sequence[int] | None = None,
    domain_isolated: bool = False,
    online_cpus: Iterable[int] = (),
) -> PinningDecision:
    """Decide cpuset_cpus/cpuset_mems for a server using some of `gpus` (see select_gpus).

    numa: "auto" (the used GPUs' nodes), "off", a node or a list of nodes. isolcpus: "auto" (the isolated CPUs
    of those nodes if any, else all their CPUs), "off" (all their CPUs) or an explicit cpulist.
    domain_isolated: the isolated CPUs get no scheduler load balancing (isolcpus=domain), worth a warning.
    online_cpus: the host's CPUs (a host without NUMA topology in sysfs still has CPUs).

    Refused (PinningError): a node or CPU the host does not have, CPUs outside the chosen node(s), and a CPU list
    that would include isolated CPUs the recipe did not ask for.
    """
    reasons: list[str] = []
    warnings: list[str] = []
    node_cpus = {node.node: set(node.cpus) for node in numa_nodes}
    host_cpus: set[int] = set(online_cpus).union(*node_cpus.values())
    numa_policy = _numa_policy(numa)
    explicit_cpus = _cpus_policy(isolcpus, host_cpus)
    used = select_gpus(gpus, tensor_parallel, gpu_indices)
    if used:
        how = "host.gpus" if gpu_indices is not None else f"the first tensor_parallel={tensor_parallel}"
        reasons.append(f"server uses GPU(s) {_gpu_list(used)} ({how})")
    cpu_nodes, mem_nodes = choose_nodes(numa_policy, numa, used, node_cpus, reasons, warnings)
    cpus = choose_cpus(cpu_nodes, node_cpus, set(isolated_cpus), isolcpus, explicit_cpus, numa_policy,
                        domain_isolated, reasons, warnings)
    cpuset_cpus = format_cpulist(cpus) or None
    cpuset_mems = format_cpulist(mem_nodes) or None
    whole = bool(mem_nodes) and cpus == set().union(*(node_cpus[n] for n in mem_nodes))
    return PinningDecision(cpuset_cpus, cpuset_mems, reasons, tuple(mem_nodes), whole, warnings)


def choose_nodes(numa_policy: str | list[int], numa: NumaPolicy, used: Sequence[GpuInfo],
                  node_cpus: dict[int, set[int]], reasons: list[str],
                  warnings: list[str]) -> tuple[list[int], list[int]]:
    """Which NUMA nodes: cpu_nodes bound the CPU choice, mem_nodes become cpuset_mems. Appends why."""
    gpu_nodes = sorted({g.numa_node for g in used if g.numa_node is not None})
    if numa_policy == "off":
        reasons.append('numa = "off" -> no NUMA pinning')
        return [], []
    if isinstance(numa_policy, list):
        missing = [n for n in numa_policy if n not in node_cpus]
        if missing:
            raise PinningError(f"names NUMA node(s) {format_cpulist(missing)} but this host has node(s) "
                               f"{format_cpulist(node_cpus) or 'none'}", ("host", "numa"),
                               'name a node this host has, or numa = "auto" (the GPUs\' node)')
        reasons.append(f"numa = {_numa_text(numa)} in the recipe -> cpuset_mems={format_cpulist(numa_policy)}")
        away = [n for n in gpu_nodes if n not in numa_policy]
        if away:
            warnings.append(f"GPU(s) {_gpu_list(used)} are on NUMA node(s) {format_cpulist(gpu_nodes)}; "
                            f"host memory on node(s) {format_cpulist(numa_policy)} is remote to node(s) "
                            f"{format_cpulist(away)}")
        return numa_policy, numa_policy
    if not node_cpus:
        reasons.append("no NUMA topology visible (/sys/devices/system/node) -> no NUMA pinning")
        return [], []
    if not used:
        reasons.append("no GPU on this host -> nothing to place the server near, no NUMA pinning")
        return [], []
    if len(node_cpus) == 1:
        reasons.append(f"one NUMA node ({next(iter(node_cpus))}) -> memory placement needs no pinning")
        return list(node_cpus), []
    unknown = [g for g in used if g.numa_node is None]
    if unknown:
        reasons.append(f"NUMA node of GPU(s) {_gpu_list(unknown)} unknown (sysfs numa_node -1) -> "
                       "no NUMA pinning")
        return [], []
    where = (f"are on NUMA node {gpu_nodes[0]}" if len(gpu_nodes) == 1
             else f"span NUMA nodes {format_cpulist(gpu_nodes)}")
    reasons.append(f"GPU(s) {_gpu_list(used)} {where} -> cpuset_mems={format_cpulist(gpu_nodes)}")
    if len(gpu_nodes) > 1:
        warnings.append(f"GPU(s) {_gpu_list(used)} span NUMA nodes {format_cpulist(gpu_nodes)}: every GPU "
                        "has remote host memory and CPUs part of the time (host.gpus on one node avoids it)")
    return gpu_nodes, gpu_nodes


def choose_cpus(cpu_nodes: list[int], node_cpus: dict[int, set[int]], isolated: set[int], isolcpus: str,
                 explicit_cpus: list[int] | None, numa_policy: str | list[int], domain_isolated: bool,
                 reasons: list[str], warnings: list[str]) -> set[int]:
    """Which CPUs, within cpu_nodes when there are any (empty set: not pinned). Appends why."""
    cpus: set[int] = set()
    chosen_node_cpus: set[int] = set().union(*(node_cpus[n] for n in cpu_nodes)) if cpu_nodes else set()
    if explicit_cpus is not None:
        cpus = set(explicit_cpus)
        reasons.append(f'isolcpus = "{isolcpus}" in the recipe -> server pinned to CPUs {format_cpulist(cpus)}')
        outside = cpus - chosen_node_cpus if cpu_nodes else set()
        if outside:
            raise PinningError(f"CPU(s) {format_cpulist(outside)} are not on the chosen NUMA node(s) "
                               f"{format_cpulist(cpu_nodes)} (CPUs {format_cpulist(chosen_node_cpus)})",
                               ("host", "isolcpus"), f"name CPUs of node(s) {format_cpulist(cpu_nodes)}, or set "
                               "host.numa to the node that has them")
    elif not cpu_nodes:
        if isolcpus == "auto" and isolated and numa_policy == "off":
            reasons.append('isolcpus = "auto" looks for isolated CPUs on the GPUs\' node; numa = "off" chose '
                           "none -> no CPU pinning")
    elif isolcpus == "auto":
        cpus = isolated & chosen_node_cpus
        reasons.extend(_isolation_reasons(cpu_nodes, node_cpus, isolated, bool(cpus)))
        if cpus and domain_isolated:
            warnings.append("these CPUs are isolated with isolcpus=domain: the kernel does not balance load "
                            "across them, so processes that are not pinned one per CPU may share a single CPU")
        if not cpus and len(node_cpus) > 1:
            cpus = chosen_node_cpus
    elif len(node_cpus) > 1:  # isolcpus = "off"
        cpus = chosen_node_cpus
        unasked = cpus & isolated
        if unasked:
            raise PinningError('"off" would pin the server to every CPU of NUMA node(s) '
                               f"{format_cpulist(cpu_nodes)}, including isolated CPU(s) {format_cpulist(unasked)} the recipe did not ask for",
                               ("host", "isolcpus"), 'isolcpus = "auto" to use the isolated CPUs, or a cpulist of '
                               "exactly the CPUs the server may use")
        reasons.append(f'isolcpus = "off" -> all CPUs of NUMA node(s) {format_cpulist(cpu_nodes)} '
                       f"({format_cpulist(cpus)})")
    if len(node_cpus) == 1 and cpu_nodes and not cpus and explicit_cpus is None:
        reasons.append("no CPU pinning needed: the server may use every CPU")
    return cpus


def pinning_for(recipe: Any, facts: Any) -> PinningDecision:
    """decide_pinning with the recipe's [host] policy and [model] tensor_parallel, on discovered HostFacts."""
    host = recipe.host
    return decide_pinning(
        facts.gpus,
        facts.cpu.numa_nodes,
        facts.cpu.isolated_cpus,
        numa=host.numa,
        isolcpus=host.isolcpus,
        tensor_parallel=recipe.model.tensor_parallel,
        gpu_indices=host.gpus,
        domain_isolated=facts.cpu.isolation.domain_isolated,
        online_cpus=facts.cpu.online_cpus,
    )


def _isolation_reasons(cpu_nodes: list[int], node_cpus: dict[int, set[int]], isolated: set[int],
                       any_used: bool) -> list[str]:
    reasons = []
    for node in cpu_nodes:
        mine = isolated & node_cpus[node]
        if mine:
            reasons.append(f"node {node} has isolated CPUs {format_cpulist(mine)} -> server pinned to them")
        elif any_used:
            reasons.append(f"node {node} has no isolated CPUs -> none of its CPUs are used")
        elif len(node_cpus) > 1:
            reasons.append(f"node {node} has no isolated CPUs -> server may use all its CPUs "
                           f"({format_cpulist(node_cpus[node])})")
    return reasons


def _numa_policy(numa: NumaPolicy) -> str | list[int]:
    if isinstance(numa, bool):
        raise _bad_numa(numa)
    if numa in ("auto", "off"):
        return numa  # type: ignore[return-value]
    if isinstance(numa, int):
        return [numa]
    if isinstance(numa, (list, tuple)) and numa and all(isinstance(n, int) and not isinstance(n, bool)
                                                         for n in numa):
        return sorted(set(numa))
    raise _bad_numa(numa)


def _bad_numa(numa: Any) -> PinningError:
    return PinningError(f"{numa!r} is not a NUMA policy", ("host", "numa"),
                        'write "auto", "off", a node (0) or a list of nodes ([0, 1])')


def _cpus_policy(isolcpus: str, host_cpus: set[int]) -> list[int] | None:
    """None for "auto"/"off", else the explicit CPUs, checked against the host's."""
    if isolcpus in ("auto", "off"):
        return None
    try:
        cpus = parse_cpulist(isolcpus)
    except ValueError:
        raise PinningError(f"{isolcpus!r} is not a cpulist", ("host", "isolcpus"),
                           'write "auto", "off" or a cpulist such as "8-15,24"') from None
    if not cpus:
        raise PinningError("is an empty cpulist", ("host", "isolcpus"), 'write "off" to pin no CPU')
    absent = [cpu for cpu in cpus if host_cpus and cpu not in host_cpus]
    if absent:
        raise PinningError(f"names CPU(s) {format_cpulist(absent)} this host does not have "
                           f"(CPUs {format_cpulist(host_cpus)})", ("host", "isolcpus"),
                           "name CPUs of this host, or \"auto\"")
    return cpus


def _gpu_list(gpus: Sequence[GpuInfo]) -> str:
    return format_cpulist(g.index for g in gpus)


def _numa_text(numa: NumaPolicy) -> str:
    return str(list(numa)) if isinstance(numa, (list, tuple)) else str(numa)
