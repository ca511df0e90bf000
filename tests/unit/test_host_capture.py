"""`stackctl doctor --capture-host DIR` / `--host-root DIR`: a host judged from its captured files, by its own GPUs
and ROCm when no recipe is given. The MI300X and MI355X fixture trees are captured real layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES, run_cli

from stackctl.errors import StackctlError
from stackctl.host import sysfs
from stackctl.host.capture import IDENTITY_FILE, capture_host, captured_identity
from stackctl.host.facts import discover

SYSFS = FIXTURES / "sysfs"
TREES = ("mi300x-8gpu-2node", "mi355x-8gpu-2node", "mi355x-driver-no-gpu", "cpu-only-1node")


def _without_root(facts) -> dict:
    """The facts with the tree's own path left out (it is named in the GPU probes' reasons too)."""
    data = facts.to_dict()
    root = data.pop("root")
    return json.loads(json.dumps(data).replace(root, "ROOT")) if root != "/" else data


@pytest.mark.parametrize("tree", TREES)
def test_a_capture_of_a_tree_is_judged_as_that_tree(tree, tmp_path):
    captured = tmp_path / "capture"
    capture_host(captured, SYSFS / tree)
    assert _without_root(discover(captured)) == _without_root(discover(SYSFS / tree))


@pytest.mark.parametrize("tree", TREES)
def test_the_capture_holds_every_file_discovery_reads(tree, tmp_path, monkeypatch):
    """Discovery of the fixture, recorded: every file it read that exists there is in the capture."""
    read: set[str] = set()
    original = sysfs.under

    def recording(root, path):
        read.add(path)
        return original(root, path)

    monkeypatch.setattr(sysfs, "under", recording)
    for module in ("cpu", "devices", "gpus", "memory", "isa", "facts"):
        mod = __import__(f"stackctl.host.{module}", fromlist=["x"])
        if hasattr(mod, "under"):
            monkeypatch.setattr(mod, "under", recording)
    discover(SYSFS / tree)
    monkeypatch.undo()
    capture_host(tmp_path / "capture", SYSFS / tree)
    missing = [p for p in read if (SYSFS / tree / p.lstrip("/")).is_file()
               and not (tmp_path / "capture" / p.lstrip("/")).exists()]
    assert read and not missing


def test_the_capture_keeps_only_the_gpu_groups_and_the_users_own_line(tmp_path):
    source = tmp_path / "host"
    shutil.copytree(SYSFS / "mi300x-8gpu-2node", source, symlinks=True)
    (source / "etc" / "shadow").write_text("root:$6$secret:19000:0:99999:7:::\n")
    (source / "etc" / "group").write_text("root:x:0:\nvideo:x:44:ubuntu\nrender:x:110:ubuntu\nsudo:x:27:ubuntu\n")
    (source / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/u:/bin/sh\n")
    written = capture_host(tmp_path / "capture", source)
    capture = tmp_path / "capture"
    assert "/etc/shadow" not in written and not (capture / "etc" / "shadow").exists()
    assert (capture / "etc" / "group").read_text() == "video:x:44:ubuntu\nrender:x:110:ubuntu\n"
    assert len((capture / "etc" / "passwd").read_text().splitlines()) <= 1
    assert (capture / "opt" / "rocm").is_symlink()  # the classic layout's link stays a link
    assert (capture / "opt" / "rocm-6.4.1" / "lib" / "libamdhip64.so.6").stat().st_size == 0
    identity = captured_identity(capture)
    assert identity is not None and set(identity) == {"user", "uid", "gids"}


def test_a_capture_refuses_a_directory_with_files(tmp_path):
    (tmp_path / "old").write_text("x")
    with pytest.raises(StackctlError, match="not an empty directory"):
        capture_host(tmp_path, SYSFS / "cpu-only-1node")
    assert captured_identity(tmp_path) is None


def _doctor_json(*args: str) -> dict:
    result = run_cli("doctor", "--scope", "host", "--format", "json", *args)
    report = json.loads(result.stdout)
    report["exit"] = result.returncode
    return report


def _status(report: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in report["results"]}


# Every host check on each GPU fixture, judged by the host's own GPUs and ROCm (no recipe).
EXPECTED = {
    "mi355x-8gpu-2node": {"host.docker-engine": "skip", "host.gpu-devices": "pass", "host.gpus": "pass",
                          "host.rocm-driver": "pass", "host.rocm-release": "pass", "host.numa-topology": "pass",
                          "host.numa-balancing": "pass", "host.cpu-governor": "pass", "host.isolcpus": "pass",
                          "host.pinning": "pass"},
    "mi300x-8gpu-2node": {"host.docker-engine": "skip", "host.gpu-devices": "pass", "host.gpus": "pass",
                          "host.rocm-driver": "pass", "host.rocm-release": "pass", "host.numa-topology": "pass",
                          "host.numa-balancing": "warn", "host.cpu-governor": "pass", "host.isolcpus": "pass",
                          "host.pinning": "warn"},
}


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_doctor_without_a_recipe_judges_the_host_by_its_own_gpus_and_rocm(tree):
    report = _doctor_json("--host-root", str(SYSFS / tree))
    status = _status(report)
    assert {k: status[k] for k in EXPECTED[tree]} == EXPECTED[tree]
    assert report["exit"] == 0


def test_a_recipe_asking_for_more_gpus_than_the_host_has_fails_host_gpus(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[stack]\nname = "big"\nplatform = "rocm"\n[versions]\ngpu_arch = ["gfx950"]\nrocm = "7.0"\n'
                      '[model]\npath = "/models/m"\ntensor_parallel = 16\n')
    report = _doctor_json(str(recipe), "--host-root", str(SYSFS / "mi355x-8gpu-2node"))
    gpus = next(r for r in report["results"] if r["id"] == "host.gpus")
    assert (gpus["status"], gpus["message"]) == ("fail", "8 GPU(s) found, tensor_parallel needs 16")
    assert report["exit"] == 1


def test_a_recipe_whose_rocm_cannot_build_for_the_hosts_gpus_fails_host_rocm_release(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[stack]\nname = "old"\nplatform = "rocm"\n[versions]\ngpu_arch = ["gfx950"]\nrocm = "6.4"\n'
                      '[model]\npath = "/models/m"\n')
    report = _doctor_json(str(recipe), "--host-root", str(SYSFS / "mi355x-8gpu-2node"))
    check = next(r for r in report["results"] if r["id"] == "host.rocm-release")
    assert check["status"] == "fail" and "ROCm 6.4 (series 6.0-6.4) cannot build for the host's gfx950" in check["message"]


def test_capture_this_machine_and_judge_the_capture(tmp_path):
    """This machine has no GPU: the capture is judged a host without one (GPU checks fail or skip, with reasons)."""
    captured = tmp_path / "capture"
    result = run_cli("doctor", "--capture-host", str(captured))
    assert result.returncode == 0 and f"--host-root {captured}" in result.stdout, result.stderr
    assert (captured / IDENTITY_FILE).is_file() and (captured / "proc" / "meminfo").is_file()
    report = _doctor_json("--host-root", str(captured))
    status = _status(report)
    live = discover(Path("/"))
    assert status["host.docker-engine"] == "skip"
    assert status["host.gpus"] == ("pass" if live.gpus else "fail")
    assert report["exit"] == (0 if live.gpus else 1)
    judged = discover(captured)
    assert (judged.cpu.online_cpus, judged.cpu.numa_nodes, judged.cpu.isolation, judged.memory.total_bytes) == (
        live.cpu.online_cpus, live.cpu.numa_nodes, live.cpu.isolation, live.memory.total_bytes)


def test_a_cpu_recipe_on_a_capture_is_judged_by_the_captured_cpu_features():
    """host.cpu-dtype reads the capture's /proc/cpuinfo; the matmul it would measure runs only on this machine."""
    from helpers import RECIPES

    report = _doctor_json(str(RECIPES / "cpu-smoke.toml"), "--host-root", str(SYSFS / "cpu-only-1node"))
    dtype = next(r for r in report["results"] if r["id"] == "host.cpu-dtype")
    assert dtype["status"] == "pass" and "matmul not measured: judging the captured host" in dtype["message"]
    engine = next(r for r in report["results"] if r["id"] == "host.docker-engine")
    assert engine["status"] == "skip" and "not in the capture" in engine["message"]
