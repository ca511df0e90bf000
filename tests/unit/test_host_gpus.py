"""GPU discovery: KFD sysfs trees, the amdsmi and rocm-smi library probes, and how they are merged."""

import importlib.util
import json
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FIXTURES

from stackctl.host.gpus import (
    GpuDiscovery,
    GpuInfo,
    ProbeUnavailable,
    bdf_from_location_id,
    bdf_from_rsmi_id,
    decode_gfx_target_version,
    discover_gpus,
    gpu_from_amdsmi,
    merge_with_kfd,
    probe_amdsmi,
    probe_rocm_smi,
    probe_sysfs,
)

SYSFS = FIXTURES / "sysfs"
MI300X = SYSFS / "mi300x-8gpu-2node"
MI355X = SYSFS / "mi355x-8gpu-2node"
CPU_ONLY = SYSFS / "cpu-only-1node"
MI300X_VRAM = 206141652992


@pytest.mark.parametrize("value, arch", [
    (90402, "gfx942"), (90500, "gfx950"), (90010, "gfx90a"), (90008, "gfx908"), (110000, "gfx1100"),
    (100300, "gfx1030"), (120001, "gfx1201"), (0, None), (91600, None),
])
def test_decode_gfx_target_version(value, arch):
    assert decode_gfx_target_version(value) == arch


def test_pci_addresses():
    assert bdf_from_location_id(3072) == "0000:0c:00.0"
    assert bdf_from_location_id((0xDF << 8) | (3 << 3) | 1, domain=2) == "0002:df:03.1"
    assert bdf_from_rsmi_id((1 << 32) | (5 << 28) | (0x9F << 8) | (2 << 3) | 4) == "0001:9f:02.4"


def test_mi300x_fixture_has_eight_gfx942_gpus_on_two_nodes():
    discovery = discover_gpus(MI300X)
    assert discovery.source == "sysfs"
    gpus = discovery.gpus
    assert [g.index for g in gpus] == list(range(8))
    assert {g.gfx_arch for g in gpus} == {"gfx942"}
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.vram_bytes for g in gpus} == {MI300X_VRAM}
    assert [g.kfd_node for g in gpus] == list(range(2, 10))  # KFD nodes 0-1 are the CPUs
    assert [g.render_node for g in gpus] == [f"/dev/dri/renderD{128 + i}" for i in range(8)]
    assert gpus[0].pci_bdf == "0000:0c:00.0" and gpus[7].pci_bdf == "0000:df:00.0"
    assert {g.device_id for g in gpus} == {29856} and {g.num_xcc for g in gpus} == {8}
    assert {g.source for g in gpus} == {"sysfs"}
    # KFD calls IP-discovery ASICs "ip discovery": the name falls back to the decoded target.
    assert gpus[0].name == "AMD GPU gfx942 (device 0x74a0)"
    assert discovery.driver_version == "6.10.5"


def test_mi355x_fixture_reads_vram_from_drm_when_kfd_says_zero():
    gpus = discover_gpus(MI355X).gpus
    assert len(gpus) == 8
    assert {g.gfx_arch for g in gpus} == {"gfx950"}
    assert {g.vram_bytes for g in gpus} == {309237645312}
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gpus[0].name == "AMD Instinct MI355X"


def test_library_probes_are_not_tried_on_a_fixture_root():
    discovery = discover_gpus(MI300X)
    by_source = {a.source: a for a in discovery.attempts}
    assert set(by_source) == {"amdsmi", "rocm-smi", "sysfs"}
    assert "not tried" in by_source["amdsmi"].reason
    assert by_source["sysfs"].found == 8


def test_no_gpu_host_finds_none_and_says_why():
    discovery = discover_gpus(CPU_ONLY)
    assert discovery.gpus == [] and discovery.source is None
    assert "no AMD GPU found" in discovery.reason
    assert "/sys/class/kfd/kfd/topology/nodes is missing" in discovery.reason
    with pytest.raises(ProbeUnavailable, match="KFD"):
        probe_sysfs(CPU_ONLY)


def test_kfd_with_only_cpu_nodes_says_so(tmp_path):
    shutil.copytree(MI300X / "sys/class/kfd/kfd/topology/nodes/0", tmp_path / "sys/class/kfd/kfd/topology/nodes/0")
    with pytest.raises(ProbeUnavailable, match="1 node.*none of them a GPU"):
        probe_sysfs(tmp_path)


def _copy(tree: Path, tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(tree, root)
    return root


def test_numa_node_minus_one_means_unknown(tmp_path):
    root = _copy(MI300X, tmp_path)
    for numa in root.glob("sys/class/drm/*/device/numa_node"):
        numa.write_text("-1\n")
    assert {g.numa_node for g in probe_sysfs(root)} == {None}


def test_numa_node_from_card_when_render_node_lacks_it(tmp_path):
    root = _copy(MI300X, tmp_path)
    for numa in root.glob("sys/class/drm/renderD*/device/numa_node"):
        numa.unlink()
    assert [g.numa_node for g in probe_sysfs(root)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_in_tree_driver_has_no_version(tmp_path):
    root = _copy(MI300X, tmp_path)
    (root / "sys/module/amdgpu/version").unlink()
    discovery = discover_gpus(root)
    assert discovery.driver_version is None and discovery.gpus[0].driver_version is None


def test_whether_amdgpu_is_loaded_comes_from_sys_module():
    """/sys/module/amdgpu: there with the DKMS driver (and its version), with a driver that brought up no GPU, and
    for the in-tree driver (its version file aside); absent on the CPU-only VM."""
    assert discover_gpus(MI300X).driver_loaded is True
    no_gpu = discover_gpus(SYSFS / "mi355x-driver-no-gpu")
    assert (no_gpu.gpus, no_gpu.driver_loaded, no_gpu.driver_version) == ([], True, "6.10.5")
    assert discover_gpus(CPU_ONLY).driver_loaded is False


def test_discovery_round_trips_through_json():
    discovery = discover_gpus(MI300X)
    again = GpuDiscovery.from_dict(json.loads(json.dumps(discovery.to_dict())))
    assert again == discovery


# -- amdsmi -----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("amdsmi") is None, reason="the amdsmi package is not installed")
def test_real_amdsmi_without_rocm_is_unavailable_and_prints_nothing(capfd):
    """The PyPI amdsmi wheel prints to stdout and raises KeyError on import when libamd_smi.so is missing."""
    with pytest.raises(ProbeUnavailable, match="import amdsmi failed.*libamd_smi"):
        probe_amdsmi()
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def _fake_amdsmi(handles):
    """The slice of the amdsmi API the probe calls, answering from a table (pure mapping logic under test)."""
    def lookup(key):
        def call(handle, *args):
            value = handles[handle][key]
            if isinstance(value, Exception):
                raise value
            return value
        return call

    return SimpleNamespace(
        AmdSmiMemoryType=SimpleNamespace(VRAM=0),
        amdsmi_get_gpu_asic_info=lookup("asic"),
        amdsmi_get_gpu_board_info=lookup("board"),
        amdsmi_get_gpu_driver_info=lookup("driver"),
        amdsmi_get_gpu_enumeration_info=lookup("enumeration"),
        amdsmi_get_gpu_kfd_info=lookup("kfd"),
        amdsmi_get_gpu_memory_total=lookup("vram"),
        amdsmi_topo_get_numa_node_number=lookup("numa"),
        amdsmi_get_gpu_device_bdf=lookup("bdf"),
    )


def test_gpu_from_amdsmi_maps_fields_and_tolerates_unsupported_queries():
    handles = {
        "h0": {"asic": {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942",
                        "device_id": "0x74a1"},
               "board": {"product_name": "N/A"}, "driver": {"driver_version": "6.10.5"},
               "enumeration": {"drm_render": 128}, "kfd": {"node_id": 2}, "vram": MI300X_VRAM, "numa": 0,
               "bdf": "0000:0C:00.0"},
        "h1": {"asic": RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED"), "board": {"product_name": "MI300X OAM"},
               "driver": {"driver_version": "N/A"}, "enumeration": AttributeError("old library"),
               "kfd": {}, "vram": 0, "numa": 0xFFFFFFFF, "bdf": ""},
    }
    fake = _fake_amdsmi(handles)
    first = gpu_from_amdsmi(fake, 0, "h0")
    assert first == GpuInfo(0, "AMD Instinct MI300X", "gfx942", MI300X_VRAM, 0, "0000:0c:00.0",
                            "/dev/dri/renderD128", "amdsmi", "6.10.5", 0x74A1, 2)
    second = gpu_from_amdsmi(fake, 1, "h1")
    assert second.name == "MI300X OAM"
    assert (second.gfx_arch, second.vram_bytes, second.numa_node, second.pci_bdf, second.render_node,
            second.driver_version) == (None, None, None, None, None, None)


def test_library_gpus_take_kfd_order_and_arch():
    kfd = probe_sysfs(MI300X)
    library = [
        GpuInfo(0, "MI300X", None, MI300X_VRAM, 1, "0000:9f:00.0", None, "rocm-smi", "6.10.5"),
        GpuInfo(1, "MI300X", "gfx943", MI300X_VRAM, 0, "0000:0c:00.0", None, "rocm-smi", "6.10.5"),
        GpuInfo(2, "other", None, None, None, "0000:01:00.0", None, "rocm-smi"),
    ]
    merged = merge_with_kfd(library, kfd)
    assert [(g.index, g.pci_bdf) for g in merged] == [(0, "0000:0c:00.0"), (4, "0000:9f:00.0"),
                                                      (8, "0000:01:00.0")]
    assert [g.gfx_arch for g in merged] == ["gfx942", "gfx942", None]  # KFD's decode wins over the library's
    assert merged[1].render_node == "/dev/dri/renderD132" and merged[1].source == "rocm-smi"


# -- rocm-smi, through a real shared library built here ----------------------------------------------------------

RSMI_STUB = textwrap.dedent("""
    #include <stdint.h>
    #include <stdio.h>
    #include <stddef.h>
    /* Two GPUs listed in the opposite order to KFD, to check renumbering; noisy like the real library. */
    int rsmi_init(uint64_t flags) { printf("rsmi stdout noise\\n"); fflush(stdout);
                                    fprintf(stderr, "rsmi stderr noise\\n"); return flags == 0 ? 0 : 1; }
    int rsmi_shut_down(void) { return 0; }
    int rsmi_num_monitor_devices(uint32_t *n) { *n = 2; return 0; }
    int rsmi_dev_name_get(uint32_t dv, char *name, size_t len) { snprintf(name, len, "Instinct MI300X %u", dv);
                                                               return 0; }
    int rsmi_dev_memory_total_get(uint32_t dv, int type, uint64_t *total) {
        if (type != 0) return 2; *total = 206141652992ULL; return 0; }
    int rsmi_topo_get_numa_node_number(uint32_t dv, uint32_t *numa) { *numa = dv == 0 ? 1 : 0; return 0; }
    int rsmi_dev_pci_id_get(uint32_t dv, uint64_t *bdfid) { *bdfid = dv == 0 ? (0x9fULL << 8) : (0x0cULL << 8);
                                                           return 0; }
    int rsmi_dev_id_get(uint32_t dv, uint16_t *id) { return 2; /* not supported */ }
    int rsmi_version_str_get(int component, char *buf, uint32_t len) { snprintf(buf, len, "6.10.5"); return 0; }
""")


@pytest.fixture(scope="module")
def rsmi_stub(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the rocm-smi stand-in library")
    folder = tmp_path_factory.mktemp("rsmi")
    (folder / "rsmi.c").write_text(RSMI_STUB)
    library = folder / "librocm_smi64.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(library), str(folder / "rsmi.c")], check=True)
    return str(library)


def test_rocm_smi_probe_reads_the_library_quietly(rsmi_stub, capfd):
    gpus = probe_rocm_smi(rsmi_stub)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert [(g.index, g.name, g.numa_node, g.pci_bdf, g.vram_bytes) for g in gpus] == [
        (0, "Instinct MI300X 0", 1, "0000:9f:00.0", MI300X_VRAM),
        (1, "Instinct MI300X 1", 0, "0000:0c:00.0", MI300X_VRAM),
    ]
    assert {g.driver_version for g in gpus} == {"6.10.5"}
    assert {g.device_id for g in gpus} == {None}  # unsupported query: that fact only is missing


def test_discovery_prefers_a_library_and_completes_it_from_kfd(rsmi_stub):
    discovery = discover_gpus(MI300X, probes={"rocm-smi": lambda: probe_rocm_smi(rsmi_stub)})
    assert discovery.source == "rocm-smi"
    assert [(g.index, g.pci_bdf, g.gfx_arch, g.kfd_node) for g in discovery.gpus] == [
        (0, "0000:0c:00.0", "gfx942", 2), (4, "0000:9f:00.0", "gfx942", 6)]


def test_discovery_falls_through_failing_libraries_to_sysfs():
    def broken():
        raise OSError("segfault avoided")

    def empty():
        raise ProbeUnavailable("amdsmi initialised but reports no GPU")

    discovery = discover_gpus(MI300X, probes={"amdsmi": empty, "rocm-smi": broken})
    assert discovery.source == "sysfs" and len(discovery.gpus) == 8
    assert [(a.source, a.found) for a in discovery.attempts] == [("amdsmi", 0), ("rocm-smi", 0), ("sysfs", 8)]
    assert discovery.attempts[1].reason == "failed: OSError: segfault avoided"


def test_rocm_smi_missing_library_is_unavailable(tmp_path):
    with pytest.raises(ProbeUnavailable, match="librocm_smi64 not loadable"):
        probe_rocm_smi(str(tmp_path / "librocm_smi64.so"))


def test_the_libraries_are_not_asked_where_no_amdgpu_driver_is_loaded(tmp_path):
    """A CPU host (no /sys/module/amdgpu, no /dev/kfd, no KFD topology) skips amdsmi's import and the rocm-smi
    library, saying why; any sign of the driver, or a GPU in KFD's topology, and they are tried."""
    from stackctl.host.gpus import no_gpu_driver

    assert "the amdgpu driver is not loaded" in no_gpu_driver(tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kfd").touch()
    assert no_gpu_driver(tmp_path) == ""
    assert no_gpu_driver(MI300X) == ""  # the fixture has /sys/module/amdgpu
    if no_gpu_driver():  # this machine without the driver: discovery says so instead of importing amdsmi
        attempts = {a.source: a.reason for a in discover_gpus().attempts}
        assert attempts["amdsmi"].startswith("not tried: the amdgpu driver is not loaded"), attempts
