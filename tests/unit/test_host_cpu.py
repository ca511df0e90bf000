"""CPU, NUMA, memory and device facts read from fixture trees."""

import json
from pathlib import Path

import pytest
from helpers import FIXTURES

from stackctl.host.cpu import (
    CpuFacts,
    kernel_args,
    parse_isolcpus,
    read_cpu_facts,
    read_isolation,
)
from stackctl.host.cpulist import parse_cpulist
from stackctl.host.devices import read_device_facts
from stackctl.host.memory import parse_meminfo, read_memory

SYSFS = FIXTURES / "sysfs"
MI300X = SYSFS / "mi300x-8gpu-2node"
MI355X = SYSFS / "mi355x-8gpu-2node"
CPU_ONLY = SYSFS / "cpu-only-1node"
MI300X_ISOLATED = parse_cpulist("8-47,56-95,104-143,152-191")


def test_mi300x_numa_nodes_and_cpus():
    cpu = read_cpu_facts(MI300X)
    assert cpu.online_cpus == list(range(192))
    assert [n.node for n in cpu.numa_nodes] == [0, 1]
    assert cpu.numa_nodes[0].cpus == parse_cpulist("0-47,96-143")
    assert cpu.numa_nodes[1].cpus == parse_cpulist("48-95,144-191")
    assert cpu.numa_nodes[0].mem_total_bytes == 792_476_160 * 1024


def test_mi300x_isolation_governors_and_numa_balancing():
    cpu = read_cpu_facts(MI300X)
    assert cpu.isolated_cpus == MI300X_ISOLATED
    assert cpu.isolation.source == "sysfs" and cpu.isolation.domain_isolated
    assert cpu.isolation.isolcpus_flags == ["managed_irq", "domain"]
    assert cpu.isolation.nohz_full == MI300X_ISOLATED
    assert cpu.governor_summary() == {"performance": "0-191"}
    assert cpu.numa_balancing == 1
    assert cpu.physical_cores is None  # psutil describes this machine, not a fixture


def test_vm_without_cpufreq_or_numa_balancing():
    cpu = read_cpu_facts(CPU_ONLY)
    assert [n.node for n in cpu.numa_nodes] == [0] and cpu.numa_nodes[0].cpus == list(range(16))
    assert set(cpu.governors.values()) == {None}
    assert cpu.governor_summary() == {"none": "0-15"}
    assert cpu.numa_balancing is None
    assert cpu.isolated_cpus == [] and cpu.isolation.source is None


def test_nohz_full_null_means_none():
    isolation = read_cpu_facts(MI355X).isolation
    assert isolation.cpus == [] and isolation.nohz_full == []


@pytest.mark.parametrize("value, flags, cpus", [
    ("2-7", [], [2, 3, 4, 5, 6, 7]),
    ("managed_irq,domain,2-7", ["managed_irq", "domain"], [2, 3, 4, 5, 6, 7]),
    ("nohz,domain,2-3,10", ["nohz", "domain"], [2, 3, 10]),
    ("domain,garbage-cpus", ["domain"], []),
])
def test_parse_isolcpus(value, flags, cpus):
    assert parse_isolcpus(value) == (flags, cpus)


def test_kernel_args_stop_at_init_arguments():
    args = kernel_args('ro quiet isolcpus=2-3 foo="a b" -- isolcpus=9 --init-flag')
    assert args == [("ro", None), ("quiet", None), ("isolcpus", "2-3"), ("foo", "a b")]


@pytest.mark.parametrize("cmdline, cpus, source, domain", [
    ("ro isolcpus=2-7", [2, 3, 4, 5, 6, 7], "cmdline:isolcpus", True),
    ("ro isolcpus=managed_irq,domain,2-7", [2, 3, 4, 5, 6, 7], "cmdline:isolcpus", True),
    ("ro isolcpus=nohz,managed_irq,4-5", [4, 5], "cmdline:isolcpus", False),
    ("ro nohz_full=4-7", [4, 5, 6, 7], "cmdline:nohz_full", False),
    ("ro isolcpus=1 isolcpus=6", [6], "cmdline:isolcpus", True),
    ("ro quiet", [], None, False),
])
def test_isolation_from_cmdline_when_sysfs_has_none(tmp_path, cmdline, cpus, source, domain):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text(cmdline + "\n")
    isolation = read_isolation(tmp_path)
    assert (isolation.cpus, isolation.source, isolation.domain_isolated) == (cpus, source, domain)


def test_sysfs_isolated_wins_over_cmdline(tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/isolated").write_text("2-3\n")
    isolation = read_isolation(tmp_path, cmdline="isolcpus=2-5")
    assert isolation.cpus == [2, 3] and isolation.source == "sysfs" and isolation.isolcpus == [2, 3, 4, 5]


def test_cpu_facts_round_trip_through_json():
    cpu = read_cpu_facts(MI300X)
    assert CpuFacts.from_dict(json.loads(json.dumps(cpu.to_dict()))) == cpu


def test_memory_from_meminfo():
    memory = read_memory(CPU_ONLY)
    assert memory.total_bytes == 65_842_176 * 1024
    assert memory.available_bytes == 61_203_456 * 1024
    assert parse_meminfo("HugePages_Total:      16\nHugepagesize:       2048 kB\n") == {
        "HugePages_Total": 16, "Hugepagesize": 2 * 1024 * 1024}


def test_memory_unknown_on_empty_root(tmp_path):
    memory = read_memory(tmp_path)
    assert (memory.total_bytes, memory.available_bytes) == (None, None)


def test_devices_and_groups_on_gpu_host():
    devices = read_device_facts(MI300X, user="ubuntu", uid=1000, gids=[1000, 44])
    assert devices.kfd
    assert devices.render_nodes == [f"/dev/dri/renderD{128 + i}" for i in range(8)]
    video, render = devices.groups
    assert (video.name, video.gid, video.listed, video.effective) == ("video", 44, True, True)
    # Listed in /etc/group but the session predates it: a new login is needed.
    assert (render.name, render.gid, render.listed, render.effective) == ("render", 110, True, False)
    assert devices.in_group("render") and not devices.is_root


def test_user_outside_the_groups():
    devices = read_device_facts(MI355X, user="ubuntu", uid=1000, gids=[1000])
    assert not devices.in_group("video") and not devices.in_group("render")


def test_no_gpu_devices_and_no_render_group():
    devices = read_device_facts(CPU_ONLY, user="root", uid=0, gids=[0])
    assert not devices.kfd and devices.render_nodes == []
    assert [g.gid for g in devices.groups] == [44, None]
    assert devices.is_root


def test_memory_of_this_machine_comes_from_psutil_when_meminfo_cannot_be_read(monkeypatch):
    import psutil

    from stackctl.host import memory as memory_module

    monkeypatch.setattr(memory_module, "read_text", lambda root, path: None)  # /proc/meminfo unreadable
    memory = read_memory(Path("/"))
    assert memory.total_bytes == psutil.virtual_memory().total and memory.available_bytes > 0
    assert parse_meminfo("garbage line\nMemFree:\nMemTotal: x kB\nSwapTotal: 0 kB\n") == {"SwapTotal": 0}


def test_physical_cores_are_the_distinct_sibling_lists_as_psutil_counts_them(tmp_path):
    import psutil

    from stackctl.host.cpu import physical_cores

    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        topology = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(siblings + "\n")
    assert physical_cores(tmp_path) == 2
    (tmp_path / "sys/devices/system/cpu/cpu0/topology/core_cpus_list").write_text("0\n")  # the newer name wins
    assert physical_cores(tmp_path) == 1
    assert physical_cores() == psutil.cpu_count(logical=False)  # this machine, both ways
