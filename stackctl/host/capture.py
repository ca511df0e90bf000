"""`stackctl doctor --capture-host DIR`: copy the files doctor's host checks read into DIR, laid out as on the host,
so `stackctl doctor --host-root DIR` judges that host anywhere (how a user sends their host to whoever supports
them).

Only what the host readers (host/*.py) read is copied: procfs and sysfs facts, device nodes as empty files, the
`video` and `render` lines of /etc/group and the capturing user's line of /etc/passwd, ROCm's version files and the
names of its HIP runtime libraries (empty files, never the binaries). No other file, no environment, no secret.
tests/unit/test_host_capture.py holds this list equal to what discovery reads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.host.devices import GPU_GROUPS, read_device_facts
from stackctl.host.rocm_install import HIP_RUNTIME_GLOB
from stackctl.knowledge.rocm import ROCM_LIBRARY_GLOBS

IDENTITY_FILE = "stackctl-host.json"  # who captured the tree (user, uid, groups): the device checks judge that user

# Files copied as they are (globs relative to the root).
COPIED = (
    "proc/cmdline", "proc/meminfo", "proc/cpuinfo",
    "proc/sys/kernel/hostname", "proc/sys/kernel/osrelease", "proc/sys/kernel/numa_balancing", "etc/hostname",
    "sys/devices/system/cpu/online", "sys/devices/system/cpu/isolated", "sys/devices/system/cpu/nohz_full",
    "sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
    "sys/devices/system/node/online", "sys/devices/system/node/node[0-9]*/cpulist",
    "sys/devices/system/node/node[0-9]*/meminfo",
    "sys/class/kfd/kfd/topology/nodes/[0-9]*/properties", "sys/class/kfd/kfd/topology/nodes/[0-9]*/gpu_id",
    "sys/class/kfd/kfd/topology/nodes/[0-9]*/name",
    "sys/class/drm/card[0-9]*/device/uevent", "sys/class/drm/card[0-9]*/device/numa_node",
    "sys/class/drm/card[0-9]*/device/mem_info_vram_total", "sys/class/drm/card[0-9]*/device/product_name",
    "sys/class/drm/renderD[0-9]*/device/uevent", "sys/class/drm/renderD[0-9]*/device/numa_node",
    "sys/class/drm/renderD[0-9]*/device/mem_info_vram_total", "sys/class/drm/renderD[0-9]*/device/product_name",
    "sys/module/amdgpu/version",
    "opt/rocm/.info/version", "opt/rocm/.info/version-rocm",
)
# Present or absent is the fact: created empty (device nodes, library names) or as a directory.
PLACEHOLDERS = ("dev/kfd", "dev/dri/renderD[0-9]*", "dev/dri/card[0-9]*") + tuple(
    f"{pattern.lstrip('/')}/{HIP_RUNTIME_GLOB}" for pattern in ROCM_LIBRARY_GLOBS)
DIRECTORIES = ("sys/module/amdgpu",)


def capture_host(destination: Path, source: Path = Path("/")) -> list[str]:
    """Copy the host facts under `source` into `destination` (a new or empty directory); the host paths written."""
    destination, source = Path(destination), Path(source)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise StackctlError(f"{destination}: not an empty directory (choose a new one for the capture)")
    written: list[str] = []
    for pattern in COPIED:
        for path in sorted(source.glob(pattern)):
            if path.is_file():
                written.append(_put(destination, source, path, path.read_bytes()))
    for pattern in PLACEHOLDERS:
        for path in sorted(source.glob(pattern)):
            written.append(_put(destination, source, path, b""))
    for pattern in DIRECTORIES:
        for path in sorted(source.glob(pattern)):
            if path.is_dir():
                (destination / path.relative_to(source)).mkdir(parents=True, exist_ok=True)
                written.append("/" + path.relative_to(source).as_posix())
    _link_rocm(destination, source)
    written += _identity(destination, source)
    return written


def _put(destination: Path, source: Path, path: Path, content: bytes) -> str:
    relative = path.relative_to(source)
    target = destination / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    return "/" + relative.as_posix()


def _link_rocm(destination: Path, source: Path) -> None:
    """/opt/rocm is a link to the installed /opt/rocm-X.Y on classic installs: keep it a link in the capture."""
    link = source / "opt" / "rocm"
    if link.is_symlink():
        copy = destination / "opt" / "rocm"
        if copy.is_dir() and not copy.is_symlink():  # files copied through the link: move them to its target
            target = destination / "opt" / os.readlink(link).rstrip("/").rsplit("/", 1)[-1]
            shutil.copytree(copy, target, dirs_exist_ok=True)
            shutil.rmtree(copy)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(link).rstrip("/").rsplit("/", 1)[-1])


def _identity(destination: Path, source: Path) -> list[str]:
    """The capturing user's lines of /etc/group and /etc/passwd (no other user's), and who they are."""
    devices = read_device_facts(source)
    groups = [line for line in _lines(source / "etc" / "group") if line.split(":")[0] in GPU_GROUPS]
    users = [line for line in _lines(source / "etc" / "passwd") if line.split(":")[0] == devices.user]
    written = []
    for name, lines in (("group", groups), ("passwd", users)):
        if lines:
            written.append(_put(destination, destination, destination / "etc" / name, ("\n".join(lines) + "\n").encode()))
    gids = sorted(set(os.getgroups()) | {os.getgid()}) if source.resolve() == Path("/") else []
    identity = {"user": devices.user, "uid": devices.uid, "gids": gids}
    (destination / IDENTITY_FILE).write_text(json.dumps(identity, indent=1) + "\n")
    return written + ["/" + IDENTITY_FILE]


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def captured_identity(root: Path) -> dict | None:
    """The user a captured tree was taken as ({"user", "uid", "gids"}), None for a tree without one."""
    try:
        data = json.loads((Path(root) / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
