#!/usr/bin/env python3
"""Make the small ELF fixtures in tests/fixtures/elf/: LMCache package directories whose native module is a HIP or
a CUDA build, shaped like the real ones (module name per version, DT_NEEDED, fatbin sections, registration symbol,
a clang offload bundle naming the gfx target). The probe (probes/probe_image.py) reads them as it reads an image.

The real PyPI wheels show the CUDA shapes: lmcache 0.4.4 c_ops links libcudart.so.12, 0.4.5 and 0.5.3 c_ops link
libcudart.so.13, 0.5.4 ships cuda_ops (libcudart.so.13). A HIP build keeps the module name of its version
(LMCache 0.5.6 setup_extensions/build_profiles/rocm.py:146 builds "lmcache.cuda_ops").

Needs gcc; the outputs are committed, so tests do not. Run: python3 scripts/make-elf-fixtures.py
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "elf"
SUFFIX = ".cpython-311-x86_64-linux-gnu.so"

# (directory, LMCache version, native module, build kind, runtime library soname, gfx targets)
CASES = [
    ("lmcache-0.4.4-hip", "0.4.4", "c_ops", "hip", "libamdhip64.so.6", ["gfx942"]),
    ("lmcache-0.5.3-hip", "0.5.3", "c_ops", "hip", "libamdhip64.so.6", ["gfx942"]),
    ("lmcache-0.5.4-hip", "0.5.4", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942", "gfx950"]),
    ("lmcache-0.5.6-hip", "0.5.6", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942"]),
    ("lmcache-0.4.4-cuda", "0.4.4", "c_ops", "cuda", "libcudart.so.12", []),
    ("lmcache-0.5.3-cuda", "0.5.3", "c_ops", "cuda", "libcudart.so.13", []),
    ("lmcache-0.5.6-cuda", "0.5.6", "cuda_ops", "cuda", "libcudart.so.13", []),
]


def offload_bundle(targets: list[str]) -> bytes:
    """An uncompressed clang offload bundle: magic, entry count, then (offset, size, id length, id) per entry."""
    ids = [b"host-x86_64-unknown-linux-gnu-"] + [f"hipv4-amdgcn-amd-amdhsa--{t}".encode() for t in targets]
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids))
    for entry_id in ids:
        header += struct.pack("<QQQ", 0, 0, len(entry_id)) + entry_id
    return header


def c_array(data: bytes) -> str:
    return ", ".join(str(b) for b in data) or "0"


def build(work: Path, case) -> None:
    name, version, module, kind, runtime, targets = case
    package = OUT / name / "lmcache"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    register = "__hipRegisterFatBinary" if kind == "hip" else "__cudaRegisterFatBinary"
    sections = (".hip_fatbin", ".hipFatBinSegment") if kind == "hip" else (".nv_fatbin", ".nvFatBinSegment")
    payload = offload_bundle(targets) if kind == "hip" else b"\x50\xed\x55\xba fake cubin"
    stub = work / f"{runtime}.c"
    stub.write_text(f"void *{register}(const void *fatbin) {{ return (void *)fatbin; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(work / runtime), f"-Wl,-soname,{runtime}", str(stub)],
                   check=True)
    source = work / f"{name}.c"
    source.write_text(
        f"extern void *{register}(const void *);\n"
        f'__attribute__((section("{sections[0]}"), used)) const unsigned char fatbin[] = {{{c_array(payload)}}};\n'
        f'__attribute__((section("{sections[1]}"), used)) const void *segment = fatbin;\n'
        f"void *lmcache_register(void) {{ return {register}(fatbin); }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-s", "-o", str(package / f"{module}{SUFFIX}"), str(source),
                    str(work / runtime)], check=True)


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            build(Path(tmp), case)
    print(f"wrote {len(CASES)} fixtures under {OUT}")


if __name__ == "__main__":
    main()
