"""The HIP toolchain's LLVM major version, as scripts/hip-toolchain.pins holds it: the test that starts this driver
passes it in (`-e LLVM_MAJOR=N`, from `python scripts/hip_pins.py facts`), so no script here writes it again."""

import os
import sys

LLVM_MAJOR = os.environ.get("LLVM_MAJOR") or sys.exit(
    "LLVM_MAJOR is not set (fix: pass `-e LLVM_MAJOR=N` with N from `python scripts/hip_pins.py facts`)")


def tool(name: str) -> str:
    """Debian's versioned name of an LLVM tool: clang++-21, llvm-spirv-21, llvm-cxxfilt-21."""
    return f"{name}-{LLVM_MAJOR}"


def llvm_bin(name: str) -> str:
    """A tool Debian ships only in LLVM's own bin directory (llvm-as)."""
    return f"/usr/lib/llvm-{LLVM_MAJOR}/bin/{name}"
