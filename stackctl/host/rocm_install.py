"""The ROCm installed on a host: its version and the HIP runtime libraries, found in every layout a release uses
(/opt/rocm and /opt/rocm-X.Y for ROCm's own packages, /opt/rocm/core-X.Y for TheRock builds; knowledge/rocm.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackctl.host.sysfs import read_text, under
from stackctl.knowledge.rocm import ROCM_LIBRARY_GLOBS, ROCM_VERSION_FILES

HIP_RUNTIME_GLOB = "libamdhip64.so*"
# An install directory's own version: /opt/rocm-7.0.2, /opt/rocm/core-7.14.
DIRECTORY_VERSION = re.compile(r"/opt/rocm(?:-|/core-)(\d+\.\d+(?:\.\d+)?)/lib$")
VERSION_TEXT = re.compile(r"^\d+\.\d+(?:\.\d+)?")


@dataclass(frozen=True)
class RocmInstall:
    version: str | None  # MAJOR.MINOR[.PATCH] of the installed ROCm, None when no install says
    version_source: str | None  # the file or directory the version was read from
    hip_runtimes: list[str] = field(default_factory=list)  # every libamdhip64.so* found, as paths on the host

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "version_source": self.version_source, "hip_runtimes": list(self.hip_runtimes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RocmInstall:
        return cls(data.get("version"), data.get("version_source"), list(data.get("hip_runtimes", [])))


def library_dirs(root: Path) -> list[str]:
    """Every ROCm library directory present under root, in ROCM_LIBRARY_GLOBS order, as host paths."""
    found: list[str] = []
    seen: set[Path] = set()  # /opt/rocm is a link to /opt/rocm-X.Y on classic installs: list the directory once
    for pattern in ROCM_LIBRARY_GLOBS:
        for path in sorted(Path(root).glob(pattern.lstrip("/"))):
            if path.is_dir() and path.resolve() not in seen:
                seen.add(path.resolve())
                found.append("/" + path.relative_to(root).as_posix())
    return found


def read_rocm_install(root: Path = Path("/")) -> RocmInstall:
    """The ROCm under root: the version from ROCm's .info files, else from an install directory's name; the HIP
    runtime libraries of every layout. Nothing installed: version None and no libraries (a fact, not an error)."""
    root = Path(root)
    version, source = None, None
    for path in ROCM_VERSION_FILES:
        match = VERSION_TEXT.match((read_text(root, path) or "").strip())
        if match:
            version, source = match.group(0), path
            break
    runtimes: list[str] = []
    for directory in library_dirs(root):
        names = sorted(p.name for p in under(root, directory).glob(HIP_RUNTIME_GLOB))
        runtimes += [f"{directory}/{name}" for name in names]
        named = DIRECTORY_VERSION.search(directory)
        if version is None and named:
            version, source = named.group(1), directory.rsplit("/lib", 1)[0]
    return RocmInstall(version, source, runtimes)
