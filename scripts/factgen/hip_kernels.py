"""LMCache's HIP kernels, read from its source release: which CUDA sources its ROCm build hipifies and compiles, and
the kernels (`__global__` functions) those sources launch. A kernel the sources define but never launch (a template
nobody instantiates, a launch left in a comment: `encode_kernel` in 0.5.6 csrc/cuda/ac_enc.cu:103, its launch
commented out at :438) has no code object, so it is listed apart and not expected in a build.

The ROCm build names its sources in its build profile (0.5.0 on: setup_extensions/build_profiles/rocm.py, `.cu`
names from 0.5.4, the hipified `.hip` names before) or in setup.py (0.4.x: `cuda_sources`, hipified in place): every
string literal there naming a `.cu`/`.hip` file is a source, found again under csrc/ as its `.cu` original.
"""

from __future__ import annotations

import ast
import re
import tarfile
from pathlib import Path, PurePosixPath

GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                    r"(\w+)\s*\(")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
BUILD_FILES = ("setup_extensions/build_profiles/rocm.py", "setup.py")


def sdist_files(archive: Path) -> dict[str, str]:
    """The build files and CUDA sources of an sdist, by path inside the package (its top folder dropped)."""
    files = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and (inner in BUILD_FILES or inner.startswith("csrc/")
                                    and inner.endswith((".cu", ".cuh"))):
                source = tar.extractfile(member)
                if source is not None:
                    files[inner] = source.read().decode("utf-8", "replace")
    return files


def blank_comments(text: str) -> str:
    """TEXT with its C/C++ comments blanked, newlines kept (line numbers stay right)."""
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def hip_sources(files: dict[str, str]) -> tuple[list[str], str] | None:
    """(the csrc paths of the .cu sources the ROCm build compiles, where the list is) or None when no build file
    names one."""
    for build_file in BUILD_FILES:
        if build_file not in files:
            continue
        named, first_line = [], None
        for node in ast.walk(ast.parse(files[build_file])):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.endswith((".cu", ".hip")):
                named.append(node.value)
                first_line = min(first_line or node.lineno, node.lineno)
        found = []
        for name in named:
            stem = PurePosixPath(name).name.rsplit(".", 1)[0] + ".cu"
            path = next((p for p in sorted(files) if p.startswith("csrc/") and PurePosixPath(p).name == stem), None)
            if path and path not in found:
                found.append(path)
        if found:
            return found, f"{build_file}:{first_line}"
    return None


def extract(files: dict[str, str]) -> dict:
    """{"sources": [...], "sources_from": "file:line", "kernels": {name: "file:line"}, "not_launched": {...}};
    an empty dict when the release names no HIP sources."""
    found = hip_sources(files)
    if found is None:
        return {}
    sources, where = found
    code = {path: blank_comments(files[path]) for path in files if path.startswith("csrc/")}
    compiled = "\n".join(code[path] for path in sources)
    kernels: dict[str, str] = {}
    not_launched: dict[str, str] = {}
    for path in sources:
        for match in GLOBAL.finditer(code[path]):
            name = match.group(1)
            line = code[path].count("\n", 0, match.start()) + 1
            uses = len(re.findall(rf"\b{name}\b", compiled))
            (kernels if uses > 1 else not_launched).setdefault(name, f"{path}:{line}")
    return {"sources": sources, "sources_from": where, "kernels": dict(sorted(kernels.items())),
            "not_launched": dict(sorted(not_launched.items()))}
