"""server.pinning, host.pinning and host.isolcpus judged on captured facts: /proc output from a pinned vLLM CPU
container and the captured sysfs hosts. The same checks run against a live server in
tests/integration/test_pinning.py."""

from __future__ import annotations

import pytest
from fake_engine import FakeEngine
from helpers import FIXTURES

from stackctl.doctor.affinity import Expected, compare, narrowed, parse_proc
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.engine.records import ContainerState
from stackctl.host import discover
from stackctl.recipe.loader import load_recipe_text
from stackctl.bundle.stackspec import StackSpec

load_all()
PROC = (FIXTURES / "proc" / "vllm-cpu-0.32-cpus-0-1.txt").read_text()
SYSFS = FIXTURES / "sysfs"
MI300X = discover(SYSFS / "mi300x-8gpu-2node")
MI355X = discover(SYSFS / "mi355x-8gpu-2node")
CPU_ONLY = discover(SYSFS / "cpu-only-1node")
BOTH = Expected({0, 1}, set(), "0-1", "")


def test_the_server_is_pid_1_and_its_descendants_not_exec_shells():
    view = parse_proc(PROC)
    assert [(p.pid, p.name) for p in view.processes] == [(1, "python"), (23, "python"), (24, "VLLM::EngineCor"),
                                                         (37, "VLLM::Worker")]
    assert view.numactl == "/usr/bin/numactl"
    assert view.processes[3].cpus == {0} and view.processes[0].mems == {0}


def test_decided_placement_with_a_worker_narrowed_inside_it_has_no_problem():
    view = parse_proc(PROC)
    assert compare(view, BOTH, ("0-1", "")) == []
    assert narrowed(view, BOTH) == ["VLLM::Worker (pid 37) on CPUs 0"]


def test_drift_names_the_process_what_it_has_and_what_was_asked():
    drifted = PROC.replace("/proc/1/status:Cpus_allowed_list:\t0-1", "/proc/1/status:Cpus_allowed_list:\t1")
    drifted = drifted.replace("/proc/37/status:Cpus_allowed_list:\t0", "/proc/37/status:Cpus_allowed_list:\t2")
    problems = compare(parse_proc(drifted), BOTH, ("1", ""))
    assert problems == ["container cpuset cpus 1, asked for 0-1", "python (pid 1) has CPUs 1, asked for 0-1",
                        "VLLM::Worker (pid 37) has CPUs 2, asked for 0-1"]


def test_an_unpinned_decision_wants_an_unset_cpuset():
    assert compare(parse_proc(PROC), Expected(set(), set(), "", ""), ("0-1", "0")) == [
        "container cpuset cpus 0-1, asked for unset", "container cpuset mems 0, asked for unset"]


@pytest.fixture
def engine(monkeypatch):
    return FakeEngine().install(monkeypatch)


def pinned(engine, output: str, cpus: str = "", mems: str = ""):
    """A container of the fake engine with the two things server.pinning asks of it: the output of its /proc script
    (run by exec: its init process is not this machine's, pid 0) and the engine's cpuset."""
    name = f"p{len(engine.container_records)}"
    engine.add_container(name, cpuset=(cpus, mems), state=ContainerState(status="running"))
    engine.on_exec = lambda container, argv: (0, output, "") if container == name else (1, "", "no such process")
    return engine.find_container(engine.client(), name)


class Context:
    def __init__(self, recipe, host, container=None):
        self.recipe, self.host, self._container = recipe, host, container
        self.spec = StackSpec(self.recipe)

    def container(self):
        return self._container


def recipe(host_lines: str = "", platform: str = "rocm", tp: int = 1):
    return load_recipe_text(f'[stack]\nname = "p"\nplatform = "{platform}"\n[model]\npath = "/m"\n'
                            f"tensor_parallel = {tp}\n[host]\n{host_lines}\n", "p.toml")


def on_node(proc_text: str, cpus: str, mems: str) -> str:
    """The captured processes moved to other CPUs and memory nodes (as on a GPU host)."""
    lines = []
    for line in proc_text.splitlines():
        if "Cpus_allowed_list" in line:
            line = line.rsplit("\t", 1)[0] + "\t" + cpus
        elif "Mems_allowed_list" in line:
            line = line.rsplit("\t", 1)[0] + "\t" + mems
        lines.append(line)
    return "\n".join(lines)


def test_server_pinning_skips_only_without_gpu_facts_and_without_an_explicit_request(engine):
    result = CHECKS["server.pinning"].run(Context(recipe(platform="cpu"), CPU_ONLY))
    assert result.status == "skip" and "no GPU facts" in result.message
    explicit = CHECKS["server.pinning"].run(Context(recipe('isolcpus = "0-1"', "cpu"), CPU_ONLY,
                                                    pinned(engine, PROC, "0-1")))
    assert explicit.status == "pass", explicit.message
    assert "on CPUs 0-1 (node 0)" in explicit.message and explicit.details["placement"]["cpus"] == "0-1"


def test_server_pinning_on_the_gpus_node_passes_and_off_it_fails(engine):
    near = pinned(engine, on_node(PROC, "0-63", "0"), "0-63", "0")
    result = CHECKS["server.pinning"].run(Context(recipe(tp=2), MI355X, near))
    assert result.status == "pass", result.message
    assert result.details["placement"] == {"nodes": "0", "cpus": "0-63", "mems": "0",
                                           "decided": result.details["placement"]["decided"],
                                           "launcher": ["numactl", "--cpunodebind=0", "--membind=0"]}
    far = pinned(engine, on_node(PROC, "64-127", "1"), "64-127", "1")
    result = CHECKS["server.pinning"].run(Context(recipe(tp=2), MI355X, far))
    assert result.status == "fail"
    assert "container cpuset cpus 64-127, asked for 0-63" in result.message
    assert "python (pid 1) has memory nodes 1, asked for 0" in result.message


def test_server_pinning_warns_when_the_recipe_itself_chose_a_remote_node(engine):
    far = pinned(engine, on_node(PROC, "64-127", "1"), "64-127", "1")
    result = CHECKS["server.pinning"].run(Context(recipe("numa = 1", tp=2), MI355X, far))
    assert result.status == "warn" and "GPU(s) are on node(s) 0" in result.message


def test_server_pinning_fails_when_numactl_is_missing(engine):
    missing = on_node(PROC, "0-63", "0").replace("numactl=/usr/bin/numactl", "numactl=")
    result = CHECKS["server.pinning"].run(Context(recipe(tp=2), MI355X, pinned(engine, missing, "0-63", "0")))
    assert result.status == "fail" and "numactl is not in the image" in result.message


@pytest.mark.parametrize("host_lines, tp, status, words", [
    ("", 2, "warn", "cpuset_cpus=8-47,104-143 cpuset_mems=0, launcher numactl --physcpubind=8-47,104-143"),
    ('isolcpus = "off"', 2, "fail", "including isolated CPU(s) 8-47,104-143 the recipe did not ask for"),
    ("numa = 3", 1, "fail", "host.numa: names NUMA node(s) 3 but this host has node(s) 0-1"),
    ('isolcpus = "56-63"', 1, "fail", "CPU(s) 56-63 are not on the chosen NUMA node(s) 0"),
])
def test_host_pinning_on_the_mi300x(host_lines, tp, status, words):
    result = CHECKS["host.pinning"].run(Context(recipe(host_lines, tp=tp), MI300X))
    assert result.status == status and words in result.message, result.message


def test_host_pinning_warns_when_gpus_span_nodes():
    result = CHECKS["host.pinning"].run(Context(recipe(tp=8), MI355X))
    assert result.status == "warn" and "span NUMA nodes 0-1" in result.message


def test_host_isolcpus_reports_what_the_kernel_has():
    result = CHECKS["host.isolcpus"].run(Context(recipe('isolcpus = "8-15"'), MI300X))
    assert result.status == "pass"
    assert "isolcpus=managed_irq,domain,8-47,56-95,104-143,152-191" in result.message
    assert "nohz_full=8-47,56-95,104-143,152-191 rcu_nocbs=8-47,56-95,104-143,152-191" in result.message
    result = CHECKS["host.isolcpus"].run(Context(recipe('isolcpus = "0-3"'), MI355X))
    assert result.status == "warn" and "CPUs 0-3 are not isolated" in result.message
    assert "kernel: isolated=(none)" in result.message
    result = CHECKS["host.isolcpus"].run(Context(recipe('isolcpus = "200"'), MI355X))
    assert result.status == "warn" and "CPUs 200 do not exist on this host" in result.message


def fake_proc(tmp_path, container_id="c0ffee", nspid_init="5000\t1"):
    """A /proc as this machine sees a container: its PID 1 (5000 here) and a worker (5001, pid 7 inside), a shell
    `docker exec` started (5002: its parent is the engine's shim, not PID 1), and a process of the machine's own."""
    proc = tmp_path / "proc"
    rows = {"5000": ("python", "4990", nspid_init, "0-1", "0"), "5001": ("VLLM::EngineCore", "5000", "5001\t7", "1", "0"),
            "5002": ("sh", "4990", "5002\t30", "0-1", "0"), "100": ("sshd", "1", "100", "0-3", "0")}
    for pid, (name, ppid, nspid, cpus, mems) in rows.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "status").write_text(f"Name:\t{name}\nState:\tS (sleeping)\nPPid:\t{ppid}\nNSpid:\t{nspid}\n"
                                           f"Cpus_allowed_list:\t{cpus}\nMems_allowed_list:\t{mems}\n")
        (proc / pid / "cgroup").write_text(f"0::/system.slice/docker-{container_id if pid != '100' else 'x'}.scope\n")
    (proc / "self").mkdir()
    return proc


def test_the_containers_processes_are_read_from_this_machines_proc_in_the_containers_numbers(tmp_path):
    from stackctl.doctor.affinity import host_proc_text

    proc = fake_proc(tmp_path)
    view = parse_proc(host_proc_text("c0ffee", 5000, "", False, proc))
    assert [(p.pid, p.ppid, p.name, p.cpus, p.mems) for p in view.processes] == [
        (1, 0, "python", {0, 1}, {0}), (7, 1, "VLLM::EngineCore", {1}, {0})]  # not the exec'd shell, not sshd
    assert view.numactl is None  # not asked for: no numactl launcher to judge


def test_numactl_is_looked_up_on_the_containers_path_and_its_absence_left_to_the_exec(tmp_path):
    from stackctl.doctor.affinity import host_proc_text

    proc = fake_proc(tmp_path)
    assert host_proc_text("c0ffee", 5000, "/usr/local/bin:/usr/bin", True, proc) is None
    binary = proc / "5000" / "root" / "usr" / "bin" / "numactl"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    binary.chmod(0o755)
    text = host_proc_text("c0ffee", 5000, "/usr/local/bin:/usr/bin", True, proc)
    assert parse_proc(text).numactl == "/usr/bin/numactl"


@pytest.mark.parametrize("container_id, nspid, why", [
    ("another", "5000\t1", "the process is not in this container's cgroup (an engine on another machine)"),
    ("c0ffee", "5000", "no PID namespace of its own to read (or a kernel without NSpid)"),
    ("c0ffee", "5000\t3", "not the container's PID 1"),
])
def test_anything_uncertain_about_the_process_leaves_the_reading_to_the_exec(tmp_path, container_id, nspid, why):
    from stackctl.doctor.affinity import host_proc_text

    assert host_proc_text(container_id, 5000, "", False, fake_proc(tmp_path, nspid_init=nspid)) is None, why
