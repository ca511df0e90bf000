"""The fallback route: LMCache's kernels compiled by the toolchain's clang for the host CPU and run work-item by
work-item (host_shim.h), loaded with ctypes. Used where the SPIR-V route meets a limit (spirv_build.py)."""

import ctypes
import os
import subprocess
import tempfile

import numpy as np

from cut_kernels import cut
from toolchain import tool

HERE = os.path.dirname(os.path.abspath(__file__))
CLANG = [tool("clang++"), "-x", "c++", "-std=c++17", "-O3", "-fPIC", "-shared", "-DUSE_ROCM=1",
         "-include", os.path.join(HERE, "host_shim.h")]


def torch_includes() -> list:
    from torch.utils.cpp_extension import include_paths

    return [f"-I{p}" for p in include_paths()]


def build(source: str, include_dirs: list, kernels: list, preamble: str = "") -> dict:
    """kernel (C++ name with template arguments) -> launch(grid, block, args) of the host-compiled kernel."""
    launchers = "\n".join(
        f'extern "C" void stackctl_launch_{i}(const unsigned* g, const unsigned* b, void** a) '
        f"{{ stackctl_launch(&{kernel}, g, b, a); }}" for i, kernel in enumerate(kernels))
    work = tempfile.mkdtemp()
    path = os.path.join(work, "kernels.cpp")
    with open(path, "w") as f:
        f.write(preamble + cut(source, include_dirs) + "// The kernels the tests launch.\n" + launchers + "\n")
    library = os.path.join(work, "kernels.so")
    done = subprocess.run(CLANG + [f"-I{d}" for d in include_dirs] + torch_includes() + [path, "-o", library],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"host compile of {source}: exit {done.returncode}\n{done.stderr}")
    lib = ctypes.CDLL(library)
    return {kernel: _launcher(getattr(lib, f"stackctl_launch_{i}")) for i, kernel in enumerate(kernels)}


def _launcher(entry):
    def launch(grid: tuple, block: tuple, args: list) -> None:
        """args as for the SPIR-V route: a numpy array passes its address, a numpy scalar or bytes their value."""
        values = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else
                  ctypes.create_string_buffer(a if isinstance(a, bytes) else a.tobytes()) for a in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        dims = [(ctypes.c_uint * 3)(*(tuple(d) + (1,) * (3 - len(d)))) for d in (grid, block)]
        entry(dims[0], dims[1], pointers)
    return launch
