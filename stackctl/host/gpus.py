"""AMD GPU discovery: amdsmi, then the rocm-smi library, then sysfs (KFD topology), which needs nothing installed.

Each probe either returns the GPUs it found or raises ProbeUnavailable with the reason; `discover_gpus` records
every attempt so `doctor` can say why a host shows no GPU. GPUs are numbered in KFD topology order, the order
HIP_VISIBLE_DEVICES counts in, and their gfx target is decoded from KFD's gfx_target_version whatever the source
(DRM ip-discovery names have been seen wrong on MI300X).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from stackctl.host.quiet import silenced
from stackctl.host.sysfs import is_live, read_int, read_properties, read_text, under

_log = logging.getLogger(__name__)

AMD_VENDOR_ID = 4098  # 0x1002
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
AMDGPU_MODULE = "/sys/module/amdgpu"
AMDGPU_VERSION = f"{AMDGPU_MODULE}/version"
# KFD names IP-discovery ASICs (MI300 and later) "ip discovery": not a name to show anyone.
_UNHELPFUL_KFD_NAMES = {"", "ip discovery"}


class ProbeUnavailable(Exception):
    """A probe could not run or found no GPU; the message says why."""


@dataclass(frozen=True)
class GpuInfo:
    """One AMD GPU as stackctl plans with it."""

    index: int  # position in KFD order, as HIP_VISIBLE_DEVICES counts
    name: str
    gfx_arch: str | None  # e.g. "gfx942"
    vram_bytes: int | None
    numa_node: int | None  # None when the platform does not say (-1 in sysfs)
    pci_bdf: str | None  # "0000:0c:00.0"
    render_node: str | None  # "/dev/dri/renderD128"
    source: str  # "amdsmi" | "rocm-smi" | "sysfs"
    driver_version: str | None = None
    device_id: int | None = None
    kfd_node: int | None = None
    num_xcc: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ProbeAttempt:
    """What one probe did: how many GPUs it found, or why it could not be used."""

    source: str
    found: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuDiscovery:
    """The GPUs of a host, the probe that found them, and every probe tried."""

    gpus: list[GpuInfo] = field(default_factory=list)
    source: str | None = None
    attempts: list[ProbeAttempt] = field(default_factory=list)
    driver_version: str | None = None
    driver_loaded: bool | None = None  # /sys/module/amdgpu is there; None: not read (facts from an older stackctl)

    @property
    def reason(self) -> str:
        """One line: where the GPUs came from, or why there are none."""
        if self.gpus:
            return f"{len(self.gpus)} GPU(s) from {self.source}"
        tried = "; ".join(f"{a.source}: {a.reason}" for a in self.attempts)
        return f"no AMD GPU found ({tried})" if tried else "no AMD GPU found"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "driver_version": self.driver_version,
            "driver_loaded": self.driver_loaded,
            "reason": self.reason,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "attempts": [attempt.to_dict() for attempt in self.attempts],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuDiscovery:
        return cls(
            gpus=[GpuInfo.from_dict(g) for g in data.get("gpus", [])],
            source=data.get("source"),
            attempts=[ProbeAttempt(**a) for a in data.get("attempts", [])],
            driver_version=data.get("driver_version"),
            driver_loaded=data.get("driver_loaded"),
        )


# -- decoding ---------------------------------------------------------------------------------------------------


def decode_gfx_target_version(value: int) -> str | None:
    """KFD gfx_target_version -> gfx name: major*10000 + minor*100 + step, minor and step written as hex digits.

    90402 -> gfx942, 90500 -> gfx950, 90010 -> gfx90a, 110000 -> gfx1100; 0 (a CPU node) -> None.
    """
    if value <= 0:
        return None
    major, rest = divmod(value, 10000)
    minor, step = divmod(rest, 100)
    if minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def pci_bdf(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def bdf_from_location_id(location_id: int, domain: int = 0) -> str:
    """KFD location_id packs bus << 8 | device << 3 | function."""
    return pci_bdf(domain, (location_id >> 8) & 0xFF, (location_id >> 3) & 0x1F, location_id & 0x7)


def bdf_from_rsmi_id(bdfid: int) -> str:
    """rocm-smi's BDFID: domain << 32 | partition << 28 | bus << 8 | device << 3 | function."""
    return pci_bdf((bdfid >> 32) & 0xFFFFFFFF, (bdfid >> 8) & 0xFF, (bdfid >> 3) & 0x1F, bdfid & 0x7)


def _numa_or_none(value: int | None) -> int | None:
    # sysfs says -1 and the libraries say 0xFFFFFFFF when the platform has no NUMA information for the device.
    if value is None or value < 0 or value >= 0xFFFF:
        return None
    return value


# -- sysfs (KFD topology) ---------------------------------------------------------------------------------------


def read_driver_loaded(root: Path = Path("/")) -> bool:
    """Whether amdgpu is in the kernel: /sys/module/amdgpu is there whenever the module is loaded, and for a
    built-in amdgpu too (it has parameters)."""
    return under(root, AMDGPU_MODULE).is_dir()


def read_driver_version(root: Path = Path("/")) -> str | None:
    """amdgpu's version when it is a DKMS module (ROCm's driver); the in-tree driver has no version file."""
    text = read_text(root, AMDGPU_VERSION)
    return (text or "").strip() or None


def probe_sysfs(root: Path = Path("/")) -> list[GpuInfo]:
    """GPUs from /sys/class/kfd/kfd/topology/nodes/N (nodes with simd_count > 0), in node order."""
    nodes_dir = under(root, KFD_NODES)
    if not nodes_dir.is_dir():
        raise ProbeUnavailable(f"{KFD_NODES} is missing: the amdgpu driver (KFD) is not loaded or there is no AMD GPU")
    node_ids = sorted(int(p.name) for p in nodes_dir.iterdir() if p.name.isdigit())
    driver_version = read_driver_version(root)
    gpus: list[GpuInfo] = []
    for node_id in node_ids:
        gpu = _kfd_gpu(root, node_id, len(gpus), driver_version)
        if gpu is not None:
            gpus.append(gpu)
    if not gpus:
        raise ProbeUnavailable(f"KFD topology has {len(node_ids)} node(s), none of them a GPU (simd_count > 0)")
    return gpus


def _kfd_gpu(root: Path, node_id: int, index: int, driver_version: str | None) -> GpuInfo | None:
    node = f"{KFD_NODES}/{node_id}"
    props = read_properties(root, f"{node}/properties") or {}
    if not _int(props.get("simd_count")) or read_int(root, f"{node}/gpu_id") == 0:
        return None  # a CPU node: no SIMDs, gpu_id 0
    vendor_id = _int(props.get("vendor_id"))
    if vendor_id is not None and vendor_id != AMD_VENDOR_ID:
        return None
    gfx = decode_gfx_target_version(_int(props.get("gfx_target_version")) or 0)
    location_id = _int(props.get("location_id"))
    bdf = bdf_from_location_id(location_id, _int(props.get("domain")) or 0) if location_id is not None else None
    minor = _int(props.get("drm_render_minor"))
    render = f"/dev/dri/renderD{minor}" if minor else None
    drm_device = f"/sys/class/drm/renderD{minor}/device" if minor else _card_device_for(root, bdf)
    vram = _int(props.get("local_mem_size")) or None
    if vram is None and drm_device:
        vram = read_int(root, f"{drm_device}/mem_info_vram_total")
    numa = read_int(root, f"{drm_device}/numa_node") if drm_device else None
    if numa is None and bdf is not None:
        card = _card_device_for(root, bdf)
        numa = read_int(root, f"{card}/numa_node") if card else None
    device_id = _int(props.get("device_id"))
    return GpuInfo(
        index=index,
        name=_gpu_name(root, node, drm_device, gfx, device_id),
        gfx_arch=gfx,
        vram_bytes=vram,
        numa_node=_numa_or_none(numa),
        pci_bdf=bdf,
        render_node=render,
        source="sysfs",
        driver_version=driver_version,
        device_id=device_id,
        kfd_node=node_id,
        num_xcc=_int(props.get("num_xcc")),
    )


def _card_device_for(root: Path, bdf: str | None) -> str | None:
    """/sys/class/drm/cardN/device of the GPU with this PCI address (its uevent names the slot)."""
    if bdf is None:
        return None
    drm = under(root, "/sys/class/drm")
    if not drm.is_dir():
        return None
    for card in sorted(drm.glob("card[0-9]*")):
        if not re.fullmatch(r"card\d+", card.name):
            continue
        uevent = read_text(root, f"/sys/class/drm/{card.name}/device/uevent") or ""
        if f"PCI_SLOT_NAME={bdf}" in uevent.split("\n"):
            return f"/sys/class/drm/{card.name}/device"
    return None


def _gpu_name(root: Path, node: str, drm_device: str | None, gfx: str | None, device_id: int | None) -> str:
    product = read_text(root, f"{drm_device}/product_name") if drm_device else None
    if product and product.strip():
        return product.strip()
    kfd_name = (read_text(root, f"{node}/name") or "").strip()
    if kfd_name not in _UNHELPFUL_KFD_NAMES:
        return kfd_name
    device = f" (device 0x{device_id:04x})" if device_id else ""
    return f"AMD GPU {gfx or 'unknown arch'}{device}"


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


# -- amdsmi -----------------------------------------------------------------------------------------------------


def probe_amdsmi() -> list[GpuInfo]:
    """GPUs from the amdsmi Python package (needs ROCm's libamd_smi.so). Reads the live machine only."""
    try:
        with silenced():
            import amdsmi  # noqa: PLC0415 - optional, heavy, and fails without ROCm
    except BaseException as exc:  # the wheel raises KeyError without libamd_smi.so; be ready for anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        hint = " (ROCm's libamd_smi.so is not installed)" if "libamd_smi" in str(exc) else ""
        raise ProbeUnavailable(f"import amdsmi failed: {_describe(exc)}{hint}") from None
    try:
        with silenced():
            amdsmi.amdsmi_init()
    except Exception as exc:
        raise ProbeUnavailable(f"amdsmi_init failed: {_describe(exc)}") from None
    try:
        with silenced():
            handles = list(amdsmi.amdsmi_get_processor_handles())
            gpus = [gpu_from_amdsmi(amdsmi, index, handle) for index, handle in enumerate(handles)]
    except Exception as exc:
        raise ProbeUnavailable(f"amdsmi_get_processor_handles failed: {_describe(exc)}") from None
    finally:
        try:
            with silenced():
                amdsmi.amdsmi_shut_down()
        except Exception:  # amdsmi raises its own exception types; shutting down changes no fact we report
            _log.debug("amdsmi_shut_down failed", exc_info=True)
    if not gpus:
        raise ProbeUnavailable("amdsmi initialised but reports no GPU")
    return gpus


def gpu_from_amdsmi(amdsmi: Any, index: int, handle: Any) -> GpuInfo:
    """One GpuInfo from amdsmi calls; each fact is optional, so one unsupported query loses one fact only."""
    asic = _try(lambda: amdsmi.amdsmi_get_gpu_asic_info(handle)) or {}
    board = _try(lambda: amdsmi.amdsmi_get_gpu_board_info(handle)) or {}
    driver = _try(lambda: amdsmi.amdsmi_get_gpu_driver_info(handle)) or {}
    enumeration = _try(lambda: amdsmi.amdsmi_get_gpu_enumeration_info(handle)) or {}
    kfd = _try(lambda: amdsmi.amdsmi_get_gpu_kfd_info(handle)) or {}
    vram = _try(lambda: amdsmi.amdsmi_get_gpu_memory_total(handle, amdsmi.AmdSmiMemoryType.VRAM))
    numa = _try(lambda: amdsmi.amdsmi_topo_get_numa_node_number(handle))
    bdf = _try(lambda: amdsmi.amdsmi_get_gpu_device_bdf(handle))
    gfx = asic.get("target_graphics_version")
    render = enumeration.get("drm_render")
    device_id = asic.get("device_id")
    return GpuInfo(
        index=index,
        name=_first_known(asic.get("market_name"), board.get("product_name")) or "AMD GPU",
        gfx_arch=gfx if isinstance(gfx, str) and re.fullmatch(r"gfx[0-9a-f]+", gfx) else None,
        vram_bytes=vram if isinstance(vram, int) and vram > 0 else None,
        numa_node=_numa_or_none(numa) if isinstance(numa, int) else None,
        pci_bdf=bdf.lower() if isinstance(bdf, str) and bdf else None,
        render_node=f"/dev/dri/renderD{render}" if isinstance(render, int) else None,
        source="amdsmi",
        driver_version=_first_known(driver.get("driver_version")),
        device_id=_hex_or_int(device_id),
        kfd_node=kfd.get("node_id") if isinstance(kfd.get("node_id"), int) else None,
    )


def _first_known(*values: Any) -> str | None:
    for value in values:
        if isinstance(value, str) and value.strip() and value.strip() != "N/A":
            return value.strip()
    return None


def _hex_or_int(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def _try(call: Callable[[], Any]) -> Any:
    """One optional vendor-library field: None (unknown) when the call fails, with the reason in the debug log."""
    try:
        return call()
    except Exception:  # amdsmi / rocm-smi raise their own exception types
        _log.debug("GPU library call %r failed", getattr(call, "__name__", call), exc_info=True)
        return None


# -- rocm-smi library -------------------------------------------------------------------------------------------

RSMI_STATUS_SUCCESS = 0
RSMI_MEM_TYPE_VRAM = 0
RSMI_SW_COMP_DRIVER = 0


def rocm_smi_library_candidates() -> list[str]:
    """Where librocm_smi64 may be, in the order rsmiBindings looks (ROCM_SMI_LIB_PATH first), then the loader."""
    candidates = []
    if os.environ.get("ROCM_SMI_LIB_PATH"):
        candidates.append(os.environ["ROCM_SMI_LIB_PATH"])
    from stackctl.host.rocm_install import library_dirs

    directories = [os.path.join(os.environ["ROCM_PATH"], "lib")] if os.environ.get("ROCM_PATH") else []
    directories += library_dirs(Path("/"))  # every release's layout: /opt/rocm, /opt/rocm-X.Y, /opt/rocm/core-X.Y
    for directory in directories:
        for name in ("librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.1"):
            candidates.append(os.path.join(directory, name))
    candidates += ["librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.1"]
    return list(dict.fromkeys(candidates))


def probe_rocm_smi(library: str | None = None) -> list[GpuInfo]:
    """GPUs from ROCm's rocm-smi library through ctypes (live machine only).

    The library is loaded directly rather than through rsmiBindings.py: that module prints, walks /opt and calls
    exit() when the library is missing, none of which a preflight may do.
    """
    lib, tried = None, []
    for candidate in [library] if library else rocm_smi_library_candidates():
        try:
            with silenced():
                lib = ctypes.CDLL(candidate)
            break
        except OSError as exc:
            tried.append(str(exc) or candidate)
    if lib is None:
        first = tried[0] if tried else "no candidate path"
        raise ProbeUnavailable(f"librocm_smi64 not loadable ({first}{'; ...' if len(tried) > 1 else ''})")
    with silenced():
        status = lib.rsmi_init(ctypes.c_uint64(0))
    if status != RSMI_STATUS_SUCCESS:
        raise ProbeUnavailable(f"rsmi_init returned status {status}")
    try:
        count = ctypes.c_uint32(0)
        with silenced():
            status = lib.rsmi_num_monitor_devices(ctypes.byref(count))
        if status != RSMI_STATUS_SUCCESS:
            raise ProbeUnavailable(f"rsmi_num_monitor_devices returned status {status}")
        driver = _rsmi_string(lambda buf, n: lib.rsmi_version_str_get(RSMI_SW_COMP_DRIVER, buf, ctypes.c_uint32(n)))
        gpus = [_rsmi_gpu(lib, index, driver) for index in range(count.value)]
    finally:
        with silenced():
            lib.rsmi_shut_down()
    if not gpus:
        raise ProbeUnavailable("rocm-smi initialised but reports no GPU")
    return gpus


def _rsmi_gpu(lib: Any, index: int, driver: str | None) -> GpuInfo:
    dv = ctypes.c_uint32(index)
    name = _rsmi_string(lambda buf, n: lib.rsmi_dev_name_get(dv, buf, ctypes.c_size_t(n)))
    vram = _rsmi_value(ctypes.c_uint64, lambda out: lib.rsmi_dev_memory_total_get(dv, RSMI_MEM_TYPE_VRAM, out))
    numa = _rsmi_value(ctypes.c_uint32, lambda out: lib.rsmi_topo_get_numa_node_number(dv, out))
    bdfid = _rsmi_value(ctypes.c_uint64, lambda out: lib.rsmi_dev_pci_id_get(dv, out))
    device_id = _rsmi_value(ctypes.c_uint16, lambda out: lib.rsmi_dev_id_get(dv, out))
    return GpuInfo(
        index=index,
        name=name or "AMD GPU",
        gfx_arch=None,  # taken from KFD in merge_with_kfd: rocm-smi's encoding of it changed across releases
        vram_bytes=vram or None,
        numa_node=_numa_or_none(numa),
        pci_bdf=bdf_from_rsmi_id(bdfid) if bdfid is not None else None,
        render_node=None,
        source="rocm-smi",
        driver_version=driver,
        device_id=device_id,
    )


def _rsmi_string(call: Callable[[Any, int], int], size: int = 256) -> str | None:
    buf = ctypes.create_string_buffer(size)
    try:
        with silenced():
            status = call(buf, size)
    except (AttributeError, OSError, ctypes.ArgumentError):
        return None
    if status != RSMI_STATUS_SUCCESS:
        return None
    return buf.value.decode("utf-8", "replace").strip() or None


def _rsmi_value(ctype: Any, call: Callable[[Any], int]) -> int | None:
    out = ctype(0)
    try:
        with silenced():
            status = call(ctypes.byref(out))
    except (AttributeError, OSError, ctypes.ArgumentError):  # AttributeError: symbol missing in an old library
        return None
    return out.value if status == RSMI_STATUS_SUCCESS else None


# -- putting the probes together --------------------------------------------------------------------------------


def merge_with_kfd(library_gpus: Sequence[GpuInfo], kfd_gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    """Library GPUs, numbered and ordered as KFD numbers them, completed from KFD (gfx target, render node,
    missing facts). Matched by render node, else PCI address; GPUs KFD does not know come last, in library order.
    """
    if not kfd_gpus:
        return list(library_gpus)
    by_render = {g.render_node: g for g in kfd_gpus if g.render_node}
    # Partitions of one GPU (CPX mode) can share a PCI address: match by address only when it is unique.
    bdf_counts = Counter(g.pci_bdf for g in kfd_gpus if g.pci_bdf)
    by_bdf = {g.pci_bdf: g for g in kfd_gpus if g.pci_bdf and bdf_counts[g.pci_bdf] == 1}
    matched, unmatched = [], []
    for gpu in library_gpus:
        kfd = by_render.get(gpu.render_node) if gpu.render_node else None
        kfd = kfd or (by_bdf.get(gpu.pci_bdf) if gpu.pci_bdf else None)
        if kfd is None:
            unmatched.append(gpu)
            continue
        matched.append((kfd.index, replace(
            gpu,
            gfx_arch=kfd.gfx_arch or gpu.gfx_arch,
            vram_bytes=gpu.vram_bytes or kfd.vram_bytes,
            numa_node=gpu.numa_node if gpu.numa_node is not None else kfd.numa_node,
            pci_bdf=gpu.pci_bdf or kfd.pci_bdf,
            render_node=gpu.render_node or kfd.render_node,
            driver_version=gpu.driver_version or kfd.driver_version,
            device_id=gpu.device_id or kfd.device_id,
            kfd_node=kfd.kfd_node,
            num_xcc=gpu.num_xcc or kfd.num_xcc,
        )))
    ordered = [replace(gpu, index=index) for index, gpu in sorted(matched, key=lambda pair: pair[0])]
    after = max((gpu.index for gpu in kfd_gpus), default=-1) + 1
    return ordered + [replace(gpu, index=after + i) for i, gpu in enumerate(unmatched)]


Probe = Callable[[], list[GpuInfo]]


def discover_gpus(root: Path = Path("/"), probes: dict[str, Probe] | None = None) -> GpuDiscovery:
    """Try amdsmi, rocm-smi, sysfs in turn; the first that finds GPUs wins, completed from KFD sysfs.

    The libraries read the running machine, so on any other root (a fixture tree) only sysfs is tried.
    `probes` replaces the library probes (name -> callable), for tests.
    """
    root = Path(root)
    attempts: list[ProbeAttempt] = []
    kfd_gpus: list[GpuInfo] | None = None
    kfd_reason = ""
    try:
        kfd_gpus = probe_sysfs(root)
    except ProbeUnavailable as exc:
        kfd_reason = str(exc)
    except Exception as exc:  # a malformed tree must not stop discovery
        kfd_reason = f"reading KFD topology failed: {_describe(exc)}"

    library_probes: dict[str, Probe] = probes if probes is not None else {
        "amdsmi": probe_amdsmi, "rocm-smi": probe_rocm_smi}
    driverless = "" if probes is not None or kfd_gpus else no_gpu_driver(root)
    for source, probe in library_probes.items():
        if probes is None and not is_live(root):
            attempts.append(ProbeAttempt(source, 0, f"not tried: {root} is not this machine's root"))
            continue
        if driverless:
            attempts.append(ProbeAttempt(source, 0, f"not tried: {driverless}"))
            continue
        try:
            found = probe()
        except ProbeUnavailable as exc:
            attempts.append(ProbeAttempt(source, 0, str(exc)))
            continue
        except Exception as exc:
            attempts.append(ProbeAttempt(source, 0, f"failed: {_describe(exc)}"))
            continue
        gpus = merge_with_kfd(found, kfd_gpus or [])
        attempts.append(ProbeAttempt(source, len(gpus), f"found {len(gpus)} GPU(s)"))
        return GpuDiscovery(gpus, source, attempts, _driver_of(gpus) or read_driver_version(root),
                            read_driver_loaded(root))

    if kfd_gpus:
        attempts.append(ProbeAttempt("sysfs", len(kfd_gpus), f"found {len(kfd_gpus)} GPU(s) in KFD topology"))
        return GpuDiscovery(kfd_gpus, "sysfs", attempts, read_driver_version(root), read_driver_loaded(root))
    attempts.append(ProbeAttempt("sysfs", 0, kfd_reason))
    return GpuDiscovery([], None, attempts, read_driver_version(root), read_driver_loaded(root))


def no_gpu_driver(root: Path = Path("/")) -> str:
    """Why no GPU library can see an AMD GPU on this machine ('' when one might): amdsmi and rocm-smi read the GPUs
    through the amdgpu driver, and here it is not in the kernel and /dev/kfd is absent. Importing amdsmi to hear
    that costs a CPU host tens of ms on every doctor run."""
    if read_driver_loaded(root) or under(root, "/dev/kfd").exists():
        return ""
    return f"the amdgpu driver is not loaded (no {AMDGPU_MODULE}, no /dev/kfd): no library sees a GPU without it"


def _driver_of(gpus: Sequence[GpuInfo]) -> str | None:
    versions = {gpu.driver_version for gpu in gpus if gpu.driver_version}
    return versions.pop() if len(versions) == 1 else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
