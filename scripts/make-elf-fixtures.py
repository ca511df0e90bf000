#!/usr/bin/env python3
"""Make the small ELF fixtures in tests/fixtures/elf/: LMCache package directories whose native module is a HIP or
a CUDA build, shaped like the real ones (module name per version, DT_NEEDED, fatbin sections, registration symbol,
a clang offload bundle naming the gfx target, with a code object per target that holds the AMDGPU metadata note of
the kernels the release launches: stackctl/knowledge/facts, hip_kernels). The probe (probes/probe_image.py) reads
them as it reads an image.

The real PyPI wheels show the CUDA shapes: lmcache 0.4.4 c_ops links libcudart.so.12, 0.4.5 and 0.5.3 c_ops link
libcudart.so.13, 0.5.4 ships cuda_ops (libcudart.so.13). A HIP build keeps the module name of its version
(LMCache 0.5.6 setup_extensions/build_profiles/rocm.py:146 builds "lmcache.cuda_ops").

Needs gcc; the outputs are committed, so tests do not. Run: python3 scripts/make-elf-fixtures.py
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "elf"
SUFFIX = ".cpython-311-x86_64-linux-gnu.so"

FACTS = Path(__file__).resolve().parent.parent / "stackctl" / "knowledge" / "facts"
# (directory, LMCache version, native module, build kind, runtime library soname, gfx targets[, code-object change])
CASES = [
    ("lmcache-0.4.4-hip", "0.4.4", "c_ops", "hip", "libamdhip64.so.6", ["gfx942"]),
    ("lmcache-0.5.3-hip", "0.5.3", "c_ops", "hip", "libamdhip64.so.6", ["gfx942"]),
    ("lmcache-0.5.4-hip", "0.5.4", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942", "gfx950"]),
    ("lmcache-0.5.6-hip", "0.5.6", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942"]),
    ("lmcache-0.4.4-cuda", "0.4.4", "c_ops", "cuda", "libcudart.so.12", []),
    ("lmcache-0.5.3-cuda", "0.5.3", "c_ops", "cuda", "libcudart.so.13", []),
    ("lmcache-0.5.6-cuda", "0.5.6", "cuda_ops", "cuda", "libcudart.so.13", []),
    # A HIP build that lost a kernel for one target, and one compiled for wavefront 32 with spills and scratch.
    ("lmcache-0.5.6-hip-lost-kernel", "0.5.6", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942", "gfx950"],
     "lose load_and_reshape_multi_layer_fused_kernel on gfx950"),
    ("lmcache-0.5.6-hip-wave32", "0.5.6", "cuda_ops", "hip", "libamdhip64.so.7", ["gfx942"],
     "wave32 and spills"),
]


def msgpack(value) -> bytes:
    """MessagePack of the types AMDGPU metadata uses (maps, arrays, strings, small ints, booleans)."""
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return bytes([value]) if 0 <= value < 0x80 else b"\xce" + struct.pack(">I", value)
    if isinstance(value, str):
        raw = value.encode()
        return (bytes([0xA0 | len(raw)]) if len(raw) < 32 else b"\xda" + struct.pack(">H", len(raw))) + raw
    if isinstance(value, list):
        return b"\xdc" + struct.pack(">H", len(value)) + b"".join(msgpack(v) for v in value)
    return b"\xde" + struct.pack(">H", len(value)) + b"".join(msgpack(k) + msgpack(v) for k, v in value.items())


def kernel_names(version: str) -> list[str]:
    """The kernels the release's HIP sources launch (its facts file), mangled as clang names them in namespace lmc."""
    facts = json.loads((FACTS / f"lmcache-{version}.json").read_text())
    return [f"_ZN3lmc{len(name)}{name}IlEEvPv" for name in facts["hip_kernels"]["kernels"]]


def code_object(target: str, version: str, change: str) -> bytes:
    """An AMDGPU ELF holding only what the probe reads: a note section with the AMDGPU metadata (NT_AMDGPU_METADATA,
    MessagePack), one entry per kernel with its wavefront size, spills and scratch."""
    kernels = []
    for name in kernel_names(version):
        if change.startswith("lose ") and change.endswith(target) and change.split()[1] in name:
            continue
        wave32 = change == "wave32 and spills"
        kernels.append({".name": name, ".symbol": name + ".kd", ".wavefront_size": 32 if wave32 else 64,
                        ".sgpr_spill_count": 3 if wave32 else 0, ".vgpr_spill_count": 0,
                        ".private_segment_fixed_size": 16 if wave32 else 0, ".uses_dynamic_stack": False})
    desc = msgpack({"amdhsa.kernels": kernels, "amdhsa.target": f"amdgcn-amd-amdhsa--{target}",
                    "amdhsa.version": [1, 2]})
    note = struct.pack("<III", 7, len(desc), 32) + b"AMDGPU\0\0" + desc + b"\0" * (-len(desc) % 4)
    names = b"\0.note\0.shstrtab\0"
    note_at = 64
    names_at = note_at + len(note)
    headers_at = names_at + len(names) + (-(names_at + len(names)) % 8)
    header = (b"\x7fELF\x02\x01\x01\x40" + b"\0" * 8
              + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, headers_at, 0, 64, 0, 0, 64, 3, 2))
    sections = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sections += struct.pack("<IIQQQQIIQQ", 1, 7, 0, 0, note_at, len(note), 0, 0, 4, 0)
    sections += struct.pack("<IIQQQQIIQQ", 7, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    return header + note + names + b"\0" * (headers_at - names_at - len(names)) + sections


def offload_bundle(targets: list[str], version: str, change: str = "") -> bytes:
    """An uncompressed clang offload bundle: magic, entry count, then (offset, size, id length, id) per entry, then
    each target's code object (the host entry is empty, as hipcc writes it)."""
    ids = [b"host-x86_64-unknown-linux-gnu-"] + [f"hipv4-amdgcn-amd-amdhsa--{t}".encode() for t in targets]
    objects = [b""] + [code_object(t, version, change) for t in targets]
    header_size = 24 + 8 + sum(24 + len(entry_id) for entry_id in ids)
    header, offset = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)), header_size
    for entry_id, blob in zip(ids, objects):
        header += struct.pack("<QQQ", offset, len(blob), len(entry_id)) + entry_id
        offset += len(blob)
    return header + b"".join(objects)


def c_array(data: bytes) -> str:
    return ", ".join(str(b) for b in data) or "0"


def build(work: Path, case) -> None:
    name, version, module, kind, runtime, targets, *change = case
    package = OUT / name / "lmcache"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    register = "__hipRegisterFatBinary" if kind == "hip" else "__cudaRegisterFatBinary"
    sections = (".hip_fatbin", ".hipFatBinSegment") if kind == "hip" else (".nv_fatbin", ".nvFatBinSegment")
    payload = offload_bundle(targets, version, *change) if kind == "hip" else b"\x50\xed\x55\xba fake cubin"
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
