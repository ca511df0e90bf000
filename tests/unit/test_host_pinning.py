"""Pinning decisions for several recipe policies on the fixture hosts."""

import pytest
from helpers import FIXTURES

from stackctl.host import discover
from stackctl.host.cpu import NumaNode
from stackctl.host.gpus import GpuInfo
from stackctl.host.pinning import PinningDecision, PinningError, decide_pinning, pinning_for, select_gpus

SYSFS = FIXTURES / "sysfs"
MI300X = discover(SYSFS / "mi300x-8gpu-2node")
MI355X = discover(SYSFS / "mi355x-8gpu-2node")
CPU_ONLY = discover(SYSFS / "cpu-only-1node")


def decide(facts, **policy):
    return decide_pinning(facts.gpus, facts.cpu.numa_nodes, facts.cpu.isolated_cpus,
                          domain_isolated=facts.cpu.isolation.domain_isolated, **policy)


def test_auto_tp2_on_mi300x_uses_isolated_cpus_of_node_0():
    decision = decide(MI300X, tensor_parallel=2)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-47,104-143", "0")
    assert "GPU(s) 0-1 are on NUMA node 0 -> cpuset_mems=0" in decision.reasons
    assert "node 0 has isolated CPUs 8-47,104-143 -> server pinned to them" in decision.reasons
    assert any("isolcpus=domain" in reason for reason in decision.reasons)
    assert decision.launch_prefix() == ["numactl", "--physcpubind=8-47,104-143", "--membind=0"]
    assert decision.docker_kwargs() == {"cpuset_cpus": "8-47,104-143", "cpuset_mems": "0"}


def test_auto_gpus_spanning_nodes_bind_the_union():
    decision = decide(MI300X, tensor_parallel=8)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-47,56-95,104-143,152-191", "0-1")
    assert "GPU(s) 0-7 span NUMA nodes 0-1 -> cpuset_mems=0-1" in decision.reasons
    assert decision.nodes == (0, 1)


def test_explicit_gpu_list_on_node_1():
    decision = decide(MI300X, gpu_indices=[4, 6])
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("56-95,152-191", "1")
    assert decision.reasons[0] == "server uses GPU(s) 4,6 (host.gpus)"


def test_auto_without_isolated_cpus_uses_the_whole_node():
    decision = decide(MI355X, tensor_parallel=4)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-63", "0")
    assert decision.whole_nodes
    assert decision.launch_prefix() == ["numactl", "--cpunodebind=0", "--membind=0"]
    assert "node 0 has no isolated CPUs -> server may use all its CPUs (0-63)" in decision.reasons


def test_isolcpus_off_takes_every_cpu_of_the_node():
    decision = decide(MI300X, tensor_parallel=2, isolcpus="off")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-47,96-143", "0")
    assert decision.launch_prefix() == ["numactl", "--cpunodebind=0", "--membind=0"]


def test_explicit_cpulist_within_the_node():
    decision = decide(MI300X, tensor_parallel=2, isolcpus="16-31")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("16-31", "0")
    assert not any(reason.startswith("note: CPU(s)") for reason in decision.reasons)


def test_explicit_cpulist_on_the_wrong_node_is_noted():
    decision = decide(MI300X, tensor_parallel=2, isolcpus="56-63")
    assert decision.cpuset_cpus == "56-63"
    assert "note: CPU(s) 56-63 are not on NUMA node(s) 0" in decision.reasons


def test_numa_off_pins_nothing():
    decision = decide(MI300X, tensor_parallel=2, numa="off")
    assert decision == PinningDecision(None, None, decision.reasons)
    assert not decision.pinned and decision.launch_prefix() == [] and decision.docker_kwargs() == {}
    assert 'numa = "off" -> no NUMA pinning' in decision.reasons


def test_numa_off_with_a_cpulist_pins_cpus_only_with_taskset():
    decision = decide(MI300X, numa="off", isolcpus="8-15")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-15", None)
    assert decision.launch_prefix() == ["taskset", "-c", "8-15"]


def test_explicit_node_away_from_the_gpus_is_noted():
    decision = decide(MI355X, tensor_parallel=2, numa=1)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("64-127", "1")
    assert any(reason.startswith("note: GPU(s) 0-1 are on NUMA node(s) 0") for reason in decision.reasons)


def test_explicit_node_list():
    decision = decide(MI355X, numa=[1, 0], isolcpus="off")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-127", "0-1")
    assert decision.launch_prefix() == ["numactl", "--cpunodebind=0-1", "--membind=0-1"]


def test_no_gpu_host_is_not_pinned_and_says_why():
    decision = decide(CPU_ONLY, tensor_parallel=1)
    assert not decision.pinned
    assert decision.reasons == ["no GPU on this host -> nothing to place the server near, no NUMA pinning"]


def test_unknown_gpu_numa_node_means_no_pinning():
    gpus = [GpuInfo(0, "gpu", "gfx942", None, None, None, None, "sysfs")]
    nodes = [NumaNode(0, [0, 1]), NumaNode(1, [2, 3])]
    decision = decide_pinning(gpus, nodes)
    assert not decision.pinned
    assert decision.reasons[-1] == "NUMA node of GPU(s) 0 unknown (sysfs numa_node -1) -> no NUMA pinning"


def test_single_node_host_pins_memory_never_and_cpus_only_to_isolated_ones():
    gpus = [GpuInfo(0, "gpu", "gfx942", None, 0, None, None, "sysfs")]
    nodes = [NumaNode(0, list(range(16)))]
    plain = decide_pinning(gpus, nodes)
    assert not plain.pinned
    assert "one NUMA node (0) -> memory placement needs no pinning" in plain.reasons
    isolated = decide_pinning(gpus, nodes, isolated_cpus=range(4, 16))
    assert (isolated.cpuset_cpus, isolated.cpuset_mems) == ("4-15", None)
    assert isolated.launch_prefix() == ["taskset", "-c", "4-15"]


def test_no_numa_topology_at_all():
    gpus = [GpuInfo(0, "gpu", "gfx942", None, 0, None, None, "sysfs")]
    decision = decide_pinning(gpus, [])
    assert not decision.pinned and "no NUMA topology visible" in decision.reasons[-1]


@pytest.mark.parametrize("policy, message", [
    (dict(numa=2), "node(s) 2 but this host has NUMA node(s) 0-1"),
    (dict(isolcpus="190-200"), "CPU(s) 192-200 this host does not have"),
    (dict(isolcpus="eight"), "must be \"auto\", \"off\" or a cpulist"),
    (dict(numa="sometimes"), "host.numa must be"),
    (dict(gpu_indices=[7, 8]), "GPU(s) 8 but this host has GPUs 0-7"),
    (dict(tensor_parallel=16), "tensor_parallel = 16 needs 16 GPUs; this host has 8"),
])
def test_impossible_requests_are_user_errors(policy, message):
    with pytest.raises(PinningError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decide(MI300X, **policy)


def test_select_gpus():
    assert [g.index for g in select_gpus(MI300X.gpus, 3)] == [0, 1, 2]
    assert [g.index for g in select_gpus(MI300X.gpus, 8, gpu_indices=[5])] == [5]
    assert select_gpus([], 4) == []


def test_pinning_for_reads_the_recipe_policy():
    class Section:
        def __init__(self, **values):
            self.__dict__.update(values)

    recipe = Section(host=Section(numa="auto", isolcpus="auto", gpus=None), model=Section(tensor_parallel=4))
    decision = pinning_for(recipe, MI300X)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-47,104-143", "0")


def test_decision_to_dict_carries_the_launch_prefix():
    data = decide(MI355X, tensor_parallel=1).to_dict()
    assert data["launch_prefix"] == ["numactl", "--cpunodebind=0", "--membind=0"]
    assert data["cpuset_mems"] == "0" and data["reasons"]
