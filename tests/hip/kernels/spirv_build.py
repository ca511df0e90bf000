"""LMCache's hipified kernels to SPIR-V with the HIP toolchain image's clang, the way the kernel tests run them.

The toolchain clang's HIP front end (the compiler LMCache's ROCm build uses, with the build's defines) emits device LLVM
IR for the spirv64 target; the module id clang adds in HIP mode (@__hip_cuid_*, an addrspace(1) global SPIR-V cannot
express as a kernel module variable) is dropped; llvm-spirv writes SPIR-V 1.2, which PoCL's OpenCL 3.0 CPU device reads,
and spirv-val checks it. Kernels are emitted for the template arguments the host function at the end of the cut source
names (a kernel referenced from host code is emitted for the device, as a launch would).

"""

import os
import re
import subprocess
import tempfile

from cut_kernels import cut
from toolchain import llvm_bin, tool

HERE = os.path.dirname(os.path.abspath(__file__))
# What LMCache's ROCm profile compiles with (define_macros, -O3 via hipcc) plus what the SPIR-V route needs.
CLANG = [
    tool("clang++"), "-x", "hip", "--offload=spirv64", "--cuda-device-only", "--no-offload-new-driver",
    "-nogpuinc", "-nogpulib", "-O3", "-std=c++17", "-fms-extensions",
    "-D__HIP_PLATFORM_HCC__=1", "-DUSE_ROCM=1", "-include", os.path.join(HERE, "device_shim.h"),
    "-emit-llvm", "-S",
]
LLVM_AS = llvm_bin("llvm-as")
HIP_MODULE_ID = re.compile(r"^.*@__hip_cuid_.*\n", re.M)


def run(cmd: list) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def instances_source(kernels: list) -> str:
    refs = "\n".join(f"  (void)&{kernel};" for kernel in kernels)
    return f"// The kernels the tests launch.\nvoid stackctl_kernel_instances() {{\n{refs}\n}}\n"


def build(source: str, include_dirs: list, kernels: list) -> bytes:
    """SPIR-V bytes of the kernels (C++ names with template arguments) cut from one hipified LMCache source."""
    with tempfile.TemporaryDirectory() as work:
        cut_path = os.path.join(work, "kernels.hip")
        with open(cut_path, "w") as f:
            f.write(cut(source, include_dirs) + instances_source(kernels))
        includes = [f"-I{d}" for d in include_dirs]
        run(CLANG + includes + [cut_path, "-o", os.path.join(work, "kernels.ll")])
        with open(os.path.join(work, "kernels.ll")) as f:
            ir = HIP_MODULE_ID.sub("", f.read())
        with open(os.path.join(work, "kernels.ll"), "w") as f:
            f.write(ir)
        run([LLVM_AS, os.path.join(work, "kernels.ll"), "-o", os.path.join(work, "kernels.bc")])
        spv = os.path.join(work, "kernels.spv")
        run([tool("llvm-spirv"), "--spirv-max-version=1.2", os.path.join(work, "kernels.bc"), "-o", spv])
        run(["spirv-val", spv])
        with open(spv, "rb") as f:
            return f.read()


def template_id(demangled: str) -> str:
    """'void lmc::k<long, (EngineKVFormat)1>(long*, ...)' -> 'lmc::k<long, (EngineKVFormat)1>'; a kernel of an
    anonymous namespace by its name alone (as the cut source names it)."""
    demangled = demangled.replace("(anonymous namespace)::", "")
    start, depth = demangled.index("<"), 0
    for end in range(start, len(demangled)):
        depth += {"<": 1, ">": -1}.get(demangled[end], 0)
        if depth == 0:
            return demangled[len("void "):end + 1]
    raise ValueError(demangled)


def kernel_names(mangled: list) -> dict:
    """Kernel as the tests spell it (the demangler's spelling, also valid C++) -> its mangled name in SPIR-V."""
    plain = run([tool("llvm-cxxfilt")] + mangled).splitlines()
    return {template_id(p): m for p, m in zip(plain, mangled)}
