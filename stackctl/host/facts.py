"""Everything stackctl knows about a host, gathered once: `discover(root)` -> HostFacts.

JSON-serialisable both ways (`to_dict` / `from_dict`): `doctor` prints it, fleet hosts send it back.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackctl.host.cpu import CpuFacts, read_cpu_facts
from stackctl.host.devices import DeviceFacts, read_device_facts
from stackctl.host.gpus import GpuDiscovery, GpuInfo, discover_gpus
from stackctl.host.isa import CpuIsa, read_isa
from stackctl.host.memory import MemoryFacts, read_memory
from stackctl.host.rocm_install import RocmInstall, read_rocm_install
from stackctl.host.sysfs import is_live, read_text

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class HostFacts:
    root: str
    hostname: str | None
    kernel: str | None
    gpu_discovery: GpuDiscovery
    cpu: CpuFacts
    memory: MemoryFacts
    devices: DeviceFacts
    isa: CpuIsa = CpuIsa(None, ())  # the CPU's vector/matrix features (host/isa.py)
    rocm: RocmInstall = RocmInstall(None, None)  # the ROCm installed on the host (host/rocm_install.py)

    @property
    def gpus(self) -> list[GpuInfo]:
        return self.gpu_discovery.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "root": self.root,
            "hostname": self.hostname,
            "kernel": self.kernel,
            "gpus": self.gpu_discovery.to_dict(),
            "cpu": self.cpu.to_dict(),
            "memory": self.memory.to_dict(),
            "devices": self.devices.to_dict(),
            "isa": self.isa.to_dict(),
            "rocm": self.rocm.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        return cls(
            root=data.get("root", "/"),
            hostname=data.get("hostname"),
            kernel=data.get("kernel"),
            gpu_discovery=GpuDiscovery.from_dict(data.get("gpus", {})),
            cpu=CpuFacts.from_dict(data.get("cpu", {})),
            memory=MemoryFacts.from_dict(data.get("memory", {})),
            devices=DeviceFacts.from_dict(data.get("devices", {})),
            isa=CpuIsa.from_dict(data.get("isa", {})),
            rocm=RocmInstall.from_dict(data.get("rocm", {})),
        )


def discover(root: Path = Path("/")) -> HostFacts:
    """Read the host under `root` ("/" for this machine, a fixture tree in tests). Never raises for a missing
    fact: absent files become None/empty and the GPU probes record why they found nothing."""
    root = Path(root)
    return HostFacts(
        root=str(root),
        hostname=_hostname(root),
        kernel=(read_text(root, "/proc/sys/kernel/osrelease") or "").strip() or None,
        gpu_discovery=discover_gpus(root),
        cpu=read_cpu_facts(root),
        memory=read_memory(root),
        devices=_device_facts(root),
        isa=read_isa(root),
        rocm=read_rocm_install(root),
    )


def _device_facts(root: Path) -> DeviceFacts:
    """The device nodes and the user's groups; a captured tree is judged as the user who captured it."""
    from stackctl.host.capture import captured_identity

    identity = None if is_live(root) else captured_identity(root)
    if identity:
        return read_device_facts(root, user=identity.get("user"), uid=identity.get("uid"),
                                 gids=identity.get("gids") or [])
    return read_device_facts(root)


def _hostname(root: Path) -> str | None:
    name = (read_text(root, "/proc/sys/kernel/hostname") or read_text(root, "/etc/hostname") or "").strip()
    if not name and is_live(root):
        name = socket.gethostname()
    return name or None
