"""Host checks: the machine the stack runs on (devices, GPUs, NUMA, CPU tuning, RAM and disk for the tiers)."""

from __future__ import annotations

import os
from pathlib import Path

from stackctl.doctor.registry import Unavailable, check, failed, passed, require_this_machine, warned
from stackctl.doctor.tier_preflight import files_written_before
from stackctl.knowledge.kinds import platform_of
from stackctl.text import size_text

GiB = 1024 ** 3


def _rocm_only(ctx) -> None:
    if not platform_of(ctx.recipe).has_gpus:
        raise Unavailable("platform cpu: no GPU needed")


@check("host.docker-engine", "host", "error", "the Docker engine answers",
       "start dockerd (or set DOCKER_HOST) and check that this user may use the socket")
def docker_engine(ctx):
    """`stackctl up` and the image checks run through the Docker engine; without it nothing else can be proven."""
    require_this_machine(ctx, "the Docker engine")
    engine = ctx.engine_or_none()
    if engine is None:
        return failed(f"cannot reach the Docker engine: {ctx.engine_error}")
    from stackctl.engine.docker_adapter import engine_version

    version = engine_version(engine)
    return passed(f"Docker engine {version.get('Version')} (API {version.get('ApiVersion')})")


@check("host.gpu-devices", "host", "error", "/dev/kfd and /dev/dri are present and usable",
       "load the amdgpu driver; add the user to the video and render groups (then log in again)")
def gpu_devices(ctx):
    """ROCm containers need /dev/kfd and /dev/dri/renderD*, and the user needs the `video` and `render` groups."""
    _rocm_only(ctx)
    devices = ctx.host.devices
    if not devices.kfd:
        return failed("/dev/kfd is missing (amdgpu/KFD driver not loaded)")
    if not devices.render_nodes:
        return failed("no /dev/dri/renderD* node")
    missing = [g for g in ("video", "render") if not devices.is_root and not devices.in_group(g)]
    if missing:
        return failed(f"user {devices.user} is not in group(s) {', '.join(missing)}")
    return passed(f"/dev/kfd and {len(devices.render_nodes)} render node(s) usable by {devices.user}")


@check("host.gpus", "host", "error", "enough AMD GPUs of the recipe's architecture",
       "run on a host with the GPUs the recipe names, or fix model.tensor_parallel / versions.gpu_arch")
def gpus(ctx):
    """The stack needs `tensor_parallel` GPUs whose gfx architecture is among `versions.gpu_arch` (LMCache and the
    kernels are built for exactly those)."""
    _rocm_only(ctx)
    found = ctx.host.gpus
    tp = ctx.recipe.model.tensor_parallel
    if not found:
        return failed(ctx.host.gpu_discovery.reason)
    if len(found) < tp:
        return failed(f"{len(found)} GPU(s) found, tensor_parallel needs {tp}")
    archs = sorted({g.gfx_arch or "unknown" for g in found})
    wrong = [a for a in archs if a not in ctx.recipe.versions.gpu_arch]
    if wrong:
        return failed(f"GPU arch {', '.join(wrong)} not in versions.gpu_arch {ctx.recipe.versions.gpu_arch}, the HIP "
                      "targets the image is built for (LMCache's kernels have no code object for this GPU)",
                      gpus=[g.to_dict() for g in found])
    return passed(f"{len(found)} x {', '.join(archs)} ({ctx.host.gpu_discovery.source})",
                  gpus=[g.to_dict() for g in found])


@check("host.rocm-driver", "host", "error", "the amdgpu driver is loaded and drives the GPUs; its version",
       "install the ROCm driver (amdgpu-dkms) your ROCm release supports")
def rocm_driver(ctx):
    """ROCm reaches the GPUs through the amdgpu kernel driver: it must be in the kernel (/sys/module/amdgpu) and have
    brought the GPUs up (KFD lists them). A driver loaded with no GPU up is one older than the GPU, firmware that did
    not load, or a GPU bound to another driver; `dmesg | grep amdgpu` says which. Reports the driver version (DKMS
    driver: /sys/module/amdgpu/version; amdsmi when installed)."""
    _rocm_only(ctx)
    discovery = ctx.host.gpu_discovery
    version = discovery.driver_version
    if not discovery.gpus:
        if discovery.driver_loaded is False and not version:
            return failed("amdgpu is not loaded (no /sys/module/amdgpu)")
        if discovery.driver_loaded is None and not version:
            raise Unavailable(f"no GPU found, and whether amdgpu is loaded was not recorded ({discovery.reason})")
        why = discovery.attempts[-1].reason if discovery.attempts else discovery.reason
        return failed(f"amdgpu {version or '(in-tree)'} is loaded but brought up no GPU ({why})",
                      fix="see why in `dmesg | grep amdgpu`: a driver older than the GPU needs the amdgpu-dkms of a "
                          "ROCm release that supports the GPU")
    if not version:
        raise Unavailable("driver version not exposed (in-tree amdgpu, no amdsmi)")
    return passed(f"amdgpu {version}")


@check("host.rocm-release", "host", "error", "the ROCm release can build for the host's GPUs; its HIP runtime",
       "use a ROCm release that supports these GPUs (versions.rocm; gfx950 needs ROCm 7.0 or later)")
def rocm_release_check(ctx):
    """The ROCm release the stack is built with (`versions.rocm`; without a recipe, the one installed on the host)
    must target every GPU of the host: a release older than the GPU builds no code it can load. Reports the host's
    own ROCm install (ROCm's .info/version, else the install directory's name: /opt/rocm-X.Y, /opt/rocm/core-X.Y)
    and its HIP runtime, found in either layout; a runtime of another major than the release ships warns."""
    from stackctl.errors import StackctlError
    from stackctl.knowledge.rocm import release_span, rocm_release

    _rocm_only(ctx)
    installed = ctx.host.rocm
    key = platform_of(ctx.recipe).gpu_runtime_key
    version = (getattr(ctx.recipe.versions, key) if key else None) or installed.version
    if not version:
        raise Unavailable("the recipe names no versions.rocm and no ROCm install was found on the host "
                          "(/opt/rocm, /opt/rocm-X.Y, /opt/rocm/core-X.Y)")
    try:
        release = rocm_release(version)
    except StackctlError as exc:
        return failed(str(exc))
    found = ctx.host.gpus
    if not found:
        raise Unavailable(f"no GPU found ({ctx.host.gpu_discovery.reason}): nothing to judge ROCm {version} against")
    archs = sorted({g.gfx_arch or "unknown" for g in found})
    facts = {"release": release.name, "version": version, "installed": installed.to_dict()}
    unsupported = [a for a in archs if not release.supports(a)]
    if unsupported:
        return failed(f"ROCm {version} (series {release_span(release)}) cannot build for the host's "
                      f"{', '.join(unsupported)}", **facts)
    runtimes = installed.hip_runtimes if installed.version == version else []
    runtime = f"; HIP runtime {', '.join(runtimes)}" if runtimes else ""
    if runtimes and not any(r.rsplit("/", 1)[-1].startswith(release.hip_runtime) for r in runtimes):
        return warned(f"ROCm {version} ships {release.hip_runtime}, the host has {', '.join(runtimes)}", **facts)
    return passed(f"ROCm {version} (series {release_span(release)}, {release.install_root(version)}) builds for "
                  f"{', '.join(archs)}{runtime}", **facts)


def _gpu_facts(ctx, what: str) -> None:
    """On a rocm recipe a fact derived from the GPUs cannot be judged without GPUs: skip with the reason."""
    if platform_of(ctx.recipe).has_gpus and not ctx.host.gpus:
        raise Unavailable(f"no GPU found ({ctx.host.gpu_discovery.reason}): {what} depends on the GPUs' NUMA nodes")


@check("host.numa-topology", "host", "warning", "each GPU's NUMA node is known",
       "enable NUMA in the BIOS (NPS setting) so the kernel reports each GPU's node")
def numa_topology(ctx):
    """Pinning the server near its GPUs needs each GPU's NUMA node; `-1` in sysfs means the platform hides it."""
    _gpu_facts(ctx, "each GPU's NUMA node")
    nodes = ctx.host.cpu.numa_nodes
    layout = {n.node: len(n.cpus) for n in nodes}
    if not platform_of(ctx.recipe).has_gpus:
        return passed(f"{len(nodes)} NUMA node(s): " + ", ".join(f"node {k}: {v} CPUs" for k, v in layout.items()))
    unknown = [g.index for g in ctx.host.gpus if g.numa_node is None]
    if unknown:
        return failed(f"NUMA node unknown for GPU(s) {unknown}")
    return passed(", ".join(f"GPU {g.index} -> node {g.numa_node}" for g in ctx.host.gpus))


@check("host.numa-balancing", "host", "warning", "kernel.numa_balancing as the recipe expects (AMD: 0)",
       "sysctl -w kernel.numa_balancing=0 (persist in /etc/sysctl.d/)")
def numa_balancing(ctx):
    """Automatic NUMA balancing migrates pages under a running server; AMD's MI300X tuning guide turns it off."""
    value = ctx.host.cpu.numa_balancing
    if value is None:
        raise Unavailable("/proc/sys/kernel/numa_balancing not present (kernel without NUMA balancing)")
    expected = 1 if ctx.recipe.host.numa_balancing else 0
    if (value != 0) != bool(expected):
        return failed(f"kernel.numa_balancing = {value}, recipe expects {expected}")
    return passed(f"kernel.numa_balancing = {value}")


@check("host.cpu-governor", "host", "warning", "CPU frequency governor as the recipe expects",
       "cpupower frequency-set -g performance (or the tuned/BIOS equivalent)")
def cpu_governor(ctx):
    """The scheduler and tokenizer threads are on the critical path of every step; `performance` keeps them fast."""
    wanted = ctx.recipe.host.governor
    if wanted is None:
        raise Unavailable("recipe does not ask for a governor")
    governors = ctx.host.cpu.governor_summary()
    if not governors or set(governors) == {"none"}:
        raise Unavailable("no cpufreq on this host (a VM, or the BIOS owns frequency scaling)")
    others = {g: cpus for g, cpus in governors.items() if g != wanted}
    if others:
        return failed("governor " + ", ".join(f"{g} on CPUs {c}" for g, c in others.items()), governors=governors)
    return passed(f"{wanted} on all CPUs")


@check("host.isolcpus", "host", "warning", "isolated CPUs as the recipe asks",
       "add isolcpus=LIST (and nohz_full=LIST rcu_nocbs=LIST) to the kernel command line, then reboot")
def isolcpus(ctx):
    """`host.isolcpus` names cores kept free of other work for the server (or `auto`: use the isolated cores of
    the GPUs' node when there are any). Reports what the kernel has (isolcpus=, nohz_full=, rcu_nocbs= on
    /proc/cmdline and /sys/devices/system/cpu/isolated) and whether the recipe's CPUs are among them."""
    from stackctl.host.cpulist import format_cpulist, parse_cpulist

    mode = ctx.recipe.host.isolcpus
    isolation = ctx.host.cpu.isolation
    kernel = f"kernel: {isolation.kernel_summary()}"
    facts = {"kernel": isolation.to_dict()}
    isolated = set(isolation.cpus)
    if mode == "off":
        return passed(f"not used (isolcpus = off); {kernel}", **facts)
    if mode == "auto":
        _gpu_facts(ctx, "isolcpus = auto (the isolated cores of the GPUs' node)")
        if not isolated:
            return passed(f"no isolated CPUs: the server uses its node's CPUs (auto); {kernel}", **facts)
        return passed(f"isolated CPUs {format_cpulist(sorted(isolated))} available (auto); {kernel}", **facts)
    try:
        wanted = set(parse_cpulist(mode))
    except ValueError:
        return failed(f"isolcpus = {mode!r} is not a cpulist", **facts)
    absent = sorted(wanted - set(ctx.host.cpu.online_cpus)) if ctx.host.cpu.online_cpus else []
    if absent:
        return failed(f"CPUs {format_cpulist(absent)} do not exist on this host (online "
                      f"{format_cpulist(ctx.host.cpu.online_cpus)}); {kernel}", **facts)
    missing = sorted(wanted - isolated)
    if missing:
        return failed(f"CPUs {format_cpulist(missing)} are not isolated (recipe asks for {mode}); the server can "
                      f"be pinned to them, but other work shares them; {kernel}", **facts)
    return passed(f"CPUs {mode} are isolated; {kernel}", **facts)


@check("host.pinning", "host", "error", "the server can be pinned as the recipe asks",
       "fix host.numa / host.isolcpus / host.gpus to match this host")
def pinning(ctx):
    """The CPU/memory placement `up` will use, derived from the GPUs' NUMA node and the isolated cores: the cpuset
    and the launcher line, or why the request cannot be met on this host (unknown node or CPU, CPUs outside the
    chosen node, isolated CPUs the recipe did not ask for). Placements that work but cost throughput (GPUs split
    across nodes, memory remote from the GPUs) warn."""
    from stackctl.host import pinning_for
    from stackctl.host.cpulist import format_cpulist, parse_cpulist
    from stackctl.host.pinning import PinningError
    from stackctl.host.placement import placement

    if "auto" in (ctx.recipe.host.numa, ctx.recipe.host.isolcpus):
        _gpu_facts(ctx, "pinning with host.numa / host.isolcpus = auto")
    kernel = f"kernel: {ctx.host.cpu.isolation.kernel_summary()}"
    try:
        decision = pinning_for(ctx.recipe, ctx.host)
    except PinningError as exc:
        return failed(f"{exc}; {kernel}")
    place = placement(decision)
    where = (" ".join(f"{k}={v}" for k, v in place.cpuset.items()) + f", launcher {' '.join(place.launcher)}"
             if decision.pinned else "not pinned")
    cpus = parse_cpulist(decision.cpuset_cpus or "")
    nodes = {ctx.host.cpu.node_of(cpu) for cpu in cpus} - {None} or set(decision.nodes)
    details = {"placement": {"nodes": format_cpulist(nodes), "cpus": decision.cpuset_cpus or "",
                             "mems": decision.cpuset_mems or ""},
               "decision": decision.to_dict(), "launcher": list(place.launcher)}
    if decision.warnings:
        return warned(f"{where}: {'; '.join(decision.warnings)}", **details)
    return passed(f"{where}: {'; '.join(decision.reasons)}; {kernel}", **details)


@check("host.cpu-tier-ram", "host", "error", "host RAM holds the CPU tier plus headroom",
       "lower the cpu tier's size_gb, or add RAM")
def cpu_tier_ram(ctx):
    """LMCache pins the CPU tier in host memory (per tensor-parallel rank); the OS, the server process and page
    cache need headroom on top. The headroom rule is the planner's (`stackctl plan`)."""
    from stackctl.plan import host_ram_headroom

    tiers = ctx.recipe.tiers_of("cpu") if ctx.recipe.cache.enabled else []
    if not tiers:
        raise Unavailable("no CPU tier in the recipe")
    total = ctx.host.memory.total_bytes
    if not total:
        raise Unavailable("total RAM unknown (/proc/meminfo unreadable)")
    want = int(tiers[0].size_gb * GiB)
    headroom = host_ram_headroom(total)
    if want + headroom > total:
        return failed(f"CPU tier {want / GiB:.1f} GiB + headroom {headroom / GiB:.1f} GiB > RAM {total / GiB:.1f} GiB")
    return passed(f"CPU tier {want / GiB:.1f} GiB + headroom {headroom / GiB:.1f} GiB <= RAM {total / GiB:.1f} GiB")


# Files of earlier servers above this share of the tier's size make the check warn: a few chunks after a restart are
# what every restart leaves; a tier's worth is a disk filling up.
LEFTOVER_WARN_FRACTION = 0.1


@check("host.disk-tier", "host", "error",
       "the disk tier's path exists, is writable, has the space, is not rotational, and is not filling up with "
       "chunks no server reads", "create the directory on a local NVMe filesystem with enough free space")
def disk_tier(ctx):
    """LMCache's local disk tier writes chunk files under the path; it must exist, accept writes, hold
    `size_gb`, and sit on solid-state storage (a rotational disk is slower than recomputing). LMCache's disk
    backend starts with an empty index and never scans its directory, and it counts only its own files against
    `size_gb`: the files of every earlier server stay, never read and never evicted, and the disk fills over
    restarts. Files older than the running server (all of them when none runs) are those."""
    tiers = ctx.recipe.tiers_of("disk") if ctx.recipe.cache.enabled else []
    if not tiers:
        raise Unavailable("no disk tier in the recipe")
    require_this_machine(ctx, "the disk tier's path")
    tier = tiers[0]
    path = Path(tier.path)
    if not path.is_dir():
        return failed(f"{path} does not exist")
    if not os.access(path, os.W_OK):
        return failed(f"{path} is not writable")
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    want = int(tier.size_gb * GiB)
    if free < want:
        return failed(f"{path}: {size_text(free)} free < tier size {size_text(want)}")
    rotational = _rotational(path)
    started = ctx.server_started()
    files, size = files_written_before(path, started)
    leftovers = {"leftover_files": files, "leftover_bytes": size}
    warnings, fix = [f"{path} is on a rotational disk"] if rotational else [], ""
    if size > LEFTOVER_WARN_FRACTION * want:
        before = "the running server started" if started else "any server of this stack runs"
        warnings.append(f"{path}: {files} file(s), {size_text(size)}, written before {before}: LMCache's disk "
                        f"backend neither reads nor evicts them, and they are beyond the tier's size {size_text(want)}")
        fix = (f"delete them: find {path} -type f ! -newermt @{int(started)} -delete" if started else
               f"delete them before `stackctl up`: find {path} -type f -delete")
    if warnings:
        return warned("; ".join(warnings), fix=fix, **leftovers)
    note = "" if rotational is False else " (rotational flag unknown)"
    left = f"; {files} file(s), {size_text(size)}, left by earlier servers" if files else ""
    return passed(f"{path}: {size_text(free)} free >= {size_text(want)}{note}{left}", **leftovers)


def _rotational(path: Path) -> bool | None:
    """True/False from /sys/block/<dev>/queue/rotational for the device holding path; None when unknown."""
    try:
        device = os.stat(path).st_dev
        sys_dev = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
        for candidate in (sys_dev / "queue" / "rotational", sys_dev.resolve().parent / "queue" / "rotational"):
            if candidate.is_file():
                return candidate.read_text().strip() == "1"
    except OSError:
        return None
    return None
