"""Run LMCache's hipified HIP kernels on PoCL's CPU device and compare them bit for bit with numpy references.

    python run_kernels.py LMCACHE_HIP_DIR     (in the kernels image: tests/hip/kernels/Dockerfile)

Prints one JSON line per comparison: case, kernel, expect ("match", or "mismatch" for the cases that prove a wrong
layout or a changed reference is caught), elements, mismatches, first_mismatch; then a summary line. The launch
arguments are what LMCache's host wrappers (mem_kernels.cu, mp_mem_kernels.cu, pos_kernels.cu) compute from torch
tensors, worked out here from numpy arrays of the same shapes; the data are bf16-sized (uint16) elements moved as
8-byte words (16-byte units in the multi-process transfer), as the wrappers do for rows of such sizes. RoPE on
fp16/bf16 keys runs compiled for the host CPU instead (host_build.py: torch's c10 types do not compile to SPIR-V).
"""

import json
import os
import sys

import numpy as np

import host_build
import kv_reference as ref
import spirv_build
from pocl import CpuDevice
from toolchain import LLVM_MAJOR

NL, NB, BS, NH, HS, MLA_HS, NT = 3, 8, 16, 6, 128, 576, 40  # 6*128 elements: 192 words, more than one block of 128
HOLES = (3, 17, 29)  # tokens without a slot (-1)
D2H, H2D = 1, 0  # TransferDirection
MEM, POS = "csrc_hip/cuda/mem_kernels.hip", "csrc_hip/cuda/pos_kernels.hip"
MP = "csrc_hip/cuda/mp_mem_kernels.hip"
HOST = "host:"  # a source under this prefix is compiled for the host CPU (host_build.py), not to SPIR-V
# c10's element types for the host route (the SPIR-V route cannot include torch's headers, see host_shim.h).
C10_TYPES = "#include <c10/util/Half.h>\n#include <c10/util/BFloat16.h>\n"
rng = np.random.default_rng(20261128)


def multi_layer(word: str, d2h: bool, fmt: int) -> str:
    return f"lmc::load_and_reshape_multi_layer_kernel<{word}, {str(d2h).lower()}, (EngineKVFormat){fmt}>"


def single_layer(fmt: int) -> str:
    return f"lmc::single_layer_kv_transfer_kernel<long, (EngineKVFormat){fmt}>"


def fused(d2h: bool, fmt: int) -> str:
    return f"lmc::load_and_reshape_multi_layer_fused_kernel<long, {str(d2h).lower()}, (EngineKVFormat){fmt}>"


def rope(neox: bool, ramp: bool = False, element: str = "float") -> str:
    name = "rotary_embedding_kernel_fused_ramp_multi" if ramp else "rotary_embedding_kernel_fused"
    cpp = ref.ELEMENTS[element][0]
    return f"lmc::{name}<{cpp}, {cpp}, {str(neox).lower()}>"


def slot_mapping(tokens: int = NT, pool=None) -> np.ndarray:
    slots = (rng.permutation(NB * BS) if pool is None else pool)[:tokens].astype(np.int64)
    slots[[h for h in HOLES if h < tokens]] = -1
    return slots


def block_transfer(unit: str, to_engine: bool, fmt: int) -> str:
    return f"multi_layer_block_transfer_kernel<{unit}, {str(to_engine).lower()}, (EngineKVFormat){fmt}>"


def logical_layer(fmt: int, heads: int = NH, head: int = HS) -> np.ndarray:
    shape = (1, NB, BS, 1, MLA_HS) if fmt == ref.MLA else (2, NB, BS, heads, head)
    return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)


def row_elements(fmt: int, heads: int = NH, head: int = HS) -> int:
    return MLA_HS if fmt == ref.MLA else heads * head


class Runner:
    def __init__(self, lmcache_hip: str, kernels: dict):
        self.device = CpuDevice()
        include = [os.path.join(lmcache_hip, "csrc")]
        self.program_of, self.mangled, self.host = {}, {}, {}  # kernel -> its program / its SPIR-V name / launcher
        for source, wanted in kernels.items():
            if source.startswith(HOST):
                path = os.path.join(lmcache_hip, source[len(HOST):])
                self.host.update(host_build.build(path, include, wanted, preamble=C10_TYPES))
                continue
            program = self.device.program(spirv_build.build(os.path.join(lmcache_hip, source), include, wanted))
            self.program_of.update({k: program for k in wanted})
            built = spirv_build.kernel_names(program.get_info(0x1168).split(";"))  # CL_PROGRAM_KERNEL_NAMES
            missing = set(wanted) - set(built)
            if missing:
                raise RuntimeError(f"{source}: kernels not in the SPIR-V: {sorted(missing)}; built: {sorted(built)}")
            self.mangled.update(built)

    def launch(self, kernel: str, grid: tuple, block: tuple, args: list, host: bool = False) -> None:
        if host:
            self.host[kernel](grid, block, args)
        else:
            self.device.launch(self.program_of[kernel], self.mangled[kernel], grid, block, args)


# --- the transfer between vLLM's paged cache and LMCache's buffer, all layers in one launch ---

def run_multi_layer(run: Runner, fmt: int, d2h: bool, layers: int = NL, skip: int = 0, word: str = "long",
                    kernel_fmt=None, heads: int = NH, head: int = HS, slots=None, lmc=None, paged=None):
    """One launch; returns what it wrote (D2H: LMCache's buffer [kv, layer, token, row]; H2D: the layers as stored),
    the expected, the stored layers and their logical contents."""
    per_word = {"long": 4, "int": 2}[word]
    row = row_elements(fmt, heads, head)
    kv = 1 if fmt == ref.MLA else 2
    slots = slot_mapping() if slots is None else slots
    logical = [logical_layer(fmt, heads, head) for _ in range(layers)] if paged is None else paged
    stored = [run.device.array(ref.to_physical(x, fmt)) for x in logical]
    if lmc is None:
        lmc = rng.integers(0, 1 << 16, size=(kv, layers, NT, row), dtype=np.uint16)
    buffer = run.device.array(lmc)
    args = [buffer, run.device.pointer_table(stored), run.device.array(slots), np.int32(row // per_word),
            np.int32(NT), np.int32(layers), np.int32(NB * BS), np.int32(BS), np.int32(head // per_word),
            np.int32(skip), np.int64(0)]
    run.launch(multi_layer(word, d2h, kernel_fmt or fmt), (NT - skip, layers, kv), (min(row // per_word, 128),), args)
    moved = slots.copy()
    moved[:skip] = -1  # skip_prefix_n_tokens: the first tokens stay where they are
    if d2h:
        want = np.stack([ref.gather(logical[i], moved, lmc[:, i]) for i in range(layers)], axis=1)
        return buffer, want, stored, logical
    want = [ref.to_physical(ref.scatter(logical[i], moved, lmc[:, i]), fmt) for i in range(layers)]
    return np.stack(stored), np.stack(want), stored, logical


def multi_layer_case(run, fmt, d2h, **kw):
    got, want, _, _ = run_multi_layer(run, fmt, d2h, **kw)
    return ref.compare(got, want)


def round_trip_case(run, fmt):
    """Paged cache -> LMCache -> a zeroed paged cache: the slots come back, nothing else is written."""
    slots = slot_mapping()
    buffer, _, _, source = run_multi_layer(run, fmt, True, slots=slots)
    zeroed = [np.zeros_like(x) for x in source]
    got, _, _, _ = run_multi_layer(run, fmt, False, slots=slots, lmc=np.asarray(buffer), paged=zeroed)
    want = [ref.to_physical(ref.scatter(zeroed[i], slots, ref.gather(source[i], slots, np.zeros_like(buffer[:, i]))),
                            fmt) for i in range(NL)]
    return ref.compare(got, np.stack(want))


# --- one layer, LMCache's buffer token-major [token, kv, row] or kv-major [kv, token, row] ---

def single_layer_case(run, fmt, direction, token_major):
    row, slots, logical = row_elements(fmt), slot_mapping(), logical_layer(fmt)
    stored = run.device.array(ref.to_physical(logical, fmt))
    shape = (NT, row) if fmt == ref.MLA else (NT, 2, row) if token_major else (2, NT, row)
    lmc = run.device.array(rng.integers(0, 1 << 16, size=shape, dtype=np.uint16))
    before = np.array(lmc)

    def as_kv(buffer):  # LMCache's buffer seen as [kv, token, row]
        if fmt == ref.MLA:
            return buffer[None]
        return buffer.transpose(1, 0, 2) if token_major else buffer

    words = lambda strides, axis: strides[axis] // 8  # noqa: E731 (element strides in 8-byte words)
    if fmt == ref.MLA:
        heads, block, head_words = 1, stored.shape[1], stored.shape[2] // 4
        vllm_block, vllm_value, lmc_stride, lmc_value = words(stored.strides, 0), 0, words(lmc.strides, 0), 0
    else:
        hnd = fmt in (6, 7)
        heads, block = (stored.shape[2], stored.shape[3]) if hnd else (stored.shape[3], stored.shape[2])
        head_words = stored.shape[4] // 4
        block_axis, value_axis = (1, 0) if fmt in (1, 6) else (0, 1)
        vllm_block, vllm_value = words(stored.strides, block_axis), words(stored.strides, value_axis)
        lmc_axis, lmc_value_axis = (0, 1) if token_major else (1, 0)
        lmc_stride, lmc_value = words(lmc.strides, lmc_axis), words(lmc.strides, lmc_value_axis)
    args = [lmc, stored, run.device.array(slots)] + [np.int32(v) for v in (
        vllm_block, vllm_value, lmc_stride, lmc_value, heads, head_words, block, direction)]
    run.launch(single_layer(fmt), (NT,), (min(heads * head_words, 128),), args)
    if direction == D2H:
        return ref.compare(as_kv(np.asarray(lmc)), ref.gather(logical, slots, as_kv(before)))
    return ref.compare(np.asarray(stored), ref.to_physical(ref.scatter(logical, slots, as_kv(before)), fmt))


# --- several chunks in one launch, their pointers in a by-value pack (FusedTransferPack<long>) ---

CHUNK = np.dtype([("key_value", "<u8"), ("slot_mapping", "<u8"), ("n_tok", "<i4"), ("pad", "<i4")])
MAX_CHUNKS = 16  # MAX_FUSED_TRANSFER_CHUNKS


def fused_case(run, fmt, d2h):
    row, kv, n_toks = row_elements(fmt), 1 if fmt == ref.MLA else 2, (NT, 25, 7)
    pool = rng.permutation(NB * BS)  # disjoint slots per chunk: writes back do not overlap
    slots = [slot_mapping(n, pool[sum(n_toks[:i]):]) for i, n in enumerate(n_toks)]
    logical = [logical_layer(fmt) for _ in range(NL)]
    stored = [run.device.array(ref.to_physical(x, fmt)) for x in logical]
    chunks = [run.device.array(rng.integers(0, 1 << 16, size=(kv, NL, NT, row), dtype=np.uint16)) for _ in n_toks]
    before = [np.array(c) for c in chunks]
    pack = np.zeros(MAX_CHUNKS, CHUNK)
    for i, (chunk, s, n) in enumerate(zip(chunks, slots, n_toks)):
        pack[i] = (run.device.address(chunk), run.device.address(run.device.array(s)), n, 0)
    args = [pack.tobytes(), run.device.pointer_table(stored), np.int32(kv), np.int32(row // 4), np.int32(NT),
            np.int32(NL), np.int32(NB * BS), np.int32(BS), np.int32(HS // 4), np.int64(0)]
    run.launch(fused(d2h, fmt), (max(n_toks), NL, kv * len(n_toks)), (min(row // 4, 128),), args)
    if d2h:
        want = []
        for b, s, n in zip(before, slots, n_toks):
            padded = np.concatenate([s, -np.ones(NT - n, np.int64)])  # tokens past n_tok: untouched
            want.append(np.stack([ref.gather(logical[i], padded, b[:, i]) for i in range(NL)], axis=1))
        return ref.compare(np.stack(chunks), np.stack(want))
    want = []
    for i in range(NL):
        layer = logical[i]
        for b, s in zip(before, slots):
            layer = ref.scatter(layer, s, b[:, i, :len(s)])
        want.append(ref.to_physical(layer, fmt))
    return ref.compare(np.stack(stored), np.stack(want))


# --- the multi-process transfer: whole paged blocks <-> LMCache chunk objects [kv, layer, chunk token, row] ---

SHAPE_DESC = np.dtype([(f, "<i4") for f in ("kv_size", "nl", "nb", "bs", "nh", "hs", "element_size",
                                             "block_stride_elems")])  # PageBufferShapeDesc
MEMORY_OBJ4 = np.dtype([("objects", "<u8", (4,)), ("num_objects", "<i4"), ("pad", "<i4")])  # MemoryObj4<T>
UNIT_BYTES = {"uint4": 16, "unsigned int": 4, "unsigned short": 2}  # the wrapper's pick by head bytes


def block_transfer_case(run, fmt, to_engine, unit="uint4", skip=0, heads=NH, head=HS, objects=3, per_object=2):
    """Objects of per_object blocks each (chunk = per_object * BS tokens); engine block ids distinct; the first
    `skip` blocks are not moved. The reference is the slot one: block e's token t is slot e * BS + t."""
    kv, nh, hs = (1, 1, MLA_HS) if fmt == ref.MLA else (2, heads, head)
    chunk, row = per_object * BS, nh * hs
    block_ids = rng.permutation(NB)[:objects * per_object].astype(np.int64)
    logical = [logical_layer(fmt, heads, head) for _ in range(NL)]
    stored = [run.device.array(ref.to_physical(x, fmt)) for x in logical]
    objs = [run.device.array(rng.integers(0, 1 << 16, size=(kv, NL, chunk, row), dtype=np.uint16))
            for _ in range(objects)]
    before = [np.array(o) for o in objs]
    slots = [np.array([block_ids[o * per_object + t // BS] * BS + t % BS if o * per_object + t // BS >= skip else -1
                       for t in range(chunk)], np.int64) for o in range(objects)]
    pack = np.zeros(1, MEMORY_OBJ4)
    pack["objects"][0, :objects] = [run.device.address(o) for o in objs]
    pack["num_objects"] = objects
    desc = np.array([(kv, NL, NB, BS, nh, hs, 2, 0)], SHAPE_DESC)
    args = [pack.tobytes(), run.device.pointer_table(stored), run.device.array(block_ids), np.int32(per_object),
            desc.tobytes(), np.int32(chunk), np.int32(skip)]
    units = hs * 2 // UNIT_BYTES[unit]
    x = min(units, 32)
    block = (x, nh, min(BS, 1024 // (x * nh), 64))
    run.launch(block_transfer(unit, to_engine, fmt), (kv, objects * per_object, NL), block, args)
    if not to_engine:
        want = [np.stack([ref.gather(logical[i], s, b[:, i]) for i in range(NL)], axis=1)
                for s, b in zip(slots, before)]
        return ref.compare(np.stack(objs), np.stack(want))
    want = []
    for i in range(NL):
        layer = logical[i]
        for s, b in zip(slots, before):
            layer = ref.scatter(layer, s, b[:, i])
        want.append(ref.to_physical(layer, fmt))
    return ref.compare(np.stack(stored), np.stack(want))


# --- RoPE: keys rotated from their stored positions to new ones (float keys, float cos/sin cache) ---

ROPE_TOKENS, KV_HEADS, ROPE_HEAD, MAX_POS = 24, 4, 128, 4096


def rope_inputs(rot_dim, head_stride):
    key = rng.standard_normal((ROPE_TOKENS, KV_HEADS, head_stride), dtype=np.float32)
    return key, ref.rope_cache(MAX_POS, rot_dim)


def rope_case(run, neox, rot_dim, head_stride, element="float", host=False, reference_rounding=None):
    """Keys and cos/sin cache of one element type (LMCache dispatches both to the key's type); the reference rounds
    each operation to that type unless told otherwise."""
    to_storage, to_values = ref.ELEMENTS[element][1:]
    key, cache = rope_inputs(rot_dim, head_stride)
    key, cache = to_storage(key), to_storage(cache)
    old = rng.integers(0, MAX_POS, ROPE_TOKENS).astype(np.int64)
    new = rng.integers(0, MAX_POS, ROPE_TOKENS).astype(np.int64)
    got = run.device.array(key)
    args = [run.device.array(old), run.device.array(new), got, run.device.array(cache), np.int32(rot_dim),
            np.int64(KV_HEADS * head_stride), np.int32(KV_HEADS), np.int32(ROPE_HEAD), np.int64(head_stride)]
    run.launch(rope(neox, element=element), (ROPE_TOKENS,), (min(KV_HEADS * rot_dim // 2, 512),), args, host=host)
    rounding = ref.rounded_to(reference_rounding or element)
    want = ref.rerope(to_values(key), old, new, to_values(cache), rot_dim, neox, rounding)
    return ref.compare(np.asarray(got), to_storage(want))


ROPE_CHUNK = np.dtype([("key", "<u8"), ("old_st", "<i8"), ("new_st", "<i8")])


def rope_ramp_case(run, neox, rot_dim, ramp=16):
    """The fused variant: chunks in a by-value pack, positions start + token % ramp."""
    starts = [(100, 2000), (0, 7), (3000, 50)]
    cache = ref.rope_cache(MAX_POS, rot_dim)
    keys = [rng.standard_normal((ROPE_TOKENS, KV_HEADS, ROPE_HEAD), dtype=np.float32) for _ in starts]
    got = [run.device.array(k) for k in keys]
    pack = np.zeros(MAX_CHUNKS, ROPE_CHUNK)
    for i, (g, (old, new)) in enumerate(zip(got, starts)):
        pack[i] = (run.device.address(g), old, new)
    args = [pack.tobytes(), np.int64(ramp), run.device.array(cache), np.int32(rot_dim),
            np.int64(KV_HEADS * ROPE_HEAD), np.int32(KV_HEADS), np.int32(ROPE_HEAD), np.int64(ROPE_HEAD)]
    run.launch(rope(neox, ramp=True), (ROPE_TOKENS, len(starts)), (min(KV_HEADS * rot_dim // 2, 512),), args)
    ramp_pos = np.arange(ROPE_TOKENS) % ramp
    want = [ref.rerope(k, old + ramp_pos, new + ramp_pos, cache, rot_dim, neox) for k, (old, new) in zip(keys, starts)]
    return ref.compare(np.stack([np.asarray(g) for g in got]), np.stack(want))


def rope_formula_case(run, neox):
    """Against the rotation itself (float64, no rounding): by new - old, within float32's error."""
    key, cache = rope_inputs(ROPE_HEAD, ROPE_HEAD)
    old = rng.integers(0, MAX_POS, ROPE_TOKENS).astype(np.int64)
    new = rng.integers(0, MAX_POS, ROPE_TOKENS).astype(np.int64)
    got = run.device.array(key)
    args = [run.device.array(old), run.device.array(new), got, run.device.array(cache), np.int32(ROPE_HEAD),
            np.int64(KV_HEADS * ROPE_HEAD), np.int32(KV_HEADS), np.int32(ROPE_HEAD), np.int64(ROPE_HEAD)]
    run.launch(rope(neox), (ROPE_TOKENS,), (min(KV_HEADS * ROPE_HEAD // 2, 512),), args)
    half = ROPE_HEAD // 2
    freqs = 10000.0 ** (-np.arange(0, ROPE_HEAD, 2) / ROPE_HEAD)
    x_idx = np.arange(half) if neox else 2 * np.arange(half)
    y_idx = x_idx + half if neox else x_idx + 1
    k = key.astype(np.float64)
    angle = ((new - old)[:, None] * freqs)[:, None, :]
    want = k.copy()
    want[..., x_idx] = k[..., x_idx] * np.cos(angle) - k[..., y_idx] * np.sin(angle)
    want[..., y_idx] = k[..., y_idx] * np.cos(angle) + k[..., x_idx] * np.sin(angle)
    error = float(np.abs(np.asarray(got) - want).max())
    return {"elements": int(key.size), "mismatches": int(error > 1e-3), "max_abs_error": error}


# --- what a wrong kernel or a wrong reference looks like: both must be reported ---

def wrong_layout_case(run):
    """The HND kernel fed an NHD cache: the comparison with the NHD reference must fail."""
    return multi_layer_case(run, 1, True, kernel_fmt=6)


def changed_reference_case(run):
    """A passing transfer compared with its reference changed in one element: exactly one mismatch."""
    got, want, _, _ = run_multi_layer(run, 1, True)
    want = want.copy()
    want[1, 2, 5, 7] ^= 1
    return ref.compare(np.asarray(got), want)


NAMES = {1: "NHD", 2: "NHD flash-infer", 6: "HND", 7: "HND flash-infer", 3: "MLA"}
TRANSFER_FORMATS = (1, 2, 6, 7, 3)


def cases():
    """(case, kernel, source, expect, function)"""
    out = []
    for fmt in TRANSFER_FORMATS:
        for d2h in (True, False):
            way = "D2H" if d2h else "H2D"
            out.append((f"multi-layer {NAMES[fmt]} {way}, {NL} layers, holes", multi_layer("long", d2h, fmt), MEM,
                        "match", lambda r, f=fmt, d=d2h: multi_layer_case(r, f, d)))
            out.append((f"fused 3 chunks {NAMES[fmt]} {way}", fused(d2h, fmt), MEM, "match",
                        lambda r, f=fmt, d=d2h: fused_case(r, f, d)))
            for token_major in (True, False):
                if fmt == ref.MLA and not token_major:
                    continue
                order = "token-major" if token_major else "kv-major"
                out.append((f"single-layer {NAMES[fmt]} {way} {order}, holes", single_layer(fmt), MEM, "match",
                            lambda r, f=fmt, d=d2h, t=token_major: single_layer_case(r, f, D2H if d else H2D, t)))
            out.append((f"multi-process block transfer {NAMES[fmt]} {way}, 16-byte units, 3 objects",
                        block_transfer("uint4", not d2h, fmt), MP, "match",
                        lambda r, f=fmt, d=d2h: block_transfer_case(r, f, not d)))
        out.append((f"round trip {NAMES[fmt]} D2H then H2D", multi_layer("long", True, fmt), MEM, "match",
                    lambda r, f=fmt: round_trip_case(r, f)))
    out += [
        ("multi-layer NHD D2H, 1 layer", multi_layer("long", True, 1), MEM, "match",
         lambda r: multi_layer_case(r, 1, True, layers=1)),
        ("multi-layer HND H2D, skip 8 prefix tokens", multi_layer("long", False, 6), MEM, "match",
         lambda r: multi_layer_case(r, 6, False, skip=8)),
        ("multi-layer NHD D2H, 4-byte words (row of 6 bf16)", multi_layer("int", True, 1), MEM, "match",
         lambda r: multi_layer_case(r, 1, True, word="int", heads=1, head=6)),
        ("multi-layer HND H2D, 4-byte words (row of 6 bf16)", multi_layer("int", False, 6), MEM, "match",
         lambda r: multi_layer_case(r, 6, False, word="int", heads=1, head=6)),
    ]
    out += [
        ("multi-process block transfer HND H2D, skip 3 prefix blocks", block_transfer("uint4", True, 6), MP, "match",
         lambda r: block_transfer_case(r, 6, True, skip=3)),
        ("multi-process block transfer NHD D2H, 4-byte units (head of 6 bf16)",
         block_transfer("unsigned int", False, 1), MP, "match",
         lambda r: block_transfer_case(r, 1, False, unit="unsigned int", heads=2, head=6)),
        ("multi-process block transfer HND H2D, 2-byte units (head of 5 bf16)",
         block_transfer("unsigned short", True, 6), MP, "match",
         lambda r: block_transfer_case(r, 6, True, unit="unsigned short", heads=2, head=5)),
    ]
    for neox in (True, False):
        style = "NeoX" if neox else "GPT-J"
        out += [
            (f"RoPE {style} full rotary dim", rope(neox), POS, "match", lambda r, n=neox: rope_case(r, n, 128, 128)),
            (f"RoPE {style} partial rotary dim 64, K of packed K/V (head stride 256)", rope(neox), POS, "match",
             lambda r, n=neox: rope_case(r, n, 64, 256)),
            (f"RoPE {style} fused ramp, 3 chunks", rope(neox, ramp=True), POS, "match",
             lambda r, n=neox: rope_ramp_case(r, n, 128)),
            (f"RoPE {style} against the rotation by new-old (float64)", rope(neox), POS, "match",
             lambda r, n=neox: rope_formula_case(r, n)),
        ]
    for element in ("fp16", "bf16"):  # the host route: c10's types do not compile to SPIR-V (host_shim.h)
        for neox in (True, False):
            style = "NeoX" if neox else "GPT-J"
            out.append((f"RoPE {style} {element} (host CPU route)", rope(neox, element=element), HOST + POS, "match",
                        lambda r, n=neox, e=element: rope_case(r, n, 128, 128, e, host=True)))
    out.append(("RoPE NeoX float, partial rotary dim 64 (host CPU route, as the SPIR-V one)", rope(True), HOST + POS,
                "match", lambda r: rope_case(r, True, 64, 256, host=True)))
    out += [
        ("NEGATIVE: HND kernel fed an NHD cache", multi_layer("long", True, 6), MEM, "mismatch", wrong_layout_case),
        ("NEGATIVE: reference changed in one element", multi_layer("long", True, 1), MEM, "mismatch",
         changed_reference_case),
        ("NEGATIVE: fp16 RoPE against a reference rounding in float32 until the end (host CPU route)",
         rope(True, element="fp16"), HOST + POS, "mismatch",
         lambda r: rope_case(r, True, 128, 128, "fp16", host=True, reference_rounding="float")),
    ]
    return out


def main() -> int:
    lmcache_hip = sys.argv[1]
    todo = cases()
    wanted: dict = {}
    for _, kernel, source, _, _ in todo:
        wanted.setdefault(source, [])
        if kernel not in wanted[source]:
            wanted[source].append(kernel)
    runner = Runner(lmcache_hip, wanted)
    with open(os.path.join(lmcache_hip, "hipified.json")) as f:
        lmcache = json.load(f)["lmcache"]
    print(json.dumps({"route": f"clang-{LLVM_MAJOR} HIP -> SPIR-V 1.2 -> PoCL", "device": runner.device.describe(),
                      "lmcache": lmcache}), flush=True)
    failed = 0
    for name, kernel, source, expect, function in todo:
        route = "host CPU, work-item by work-item" if source.startswith(HOST) else "SPIR-V on PoCL"
        result = {"case": name, "kernel": kernel, "source": source.replace(HOST, ""), "route": route,
                  "expect": expect, **function(runner)}
        result["ok"] = (result["mismatches"] == 0) == (expect == "match")
        failed += not result["ok"]
        print(json.dumps(result), flush=True)
    print(json.dumps({"cases": len(todo), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
