"""Every host check judged on the captured hosts in tests/fixtures/sysfs (8x MI300X and 8x MI355X on 2 NUMA nodes,
the MI355X host on a driver that brought up no GPU, a 16-vCPU VM without GPUs) with a rocm recipe (ATOM + LMCache CPU and NVMe tiers) and the cpu recipe. Each case
asserts the status and the words a user reads. A check that cannot see its fact must skip with the reason, never
pass. Variants of a captured host (a user outside the GPU groups, a GPU whose NUMA node is hidden) are the same
frozen facts with one field replaced."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.doctor.context import DoctorContext
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.host import discover
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

load_all()
SYSFS = FIXTURES / "sysfs"
MI300X = discover(SYSFS / "mi300x-8gpu-2node")
MI355X = discover(SYSFS / "mi355x-8gpu-2node")
CPU_ONLY = discover(SYSFS / "cpu-only-1node")
MI355X_DRIVER_NO_GPU = discover(SYSFS / "mi355x-driver-no-gpu")


class HostContext:
    """What host checks read: the recipe and the host facts."""

    def __init__(self, recipe, host, started=None):
        self.recipe, self.host, self.started = recipe, host, started
        self.spec = StackSpec(self.recipe)

    def server_started(self):
        return self.started


def rocm():
    return load_recipe(RECIPES / "atom-lmcache-cpu-nvme.toml")  # TP 2, gfx942, 200 GiB CPU + 2000 GiB disk tiers


def cpu():
    return load_recipe(RECIPES / "cpu-smoke.toml")


def judge(check_id, recipe, host):
    return CHECKS[check_id].run(HostContext(recipe, host))


def with_devices(host, **changes):
    return dataclasses.replace(host, devices=dataclasses.replace(host.devices, **changes))


# -- GPU checks: rocm recipes need them, cpu recipes skip them ---------------------------------------------------

@pytest.mark.parametrize("check_id", ["host.gpu-devices", "host.gpus", "host.rocm-driver"])
@pytest.mark.parametrize("host", [MI300X, CPU_ONLY], ids=["mi300x", "cpu-only"])
def test_gpu_checks_skip_on_a_cpu_recipe_whatever_the_host(check_id, host):
    result = judge(check_id, cpu(), host)
    assert (result.status, result.message) == ("skip", "platform cpu: no GPU needed")


def test_gpu_devices_usable_on_both_gpu_hosts():
    for host in (MI300X, MI355X):
        result = judge("host.gpu-devices", rocm(), host)
        assert result.status == "pass"
        assert result.message == f"/dev/kfd and 8 render node(s) usable by {host.devices.user}"


def test_gpu_devices_fail_without_kfd_or_render_nodes():
    result = judge("host.gpu-devices", rocm(), CPU_ONLY)
    assert (result.status, result.message) == ("fail", "/dev/kfd is missing (amdgpu/KFD driver not loaded)")
    result = judge("host.gpu-devices", rocm(), with_devices(MI300X, render_nodes=[]))
    assert (result.status, result.message) == ("fail", "no /dev/dri/renderD* node")


def test_gpu_devices_name_the_groups_a_non_root_user_lacks():
    outsider = with_devices(MI300X, user="alice", uid=1000)
    result = judge("host.gpu-devices", rocm(), outsider)
    assert (result.status, result.message) == ("fail", "user alice is not in group(s) video, render")
    # In the video group after logging in again (listed), render still missing.
    groups = [dataclasses.replace(g, listed=g.name == "video") for g in MI300X.devices.groups]
    result = judge("host.gpu-devices", rocm(), with_devices(outsider, groups=groups))
    assert (result.status, result.message) == ("fail", "user alice is not in group(s) render")
    member = [dataclasses.replace(g, effective=True) for g in MI300X.devices.groups]
    result = judge("host.gpu-devices", rocm(), with_devices(outsider, groups=member))
    assert (result.status, result.message) == ("pass", "/dev/kfd and 8 render node(s) usable by alice")


def test_gpus_pass_with_the_recipe_arch_and_enough_of_them():
    result = judge("host.gpus", rocm(), MI300X)
    assert (result.status, result.message) == ("pass", "8 x gfx942 (sysfs)")
    assert len(result.details["gpus"]) == 8


def test_gpus_fail_on_another_arch_too_few_or_none():
    result = judge("host.gpus", rocm(), MI355X)
    assert result.status == "fail"
    assert result.message == ("GPU arch gfx950 not in versions.gpu_arch ['gfx942'], the HIP targets the image is built "
                              "for (LMCache's kernels have no code object for this GPU)")
    recipe = rocm()
    recipe.model.tensor_parallel = 16
    result = judge("host.gpus", recipe, MI300X)
    assert (result.status, result.message) == ("fail", "8 GPU(s) found, tensor_parallel needs 16")
    result = judge("host.gpus", rocm(), CPU_ONLY)
    assert result.status == "fail" and result.message == CPU_ONLY.gpu_discovery.reason
    assert "amdgpu driver (KFD) is not loaded" in result.message


def test_rocm_driver_reports_the_dkms_version_or_skips():
    result = judge("host.rocm-driver", rocm(), MI300X)
    assert (result.status, result.message) == ("pass", "amdgpu 6.10.5")
    result = judge("host.rocm-driver", rocm(), MI355X)
    assert (result.status, result.message) == ("pass", "amdgpu 6.14.14")
    in_tree = dataclasses.replace(MI300X, gpu_discovery=dataclasses.replace(MI300X.gpu_discovery, driver_version=None))
    result = judge("host.rocm-driver", rocm(), in_tree)
    assert (result.status, result.message) == ("skip", "driver version not exposed (in-tree amdgpu, no amdsmi)")


def test_rocm_driver_fails_when_amdgpu_is_not_loaded():
    """The CPU-only VM has no /sys/module/amdgpu: a rocm recipe has no driver to run on."""
    result = judge("host.rocm-driver", rocm(), CPU_ONLY)
    assert (result.status, result.message) == ("fail", "amdgpu is not loaded (no /sys/module/amdgpu)")
    assert result.fix == "install the ROCm driver (amdgpu-dkms) your ROCm release supports"


def test_rocm_driver_fails_when_it_brought_up_no_gpu():
    """mi355x-driver-no-gpu: an amdgpu-dkms older than the MI355X GPUs is loaded (/dev/kfd, KFD's CPU nodes) but
    no GPU came up."""
    result = judge("host.rocm-driver", rocm(), MI355X_DRIVER_NO_GPU)
    assert result.status == "fail"
    assert result.message == ("amdgpu 6.10.5 is loaded but brought up no GPU (KFD topology has 2 node(s), none of "
                              "them a GPU (simd_count > 0))")
    assert result.fix.startswith("see why in `dmesg | grep amdgpu`")
    older = dataclasses.replace(MI355X_DRIVER_NO_GPU, gpu_discovery=dataclasses.replace(
        MI355X_DRIVER_NO_GPU.gpu_discovery, driver_loaded=None, driver_version=None))
    assert judge("host.rocm-driver", rocm(), older).status == "skip"  # facts that never recorded the module


# -- NUMA and CPU tuning ----------------------------------------------------------------------------------------

def test_numa_topology_maps_each_gpu_to_its_node():
    result = judge("host.numa-topology", rocm(), MI300X)
    assert result.status == "pass"
    assert result.message.startswith("GPU 0 -> node 0, GPU 1 -> node 0") and "GPU 7 -> node 1" in result.message


def test_numa_topology_warns_when_the_platform_hides_a_gpus_node():
    hidden = [dataclasses.replace(g, numa_node=None) if g.index in (2, 5) else g for g in MI300X.gpus]
    host = dataclasses.replace(MI300X, gpu_discovery=dataclasses.replace(MI300X.gpu_discovery, gpus=hidden))
    result = judge("host.numa-topology", rocm(), host)
    assert (result.status, result.message) == ("warn", "NUMA node unknown for GPU(s) [2, 5]")


def test_numa_topology_on_a_cpu_recipe_lists_the_nodes():
    assert judge("host.numa-topology", cpu(), MI355X).message == "2 NUMA node(s): node 0: 64 CPUs, node 1: 64 CPUs"
    assert judge("host.numa-topology", cpu(), CPU_ONLY).message == "1 NUMA node(s): node 0: 16 CPUs"


@pytest.mark.parametrize("check_id", ["host.numa-topology", "host.isolcpus", "host.pinning"])
def test_gpu_derived_facts_skip_on_a_rocm_recipe_without_gpus(check_id):
    result = judge(check_id, rocm(), CPU_ONLY)
    assert result.status == "skip" and result.message.startswith("no GPU found (")
    assert "depends on the GPUs' NUMA nodes" in result.message


def test_numa_balancing_against_the_recipe():
    result = judge("host.numa-balancing", rocm(), MI300X)  # the fixture has it on, AMD's tuning wants it off
    assert (result.status, result.message) == ("warn", "kernel.numa_balancing = 1, recipe expects 0")
    assert judge("host.numa-balancing", rocm(), MI355X).message == "kernel.numa_balancing = 0"
    recipe = rocm()
    recipe.host.numa_balancing = True
    assert judge("host.numa-balancing", recipe, MI300X).status == "pass"
    result = judge("host.numa-balancing", recipe, MI355X)
    assert (result.status, result.message) == ("warn", "kernel.numa_balancing = 0, recipe expects 1")
    result = judge("host.numa-balancing", rocm(), CPU_ONLY)
    assert result.status == "skip" and "numa_balancing not present" in result.message


def test_cpu_governor_pass_mismatch_and_skips():
    assert judge("host.cpu-governor", rocm(), MI300X).message == "performance on all CPUs"
    recipe = rocm()
    recipe.host.governor = "powersave"
    result = judge("host.cpu-governor", recipe, MI300X)
    assert (result.status, result.message) == ("warn", "governor performance on CPUs 0-191")
    assert result.details["governors"] == {"performance": "0-191"}
    result = judge("host.cpu-governor", rocm(), CPU_ONLY)
    assert result.status == "skip" and result.message.startswith("no cpufreq on this host")
    recipe.host.governor = None
    result = judge("host.cpu-governor", recipe, MI300X)
    assert (result.status, result.message) == ("skip", "recipe does not ask for a governor")


def test_isolcpus_auto_off_and_a_bad_list():
    result = judge("host.isolcpus", rocm(), MI300X)
    assert result.status == "pass"
    assert result.message.startswith("isolated CPUs 8-47,56-95,104-143,152-191 available (auto); kernel: ")
    assert judge("host.isolcpus", rocm(), MI355X).message == (
        "no isolated CPUs: the server uses its node's CPUs (auto); kernel: isolated=(none)")
    recipe = rocm()
    recipe.host.isolcpus = "off"
    result = judge("host.isolcpus", recipe, MI300X)
    assert result.status == "pass" and result.message.startswith("not used (isolcpus = off); kernel: isolcpus=")
    assert result.details["kernel"]["cpus"]
    recipe.host.isolcpus = "eight"
    result = judge("host.isolcpus", recipe, MI300X)
    assert (result.status, result.message) == ("warn", "isolcpus = 'eight' is not a cpulist")


def test_pinning_needs_no_gpu_facts_on_a_cpu_host_with_a_cpu_recipe():
    result = judge("host.pinning", cpu(), CPU_ONLY)
    assert result.status == "pass" and result.message.startswith("not pinned: no GPU on this host")
    assert result.details["placement"] == {"nodes": "", "cpus": "", "mems": ""}


def test_pinning_on_the_gpus_node_without_isolated_cpus():
    result = judge("host.pinning", rocm(), MI355X)
    assert result.status == "pass"
    assert result.message.startswith("cpuset_cpus=0-63 cpuset_mems=0, launcher numactl --cpunodebind=0 --membind=0")
    assert result.details["placement"] == {"nodes": "0", "cpus": "0-63", "mems": "0"}
    assert result.details["launcher"] == ["numactl", "--cpunodebind=0", "--membind=0"]


# -- RAM and disk for the cache tiers ------------------------------------------------------------------------------

def test_cpu_tier_fits_the_gpu_hosts_and_not_the_vm():
    result = judge("host.cpu-tier-ram", rocm(), MI300X)
    assert result.status == "pass"
    assert result.message == "CPU tier 200.0 GiB + headroom 151.2 GiB <= RAM 1511.5 GiB"
    result = judge("host.cpu-tier-ram", rocm(), CPU_ONLY)
    assert (result.status, result.message) == ("fail", "CPU tier 200.0 GiB + headroom 32.0 GiB > RAM 62.8 GiB")


def test_cpu_tier_ram_skips_without_a_tier_or_without_meminfo():
    result = judge("host.cpu-tier-ram", cpu(), MI300X)
    assert (result.status, result.message) == ("skip", "no CPU tier in the recipe")
    recipe = rocm()
    recipe.cache.enabled = False  # tiers written but LMCache off: nothing is pinned
    assert judge("host.cpu-tier-ram", recipe, MI300X).message == "no CPU tier in the recipe"
    blind = dataclasses.replace(MI300X, memory=dataclasses.replace(MI300X.memory, total_bytes=None))
    result = judge("host.cpu-tier-ram", rocm(), blind)
    assert (result.status, result.message) == ("skip", "total RAM unknown (/proc/meminfo unreadable)")


def disk_recipe(path, size_gb):
    recipe = rocm()
    tier = recipe.tiers_of("disk")[0]
    tier.path, tier.size_gb = str(path), size_gb
    return recipe


def test_disk_tier_on_a_real_directory(tmp_path):
    """The disk tier is judged on this machine's filesystem (tmp_path): space from statvfs, the rotational flag from
    /sys/dev/block; whatever the flag says, the message states it."""
    result = judge("host.disk-tier", disk_recipe(tmp_path, 0.001), MI300X)
    assert result.status in ("pass", "warn"), result.message
    if result.status == "warn":
        assert result.message == f"{tmp_path} is on a rotational disk"
    else:
        assert result.message.startswith(f"{tmp_path}: ") and " free >= 1.024 MiB" in result.message  # 0.001 GB


def test_disk_tier_fails_when_missing_or_too_small(tmp_path):
    result = judge("host.disk-tier", disk_recipe(tmp_path / "absent", 1), MI300X)
    assert (result.status, result.message) == ("fail", f"{tmp_path / 'absent'} does not exist")
    free_gib = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize / 1024 ** 3
    result = judge("host.disk-tier", disk_recipe(tmp_path, 100_000), MI300X)
    assert result.status == "fail"
    assert result.message.startswith(f"{tmp_path}: ") and "GiB free < tier size 100000.0 GiB" in result.message
    assert free_gib < 100_000


def _chunk(folder, name, size, age_s):
    path = folder / name
    path.write_bytes(b"\0" * size)
    moment = time.time() - age_s
    os.utime(path, (moment, moment))
    return path


def test_disk_tier_warns_when_earlier_servers_files_pass_a_tenth_of_its_size(tmp_path):
    """LMCache's disk backend never reads nor evicts an earlier server's files: those older than the running
    server, beyond a tenth of the tier's size, make the check warn with their count, size and a fix that deletes
    only them."""
    tier_bytes = 10 * 1024 ** 2
    recipe = disk_recipe(tmp_path, tier_bytes / 1024 ** 3)
    started = time.time() - 60
    for n in range(3):
        _chunk(tmp_path, f"old-{n}.pt", 512 * 1024, age_s=3600)  # 1.5 MiB from earlier servers
    _chunk(tmp_path, "new.pt", 4 * 1024 ** 2, age_s=1)  # the running server's own
    result = CHECKS["host.disk-tier"].run(HostContext(recipe, MI300X, started=started))
    assert result.status == "warn", result.message
    rotational = f"{tmp_path} is on a rotational disk; " if "rotational" in result.message else ""  # this machine's
    assert result.message == (f"{rotational}{tmp_path}: 3 file(s), 1.5 MiB, written before the running server started: LMCache's "
                              f"disk backend neither reads nor evicts them, and they are beyond the tier's size 10 MiB")
    assert result.fix == f"delete them: find {tmp_path} -type f ! -newermt @{int(started)} -delete"
    assert (result.details["leftover_files"], result.details["leftover_bytes"]) == (3, 3 * 512 * 1024)


def test_disk_tier_counts_every_file_when_no_server_runs_and_passes_a_few(tmp_path):
    tier_bytes = 10 * 1024 ** 2
    recipe = disk_recipe(tmp_path, tier_bytes / 1024 ** 3)
    _chunk(tmp_path, "a.pt", 512 * 1024, age_s=1)
    result = CHECKS["host.disk-tier"].run(HostContext(recipe, MI300X))  # no server: every file is an earlier one's
    assert result.details["leftover_files"] == 1
    if result.status == "warn":  # this machine's disk is rotational: that is the one warning
        assert result.message == f"{tmp_path} is on a rotational disk"
    else:
        assert result.message.endswith("; 1 file(s), 512 KiB, left by earlier servers")
    nested = tmp_path / "stackctl-second-x"
    nested.mkdir()
    _chunk(nested, "b.pt", 1024 ** 2, age_s=1)
    result = CHECKS["host.disk-tier"].run(HostContext(recipe, MI300X))
    assert result.status == "warn"
    assert f"{tmp_path}: 2 file(s), 1.5 MiB, written before any server of this stack runs" in result.message
    assert result.fix == f"delete them before `stackctl up`: find {tmp_path} -type f -delete"


def test_disk_tier_skips_without_a_disk_tier():
    result = judge("host.disk-tier", cpu(), MI300X)
    assert (result.status, result.message) == ("skip", "no disk tier in the recipe")


# -- the Docker engine ---------------------------------------------------------------------------------------------

def test_docker_engine_check_fails_with_the_address_when_nothing_answers(tmp_path, monkeypatch):
    """The real docker-py client against a socket path where no engine listens."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    result = CHECKS["host.docker-engine"].run(DoctorContext(StackSpec(cpu())))
    assert result.status == "fail"
    assert result.message.startswith(f"cannot reach the Docker engine: cannot reach the Docker engine at "
                                     f"unix://{tmp_path}/no-engine.sock: ")


def test_sizes_in_messages_keep_a_readable_unit():
    """A 64 MiB disk tier reads as 64 MiB, not 0.1 GiB (the disk-full fault's message said 0.0 GiB < 0.0 GiB); the
    same function names the KV chunks of image.tiers."""
    from stackctl.text import size_text

    assert [size_text(n) for n in (3 * 1024 ** 3 // 2, 64 * 1024 ** 2, 256 * 1024, 512)] == \
        ["1.5 GiB", "64 MiB", "256 KiB", "512 B"]
