"""The recipe's host section from a launch: NUMA node and CPU pinning, shared memory; and the bind address vLLM
used."""

from __future__ import annotations

import re

from stackctl.importer.draft import Draft
from stackctl.importer.launch import Launch
from stackctl.importer.values import fits
from stackctl.recipe import model


def import_host(draft: Draft, launch: Launch) -> None:
    """host.numa, host.isolcpus, host.shm_size; serve.host when the server bound vLLM's default (all interfaces)."""
    if launch.numa and "numa" not in draft.values["host"]:
        nodes = _expand_cpulist(launch.numa)
        if nodes:
            draft.set("host", "numa", nodes[0] if len(nodes) == 1 else nodes, "from numactl / --cpuset-mems")
    if launch.cpus:
        if re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", launch.cpus):
            draft.set("host", "isolcpus", launch.cpus, "the CPUs the old launch was pinned to")
        else:
            draft.notes.append(f"CPU pinning {launch.cpus!r} not imported: set host.isolcpus")
    if launch.shm_size and fits(model.Host, "shm_size", launch.shm_size):
        draft.set("host", "shm_size", launch.shm_size)
    if launch.kind and draft.get("serve", "host") is None:
        draft.set("serve", "host", "0.0.0.0", "vLLM binds all interfaces without --host; stackctl's default is "
                                              "127.0.0.1")


def _expand_cpulist(text: str) -> list[int]:
    """`0,2-3` -> [0, 2, 3]; [] when the text is not such a list."""
    nodes: list[int] = []
    for part in text.split(","):
        if re.fullmatch(r"\d+", part):
            nodes.append(int(part))
        elif re.fullmatch(r"\d+-\d+", part):
            low, high = map(int, part.split("-"))
            nodes += list(range(low, high + 1))
        else:
            return []
    return sorted(set(nodes))
