"""From a pinning decision to what runs: the docker-py cpuset kwargs `up` passes, and the launcher serve.sh executes.

The decisions come from the captured multi-node hosts; the kwargs from the runner's own kwargs builder; the
launcher from the rendered serve.sh, run by bash with stub numactl/taskset/vllm that print the argv they receive.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.bundle import render, stackspec
from stackctl.host import discover, pinning_for
from stackctl.engine.container import container_kwargs
from stackctl.host.placement import FALLBACK_VAR, LAUNCHER_VAR, placement
from stackctl.recipe.loader import load_recipe, load_recipe_text
from stackctl.bundle.stackspec import StackSpec

SYSFS = FIXTURES / "sysfs"
MI300X = discover(SYSFS / "mi300x-8gpu-2node")  # isolated CPUs 8-47,56-95,104-143,152-191; GPUs 0-3 node 0
MI355X = discover(SYSFS / "mi355x-8gpu-2node")  # no isolated CPUs; GPUs 0-3 node 0, 4-7 node 1


def rocm_recipe(host: str = "", tensor_parallel: int = 1):
    return load_recipe_text('[stack]\nname = "pin"\nplatform = "rocm"\n[model]\npath = "/models/m"\n'
                            f"tensor_parallel = {tensor_parallel}\n[host]\n{host}\n", "pin.toml")


def kwargs_for(recipe, facts, tmp_path: Path) -> tuple[dict, object]:
    decision = pinning_for(recipe, facts)
    kwargs = container_kwargs(StackSpec(recipe), render.render_files(StackSpec(recipe)), tmp_path / "bundle", decision)
    return kwargs, decision


CASES = [
    # host, recipe [host] lines, tensor_parallel -> cpuset kwargs, launcher, fallback, warned
    ("mi355x", "", 4, {"cpuset_cpus": "0-63", "cpuset_mems": "0"},
     "numactl --cpunodebind=0 --membind=0", "taskset -c 0-63", False),
    ("mi355x", "gpus = [4, 5]", 2, {"cpuset_cpus": "64-127", "cpuset_mems": "1"},
     "numactl --cpunodebind=1 --membind=1", "taskset -c 64-127", False),
    ("mi355x", "", 8, {"cpuset_cpus": "0-127", "cpuset_mems": "0-1"},
     "numactl --cpunodebind=0-1 --membind=0-1", "taskset -c 0-127", True),
    ("mi300x", "", 2, {"cpuset_cpus": "8-47,104-143", "cpuset_mems": "0"},
     "numactl --physcpubind=8-47,104-143 --membind=0", "taskset -c 8-47,104-143", True),
    ("mi300x", "gpus = [6]", 1, {"cpuset_cpus": "56-95,152-191", "cpuset_mems": "1"},
     "numactl --physcpubind=56-95,152-191 --membind=1", "taskset -c 56-95,152-191", True),
    ("mi300x", "", 8, {"cpuset_cpus": "8-47,56-95,104-143,152-191", "cpuset_mems": "0-1"},
     "numactl --physcpubind=8-47,56-95,104-143,152-191 --membind=0-1", "taskset -c 8-47,56-95,104-143,152-191",
     True),
    ("mi300x", 'isolcpus = "16-23"', 1, {"cpuset_cpus": "16-23", "cpuset_mems": "0"},
     "numactl --physcpubind=16-23 --membind=0", "taskset -c 16-23", False),
]


@pytest.mark.parametrize("host, policy, tp, cpuset, launcher, fallback, warned", CASES,
                         ids=[f"{c[0]}-tp{c[2]}-{c[1] or 'auto'}" for c in CASES])
def test_multi_node_hosts_give_one_cpu_list_to_the_cpuset_and_the_launcher(host, policy, tp, cpuset, launcher,
                                                                           fallback, warned, tmp_path):
    facts = {"mi300x": MI300X, "mi355x": MI355X}[host]
    kwargs, decision = kwargs_for(rocm_recipe(policy, tp), facts, tmp_path)
    assert {k: v for k, v in kwargs.items() if k.startswith("cpuset")} == cpuset
    assert kwargs["environment"][LAUNCHER_VAR] == launcher
    assert kwargs["environment"][FALLBACK_VAR] == fallback
    assert fallback.split()[-1] == cpuset["cpuset_cpus"]
    assert "SYS_NICE" in kwargs["cap_add"]  # numactl --membind needs it under Docker's seccomp profile
    assert bool(decision.warnings) == warned


def test_gpus_split_across_nodes_are_warned(tmp_path):
    _, decision = kwargs_for(rocm_recipe("gpus = [2, 5]"), MI355X, tmp_path)
    assert decision.cpuset_mems == "0-1"
    assert any("span NUMA nodes 0-1" in warning for warning in decision.warnings)


def test_off_pins_nothing_and_empties_the_launcher_variables(tmp_path):
    recipe = load_recipe_text('[stack]\nname = "pin"\nplatform = "rocm"\n'
                              '[model]\npath = "/models/m"\n[serve]\nenv = { STACKCTL_LAUNCHER = "taskset -c 0" }\n'
                              '[host]\nnuma = "off"\n')
    kwargs, decision = kwargs_for(recipe, MI300X, tmp_path)
    assert decision.kind == "off"
    assert not [k for k in kwargs if k.startswith("cpuset")]
    assert kwargs["environment"][LAUNCHER_VAR] == "" and kwargs["environment"][FALLBACK_VAR] == ""
    assert "SYS_NICE" not in kwargs["cap_add"]


def test_isolcpus_off_with_isolated_cpus_on_the_node_is_refused_before_any_kwargs(tmp_path):
    from stackctl.host import PinningError

    with pytest.raises(PinningError, match="the recipe did not ask for"):
        kwargs_for(rocm_recipe('isolcpus = "off"', 2), MI300X, tmp_path)


def test_no_other_module_writes_pinning_variables():
    """The launcher variables and cpuset kwargs are written by host/placement.py only."""
    package = Path(stackspec.__file__).parent.parent  # stackctl/
    writers = {path.relative_to(package).as_posix() for path in package.rglob("*.py")
               for text in [path.read_text()]
               if any(word in text for word in ("STACKCTL_LAUNCHER", "cpuset_cpus\"", "STACKCTL_NUMA", "STACKCTL_CPUS"))}
    assert writers == {"host/placement.py"}


# -- serve.sh with stub launchers -------------------------------------------------------------------------------

def stub_bin(folder: Path, names: tuple[str, ...]) -> Path:
    """Executables that print [their name] + argv as JSON instead of running anything."""
    folder.mkdir()
    for name in names:
        tool = folder / name
        tool.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                        "print(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]))\n")
        tool.chmod(0o755)
    return folder


def run_serve(tmp_path: Path, decision, tools: tuple[str, ...]) -> tuple[list, str]:
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    serve = tmp_path / "serve.sh"
    serve.write_bytes(render.render_files(StackSpec(recipe))["serve.sh"])
    # The dtype `up` decided (cpu-smoke's model.dtype is "auto"): serve.sh passes it on last.
    server = stackspec.server_command(recipe) + stackspec.serve_args(recipe) + ["--dtype", "float32"]
    env = {"PATH": str(stub_bin(tmp_path / "bin", tools + (server[0],))), **placement(decision).environment(),
           "STACKCTL_DTYPE": "float32"}
    result = subprocess.run(["/bin/bash", str(serve)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)
    assert argv[len(argv) - len(server):] == server
    return argv[:len(argv) - len(server)], result.stderr


def decision_of(kind: str):
    policies = {"node": ("", 1, MI355X), "cpulist": ("", 1, MI300X), "off": ('numa = "off"', 1, MI355X)}
    policy, tp, facts = policies[kind]
    return pinning_for(rocm_recipe(policy, tp), facts)


@pytest.mark.parametrize("kind, prefix", [
    ("node", ["numactl", "--cpunodebind=0", "--membind=0"]),
    ("cpulist", ["numactl", "--physcpubind=8-47,104-143", "--membind=0"]),
    ("off", []),
])
def test_serve_sh_runs_exactly_the_decided_launcher(kind, prefix, tmp_path):
    decision = decision_of(kind)
    launched, stderr = run_serve(tmp_path, decision, ("numactl", "taskset"))
    assert launched == prefix
    assert launched == list(placement(decision).launcher)
    assert ("stackctl: launcher: " + " ".join(prefix) in stderr) == bool(prefix)


@pytest.mark.parametrize("kind, prefix", [("node", ["taskset", "-c", "0-63"]),
                                          ("cpulist", ["taskset", "-c", "8-47,104-143"])])
def test_serve_sh_without_numactl_falls_back_to_taskset_and_says_so(kind, prefix, tmp_path):
    launched, stderr = run_serve(tmp_path, decision_of(kind), ("taskset",))
    assert launched == prefix
    assert "stackctl: numactl not found in the image: pinning with " + " ".join(prefix) in stderr


def test_serve_sh_with_neither_tool_says_the_server_is_not_pinned_by_its_launcher(tmp_path):
    launched, stderr = run_serve(tmp_path, decision_of("node"), ())
    assert launched == []
    assert "numactl not found in the image and no fallback" in stderr


# -- up --dry-run on this machine -------------------------------------------------------------------------------

def cpu_smoke_with(tmp_path: Path, isolcpus: str) -> Path:
    path = tmp_path / "pinned.toml"
    path.write_text((RECIPES / "cpu-smoke.toml").read_text().replace('isolcpus = "auto"', f'isolcpus = "{isolcpus}"'))
    return path


def test_dry_run_shows_the_decision_its_reasons_the_cpuset_and_the_exact_launcher_line(tmp_path):
    from helpers import run_cli

    env = {"PATH": "/usr/bin:/bin", "STACKCTL_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    result = run_cli("up", str(cpu_smoke_with(tmp_path, "0")), "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    kwargs = json.loads(result.stdout)
    assert kwargs["cpuset_cpus"] == "0" and "cpuset_mems" not in kwargs
    assert kwargs["environment"][LAUNCHER_VAR] == "numactl --physcpubind=0"
    assert kwargs["environment"][FALLBACK_VAR] == "taskset -c 0"
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    server = " ".join(stackspec.server_command(recipe) + stackspec.serve_args(recipe))
    lines = result.stderr.splitlines()
    assert 'pinning: isolcpus = "0" in the recipe -> server pinned to CPUs 0' in lines
    assert "pinning: cpuset: cpuset_cpus=0" in lines
    assert f"pinning: launcher: numactl --physcpubind=0 {server}" in lines


def test_up_refuses_a_cpu_the_host_lacks_in_one_line_before_anything_starts(tmp_path):
    from helpers import run_cli

    recipe = cpu_smoke_with(tmp_path, "4096")
    env = {"PATH": "/usr/bin:/bin", "STACKCTL_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    result = run_cli("up", str(recipe), env=env)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    isolcpus_line = next(n for n, text in enumerate(recipe.read_text().splitlines(), 1) if text.startswith("isolcpus"))
    assert line.startswith(f"stackctl: {recipe}:{isolcpus_line}:1: host.isolcpus: names CPU(s) 4096 this host does "
                           "not have")
    assert not (tmp_path / "state").exists()  # no bundle written, no image built, no container
