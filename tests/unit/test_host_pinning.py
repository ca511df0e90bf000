"""Pinning decisions for several recipe policies on the fixture hosts (what runs from them: test_placement.py)."""

import pytest
from helpers import FIXTURES

from stackctl.host import discover
from stackctl.host.cpu import NumaNode
from stackctl.host.gpus import GpuInfo
from stackctl.host.pinning import (
    PinningDecision,
    PinningError,
    choose_cpus,
    choose_nodes,
    decide_pinning,
    pinning_for,
    select_gpus,
)

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
    assert any("isolcpus=domain" in warning for warning in decision.warnings)
    assert decision.kind == "cpulist"


def test_auto_gpus_spanning_nodes_bind_the_union():
    decision = decide(MI300X, tensor_parallel=8)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-47,56-95,104-143,152-191", "0-1")
    assert "GPU(s) 0-7 span NUMA nodes 0-1 -> cpuset_mems=0-1" in decision.reasons
    assert any(warning.startswith("GPU(s) 0-7 span NUMA nodes 0-1: ") for warning in decision.warnings)
    assert decision.nodes == (0, 1)


def test_explicit_gpu_list_on_node_1():
    decision = decide(MI300X, gpu_indices=[4, 6])
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("56-95,152-191", "1")
    assert decision.reasons[0] == "server uses GPU(s) 4,6 (host.gpus)"


def test_auto_without_isolated_cpus_uses_the_whole_node():
    decision = decide(MI355X, tensor_parallel=4)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-63", "0")
    assert decision.whole_nodes and decision.kind == "node" and not decision.warnings
    assert "node 0 has no isolated CPUs -> server may use all its CPUs (0-63)" in decision.reasons


def test_isolcpus_off_takes_every_cpu_of_the_node():
    decision = decide(MI355X, tensor_parallel=2, isolcpus="off")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-63", "0")
    assert decision.kind == "node"


def test_isolcpus_off_is_refused_where_the_node_has_isolated_cpus():
    with pytest.raises(PinningError) as caught:
        decide(MI300X, tensor_parallel=2, isolcpus="off")
    assert caught.value.key == ("host", "isolcpus")
    assert "including isolated CPU(s) 8-47,104-143 the recipe did not ask for" in caught.value.message


def test_explicit_cpulist_within_the_node():
    decision = decide(MI300X, tensor_parallel=2, isolcpus="16-31")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("16-31", "0")
    assert decision.kind == "cpulist"


def test_explicit_cpulist_outside_the_chosen_node_is_refused():
    with pytest.raises(PinningError, match=r"CPU\(s\) 56-63 are not on the chosen NUMA node\(s\) 0"):
        decide(MI300X, tensor_parallel=2, isolcpus="8-15,56-63")


def test_numa_off_pins_nothing():
    decision = decide(MI300X, tensor_parallel=2, numa="off")
    assert decision == PinningDecision(None, None, decision.reasons)
    assert not decision.pinned and decision.kind == "off"
    assert 'numa = "off" -> no NUMA pinning' in decision.reasons


def test_numa_off_with_a_cpulist_pins_cpus_only():
    decision = decide(MI300X, numa="off", isolcpus="8-15,56-63")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("8-15,56-63", None)
    assert decision.kind == "cpulist"


def test_explicit_node_away_from_the_gpus_is_warned():
    decision = decide(MI355X, tensor_parallel=2, numa=1)
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("64-127", "1")
    assert any(warning.startswith("GPU(s) 0-1 are on NUMA node(s) 0") for warning in decision.warnings)


def test_explicit_node_list():
    decision = decide(MI355X, numa=[1, 0], isolcpus="off")
    assert (decision.cpuset_cpus, decision.cpuset_mems) == ("0-127", "0-1")
    assert decision.kind == "node"


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
    assert isolated.kind == "cpulist"


def test_explicit_node_on_a_single_node_host_binds_memory_only():
    gpus = [GpuInfo(0, "gpu", "gfx942", None, 0, None, None, "sysfs")]
    decision = decide_pinning(gpus, [NumaNode(0, list(range(16)))], numa=0)
    assert (decision.cpuset_cpus, decision.cpuset_mems, decision.kind) == (None, "0", "membind")


def test_no_numa_topology_at_all():
    gpus = [GpuInfo(0, "gpu", "gfx942", None, 0, None, None, "sysfs")]
    decision = decide_pinning(gpus, [])
    assert not decision.pinned and "no NUMA topology visible" in decision.reasons[-1]


@pytest.mark.parametrize("policy, message", [
    (dict(numa=2), "host.numa: names NUMA node(s) 2 but this host has node(s) 0-1 (fix: "),
    (dict(isolcpus="190-200"), "host.isolcpus: names CPU(s) 192-200 this host does not have (CPUs 0-191)"),
    (dict(isolcpus="eight"), "host.isolcpus: 'eight' is not a cpulist (fix: write \"auto\", \"off\" or a cpulist"),
    (dict(numa="sometimes"), "host.numa: 'sometimes' is not a NUMA policy"),
    (dict(gpu_indices=[7, 8]), "host.gpus: names GPU(s) 8 but this host has GPUs 0-7"),
    (dict(tensor_parallel=16), "model.tensor_parallel: asks for 16 GPUs; this host has 8"),
])
def test_impossible_requests_are_user_errors(policy, message):
    with pytest.raises(PinningError) as caught:
        decide(MI300X, **policy)
    assert str(caught.value).startswith(message)


def test_a_cpulist_is_checked_against_the_online_cpus_without_numa_topology():
    with pytest.raises(PinningError, match=r"names CPU\(s\) 7 this host does not have \(CPUs 0-1\)"):
        decide_pinning([], [], isolcpus="1,7", online_cpus=[0, 1])
    assert decide_pinning([], [], isolcpus="1", online_cpus=[0, 1]).cpuset_cpus == "1"


def test_the_refusal_names_the_recipe_line_and_the_fix():
    from stackctl.recipe.loader import load_recipe_text

    recipe = load_recipe_text('[stack]\nname = "x"\n[model]\npath = "/m"\n[host]\nisolcpus = "70"\n', "r.toml")
    with pytest.raises(PinningError) as caught:
        pinning_for(recipe, CPU_ONLY)
    line = str(caught.value.located(recipe))
    assert line.startswith("r.toml:6:1: host.isolcpus: names CPU(s) 70 this host does not have (CPUs 0-15) (fix: "), line
    assert "\n" not in line


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


def test_node_choice_follows_the_gpus_and_cpu_choice_stays_on_those_nodes():
    """The two steps of decide_pinning on their own: nodes first (memory and the CPU bound), then CPUs."""
    nodes = {0: set(range(0, 8)), 1: set(range(8, 16))}
    on_node_1 = [GpuInfo(0, "gpu", None, None, 1, None, None, "test")]
    reasons: list[str] = []
    warnings: list[str] = []
    assert choose_nodes("auto", "auto", on_node_1, nodes, reasons, warnings) == ([1], [1])
    assert choose_nodes([0], [0], on_node_1, nodes, reasons, warnings) == ([0], [0])
    assert warnings and "remote to node(s) 1" in warnings[-1]
    assert choose_nodes("auto", "auto", on_node_1, {0: nodes[0]}, reasons, warnings) == ([0], [])
    assert choose_cpus([1], nodes, {9, 10, 2}, "auto", None, [1], False, reasons, warnings) == {9, 10}
    assert choose_cpus([1], nodes, set(), "off", None, [1], False, reasons, warnings) == nodes[1]
    with pytest.raises(PinningError, match="not on the chosen NUMA node"):
        choose_cpus([1], nodes, set(), "2", [2], [1], False, reasons, warnings)
