"""Host facts (GPUs, NUMA, CPUs, memory, devices) and where to pin the server.

Every reader takes `root` (default "/") so tests run on captured sysfs trees. Only the standard library is needed;
amdsmi, the rocm-smi library and psutil are used when present.
"""

from stackctl.host.cpu import CpuFacts, Isolation, NumaNode, read_cpu_facts
from stackctl.host.cpulist import format_cpulist, parse_cpulist
from stackctl.host.devices import DeviceFacts, GroupFacts, read_device_facts
from stackctl.host.facts import HostFacts, discover
from stackctl.host.gpus import (
    GpuDiscovery,
    GpuInfo,
    ProbeAttempt,
    ProbeUnavailable,
    decode_gfx_target_version,
    discover_gpus,
)
from stackctl.host.memory import MemoryFacts, read_memory
from stackctl.host.pinning import (
    PinningDecision,
    PinningError,
    decide_pinning,
    pinning_for,
    select_gpus,
)

__all__ = [
    "CpuFacts", "DeviceFacts", "GpuDiscovery", "GpuInfo", "GroupFacts", "HostFacts", "Isolation", "MemoryFacts",
    "NumaNode", "PinningDecision", "PinningError", "ProbeAttempt", "ProbeUnavailable", "decide_pinning",
    "decode_gfx_target_version", "discover", "discover_gpus", "format_cpulist", "parse_cpulist", "pinning_for",
    "read_cpu_facts", "read_device_facts", "read_memory", "select_gpus",
]
