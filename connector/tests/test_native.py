"""The compiled copy loop of stackctl's CPU connector (connector/stackctl_lmcache_cpu/kvcopy.c, driven through
native.py), built here with gcc and run on numpy arrays: bit-exact stores and loads for every block layout vLLM-CPU
0.32 writes (vec/vec16, amx; bf16 and fp32) and for a layout none of its SIMD moves fits, at every SIMD level this
CPU runs, for whole blocks, blocks out of order, partly covered blocks and odd token boundaries. The references are
numpy gathers over the full offset table, so a copy that moves any element wrong fails. The layouts here are the
ones the image's selftest learns from vLLM's kernel (tests/integration/test_cpu_connector.py runs that one against
the real kernel)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # connector/, the package's folder
from stackctl_lmcache_cpu import native  # noqa: E402
from stackctl_lmcache_cpu.digits import (  # noqa: E402
    DEINTERLEAVE,
    ROWS,
    SCALAR,
    TRANSPOSE,
    NativeSide,
    aligned_run,
    native_side,
)

LAYERS = 3
UINT = {2: np.uint16, 4: np.uint32}


def vec_offsets(block_size: int, heads: int, head_size: int) -> np.ndarray:
    """[kv, token, head, dim] -> offset in a block: vec/vec16 keep K transposed per head ([dim][token]), V as rows."""
    t, h, d = np.ix_(range(block_size), range(heads), range(head_size))
    head = h * 2 * block_size * head_size
    return np.stack([head + d * block_size + t, head + block_size * head_size + t * head_size + d])


def amx_offsets(block_size: int, heads: int, head_size: int) -> np.ndarray:
    """amx: K in 16-token tiles of dim pairs ([t // 16][d // 2][t % 16][d % 2]), V in 16-dim tiles of token pairs
    ([d // 16][t // 2][d % 16][t % 2])."""
    t, h, d = np.ix_(range(block_size), range(heads), range(head_size))
    head = h * 2 * block_size * head_size
    key = head + (t // 16) * 16 * head_size + (d // 2) * 32 + (t % 16) * 2 + d % 2
    value = head + block_size * head_size + (d // 16) * block_size * 16 + (t // 2) * 32 + (d % 16) * 2 + t % 2
    return np.stack([key, value])


def scrambled_offsets(block_size: int, heads: int, head_size: int) -> np.ndarray:
    """A separable layout no SIMD move fits (tokens and dims in shuffled order): element by element."""
    rng = np.random.default_rng(7)
    t, h, d = np.ix_(rng.permutation(block_size), range(heads), rng.permutation(head_size))
    head = h * 2 * block_size * head_size
    return np.stack([head + t * head_size + d, head + block_size * head_size + d * block_size + t])


LAYOUTS = {  # name -> (offsets, itemsize, block_size, heads, head_size, the moves native_side must pick)
    "vec bf16": (vec_offsets, 2, 128, 2, 64, (TRANSPOSE, ROWS)),
    "vec bf16 head 128": (vec_offsets, 2, 32, 4, 128, (TRANSPOSE, ROWS)),
    "vec fp32 head 80": (vec_offsets, 4, 64, 1, 80, (TRANSPOSE, ROWS)),
    # head sizes whose dims do not fill the last tile (8 two-byte or 4 four-byte words): those go element by element
    "vec bf16 head 36": (vec_offsets, 2, 16, 3, 36, (TRANSPOSE, ROWS)),
    "vec fp32 head 10": (vec_offsets, 4, 16, 2, 10, (TRANSPOSE, ROWS)),
    "amx bf16": (amx_offsets, 2, 128, 2, 64, (TRANSPOSE, DEINTERLEAVE)),
    "amx bf16 head 128": (amx_offsets, 2, 32, 4, 128, (TRANSPOSE, DEINTERLEAVE)),
    "scrambled bf16": (scrambled_offsets, 2, 32, 2, 24, (SCALAR, SCALAR)),
    "scrambled fp32": (scrambled_offsets, 4, 16, 2, 12, (SCALAR, SCALAR)),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> native.Library:
    target = native.build(tmp_path_factory.mktemp("kvcopy") / "_kvcopy.so")
    loaded = native.load(target)
    assert not isinstance(loaded, str), loaded
    return loaded


def levels(library: native.Library) -> list[int]:
    return list(range(library.level + 1))


def tables_of(offsets: np.ndarray, itemsize: int) -> native.Tables:
    """kvcopy.c's tables from a [kv, token, head, dim] offset array (as transfer.native_tables makes them)."""
    tok, head, dim, sides = [], [], [], []
    for kv in (0, 1):
        base = int(offsets[kv, 0, 0, 0])
        tok.append(offsets[kv, :, 0, 0].tolist())
        head.append((offsets[kv, 0, :, 0] - base).tolist())
        dim.append((offsets[kv, 0, 0, :] - base).tolist())
        rebuilt = (np.array(tok[-1])[:, None, None] + np.array(head[-1])[None, :, None]
                   + np.array(dim[-1])[None, None, :])
        assert np.array_equal(rebuilt, offsets[kv])
        sides.append(native_side(tok[-1], dim[-1], itemsize))
    _, block_size, heads, head_size = offsets.shape
    return native.Tables(itemsize, block_size, heads, head_size, (sides[0], sides[1]), (tok[0], tok[1]),
                         (head[0], head[1]), (dim[0], dim[1]))


class Cache:
    """LAYERS caches of `num_blocks` blocks (block stride padded by 16 elements, as a cache may be) with a layout."""

    def __init__(self, library, offsets: np.ndarray, itemsize: int, num_blocks: int, fill: bool):
        self.offsets, self.dtype = offsets, UINT[itemsize]
        _, self.block_size, heads, head_size = offsets.shape
        self.block_elems = 2 * self.block_size * heads * head_size
        self.block_stride = self.block_elems + 16
        rng = np.random.default_rng(1)
        shape = (LAYERS, num_blocks * self.block_stride)
        high = np.iinfo(self.dtype).max
        self.data = (rng.integers(0, high, shape, dtype=np.uint64).astype(self.dtype) if fill
                     else np.zeros(shape, self.dtype))
        layers = [self.data[layer].ctypes.data for layer in range(LAYERS)]
        self.prepared = library.prepare(tables_of(offsets, itemsize), layers, self.block_stride)

    def positions(self, slots: np.ndarray) -> np.ndarray:
        """[kv, token, head * dim]: where each element of each slot's token lies in a layer."""
        blocks, within = slots // self.block_size, slots % self.block_size
        rows = self.offsets[:, within].reshape(2, len(slots), -1)
        return rows + (blocks * self.block_stride)[None, :, None]

    def move(self, to_chunk: bool, chunk: np.ndarray, slots: np.ndarray, level: int) -> int:
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        strides = tuple(stride // chunk.itemsize for stride in chunk.strides[:3])
        return self.prepared.move(to_chunk, slots.ctypes.data, len(slots), chunk.ctypes.data, strides, level)


def slot_cases(block_size: int) -> dict[str, list[int]]:
    b = block_size

    def run(first: int, count: int) -> list[int]:
        return list(range(first, first + count))

    return {
        "whole blocks": run(2 * b, 2 * b),
        "blocks out of order": run(5 * b, b) + run(b, b) + run(3 * b, b),
        "partial blocks": run(4 * b + 5, 2 * b - 9),
        "odd token boundaries": run(3 * b + 3, b + 7) + run(7 * b + b // 2 + 1, b // 4 - 1) + [b + 1],
        "single tokens": [6 * b + 9, 2 * b, 2 * b + 1, 5 * b - 1],
    }


def check_round_trip(library, name: str, slots: list[int], level: int) -> None:
    make, itemsize, block_size, heads, head_size, _ = LAYOUTS[name]
    offsets = make(block_size, heads, head_size)
    slots_array = np.array(slots, dtype=np.int64)
    source = Cache(library, offsets, itemsize, 8, fill=True)
    chunk = np.zeros((2, LAYERS, len(slots), heads * head_size), source.dtype)
    used = source.move(True, chunk, slots_array, level)
    assert used == level
    where = source.positions(slots_array)
    expected = np.stack([source.data[:, where[kv]] for kv in (0, 1)])
    assert np.array_equal(chunk, expected), f"{name}: store differs at level {level}"

    target = Cache(library, offsets, itemsize, 8, fill=False)
    assert target.move(False, chunk, slots_array, level) == level
    written = np.zeros(target.data.shape[1], bool)
    written[where.reshape(-1)] = True
    assert np.array_equal(target.data[:, written], source.data[:, written]), f"{name}: load differs at level {level}"
    assert not target.data[:, ~written].any(), f"{name}: load wrote outside the slots' elements at level {level}"


@pytest.mark.parametrize("name", LAYOUTS)
def test_native_side_picks_the_move_each_layout_needs(name):
    make, itemsize, block_size, heads, head_size, kinds = LAYOUTS[name]
    tables = tables_of(make(block_size, heads, head_size), itemsize)
    assert tuple(side.kind for side in tables.sides) == kinds


@pytest.mark.parametrize("name", LAYOUTS)
def test_store_and_load_are_bit_exact_for_every_layout_case_and_level(library, name):
    for slots in slot_cases(LAYOUTS[name][2]).values():
        for level in levels(library):
            check_round_trip(library, name, slots, level)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(LAYOUTS)), data=st.data())
def test_any_slot_mapping_round_trips(library, name, data):
    block_size = LAYOUTS[name][2]
    slots = data.draw(st.lists(st.integers(0, 8 * block_size - 1), min_size=1, max_size=3 * block_size,
                               unique=True))
    # Runs of consecutive slots are what the tiles take: grow a few of them.
    starts = data.draw(st.lists(st.integers(0, 7), max_size=3, unique=True))
    slots = [slot for slot in slots if slot // block_size not in starts]
    slots += [start * block_size + t for start in starts for t in range(block_size)]
    check_round_trip(library, name, slots, data.draw(st.sampled_from(levels(library))))


def test_a_wrong_layout_is_caught(library):
    """The comparison can fail: tables that swap K and V move every element to the wrong place."""
    offsets = vec_offsets(128, 2, 64)
    source = Cache(library, offsets, 2, 4, fill=True)
    swapped = Cache(library, offsets[::-1].copy(), 2, 4, fill=False)
    swapped.data[:] = source.data
    slots = np.arange(128, 384, dtype=np.int64)
    chunk = np.zeros((2, LAYERS, len(slots), 128), np.uint16)
    swapped.move(True, chunk, slots, library.level)
    where = source.positions(slots)
    assert not np.array_equal(chunk, np.stack([source.data[:, where[kv]] for kv in (0, 1)]))


def test_the_library_refuses_an_element_size_it_has_no_move_for(library):
    make, _, block_size, heads, head_size, _ = LAYOUTS["vec bf16"]
    tables = tables_of(make(block_size, heads, head_size), 8)
    prepared = library.prepare(tables, [0] * LAYERS, 0)
    with pytest.raises(ValueError, match="element size 8"):
        prepared.move(True, 0, 0, 0, (0, 0, 0))


def test_a_missing_or_stale_library_is_a_reason_not_a_crash(tmp_path, library):
    assert "was not built" in str(native.load(tmp_path / "absent.so"))
    stale = tmp_path / "stale.so"
    source = tmp_path / "stale.c"
    source.write_text(native.SOURCE.read_text().replace("return 2; }", "return 1; }"))
    native.build(stale, source)
    assert "ABI 1" in str(native.load(stale))


def test_vllm_cpu_axes_get_their_moves():
    vec_k_tok, vec_k_dim = list(range(128)), [d * 128 for d in range(64)]
    assert native_side(vec_k_tok, vec_k_dim, 2) == NativeSide(TRANSPOSE, 2, 128)
    assert native_side([t * 64 for t in range(128)], list(range(64)), 2) == NativeSide(ROWS)
    amx_k_tok = [(t // 16) * 1024 + (t % 16) * 2 for t in range(128)]
    amx_k_dim = [(d // 2) * 32 + d % 2 for d in range(64)]
    assert native_side(amx_k_tok, amx_k_dim, 2) == NativeSide(TRANSPOSE, 4, 16)
    amx_v_tok = [(t // 2) * 32 + t % 2 for t in range(128)]
    amx_v_dim = [(d // 16) * 2048 + (d % 16) * 2 for d in range(64)]
    assert native_side(amx_v_tok, amx_v_dim, 2) == NativeSide(DEINTERLEAVE, 0, 16)
    assert native_side(vec_k_tok, vec_k_dim, 4) == NativeSide(TRANSPOSE, 4, 128)  # fp32: 4-byte words


def test_aligned_run_is_the_longest_power_of_two_run():
    assert aligned_run(list(range(128)), 1, 8) == 128
    assert aligned_run([(t // 16) * 1024 + t % 16 for t in range(128)], 1, 4) == 16
    assert aligned_run([0, 1, 2, 3, 9, 10, 11, 12], 1, 4) == 4
    assert aligned_run([0, 2, 3, 4], 1, 2) == 0
    assert aligned_run(list(range(12)), 1, 8) == 0  # 8 does not divide 12
