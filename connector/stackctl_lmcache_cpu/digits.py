"""The arithmetic of a learned block layout, in plain Python (no torch, so it is unit-tested on its own): offsets as
mixed-radix strided digits, the word width a copy may use, and how a run of slots splits at block boundaries."""

from __future__ import annotations

from dataclasses import dataclass

# (size, stride) of one digit of a mixed-radix axis; digits are listed outermost first.
Digit = tuple[int, int]


@dataclass(frozen=True)
class StridedPlan:
    """The offsets of K or V inside a block as strided digits: offset = base + sum(digit * stride), each digit given
    as (size, stride) in elements, outermost first: the token digits, then the head digits, then the dim digits.
    `width` is how many elements may move as one 4- or 8-byte word (the innermost dim digit is contiguous in the
    cache and holds whole words; every other stride and the base fall on word boundaries)."""

    base: int
    digits: tuple[Digit, ...]
    width: int

    def in_words(self, width: int) -> tuple[int, tuple[Digit, ...]]:
        """Base and digits counted in words of `width` elements (1: elements; else a divisor of `self.width`)."""
        if width == 1:
            return self.base, self.digits
        *outer, (innermost, _) = self.digits
        return (self.base // width,
                tuple((size, stride // width) for size, stride in outer) + ((innermost // width, 1),))


@dataclass(frozen=True)
class Piece:
    """Rows [row, row + tokens) of a chunk, whose slots start at `slot` and run consecutively. `whole` pieces cover
    whole blocks (slot and tokens are multiples of the block size); the others lie inside one block."""

    row: int
    slot: int
    tokens: int
    whole: bool


def mixed_radix(values: list[int]) -> list[Digit] | None:
    """Digits (size, stride), outermost first, with values[i] == sum(digit_k(i) * stride_k), or None."""
    digits: list[Digit] = []
    n = len(values)
    sample = values
    while n > 1:
        stride = sample[1] - sample[0]
        run = 2
        while run < n and sample[run] - sample[0] == run * stride:
            run += 1
        while n % run:
            run -= 1
        if run == 1:
            return None
        digits.insert(0, (run, stride))
        sample = sample[::run]
        n //= run
    rebuilt = [0]
    for size, stride in reversed(digits):  # innermost first
        rebuilt = _extend(rebuilt, size, stride)
    return digits if rebuilt == list(values) else None


def _extend(values: list[int], size: int, stride: int) -> list[int]:
    """The values of a radix axis extended by one outer digit (size, stride)."""
    return [i * stride + value for i in range(size) for value in values]


def word_width(base: int, outer: tuple[Digit, ...], dim_digits: tuple[Digit, ...], itemsize: int) -> int:
    """How many elements can move as one 8- or 4-byte word: the innermost dim digit must be contiguous in the cache
    (stride 1) and hold whole words, and every other stride and the base must fall on word boundaries."""
    if not dim_digits or dim_digits[-1][1] != 1:
        return 1
    innermost = dim_digits[-1][0]
    for word_bytes in (8, 4):
        width = word_bytes // itemsize
        if width < 2 or innermost % width:
            continue
        strides = [stride for _, stride in outer + dim_digits[:-1]]
        if base % width == 0 and all(stride % width == 0 for stride in strides):
            return width
    return 1


def cut_run(row: int, tokens: int, slot: int, block_size: int) -> list[Piece]:
    """One run of consecutive slots: a head inside its first block, whole blocks, a tail inside its last block."""
    cut: list[Piece] = []
    head = min(tokens, -slot % block_size)
    if head:
        cut.append(Piece(row, slot, head, False))
    whole = (tokens - head) // block_size * block_size
    if whole:
        cut.append(Piece(row + head, slot + head, whole, True))
    tail = tokens - head - whole
    if tail:
        cut.append(Piece(row + head + whole, slot + head + whole, tail, False))
    return cut


# How the compiled copy (kvcopy.c) moves one of K or V; the numbers are kvcopy.c's.
SCALAR, ROWS, TRANSPOSE, DEINTERLEAVE = 0, 1, 2, 3


@dataclass(frozen=True)
class NativeSide:
    """The compiled copy's plan for K or V, from the offsets of their tokens and dims inside a block (the layout is
    separable: offset = tok[t] + head[h] + dim[d]). `word_bytes`: TRANSPOSE's word; `run`: TRANSPOSE's tokens, or
    DEINTERLEAVE's dims, lie in aligned runs of this many (wider SIMD tiles need longer runs)."""

    kind: int
    word_bytes: int = 0
    run: int = 0

    def describe(self) -> str:
        if self.kind == ROWS:
            return "rows"
        if self.kind == TRANSPOSE:
            return f"transposed in {self.word_bytes}-byte words"
        if self.kind == DEINTERLEAVE:
            return "token pairs interleaved"
        return "element by element"


def native_side(tok: list[int], dim: list[int], itemsize: int) -> NativeSide:
    """Which move of kvcopy.c fits K or V with these token and dim offsets (elements of `itemsize` bytes):
    - ROWS: the dims are contiguous (vec/vec16 V);
    - TRANSPOSE: the tokens are contiguous in words of 4 or 2 bytes (tok steps by one word in aligned runs of at least
      16 / word_bytes tokens), and each word holds consecutive dims (vec/vec16 K: 2-byte words; amx K: dim pairs,
      4-byte words; fp32 vec K: 4-byte words);
    - DEINTERLEAVE (2-byte elements): tokens in pairs one element apart, dims two apart in aligned runs of at least 8
      (amx V);
    - SCALAR: anything else."""
    if all(offset == dim[0] + index for index, offset in enumerate(dim)):
        return NativeSide(ROWS)
    for word_bytes in (4, 2):  # wider words first: fewer, larger moves
        if word_bytes < itemsize or word_bytes % itemsize:
            continue
        per_word = word_bytes // itemsize
        if len(dim) % per_word or any(dim[first + e] != dim[first] + e
                                      for first in range(0, len(dim), per_word) for e in range(per_word)):
            continue
        run = aligned_run(tok, per_word, 16 // word_bytes)
        if run:
            return NativeSide(TRANSPOSE, word_bytes, run)
    if itemsize == 2 and len(tok) % 2 == 0 and all(tok[t + 1] == tok[t] + 1 for t in range(0, len(tok), 2)):
        run = aligned_run(dim, 2, 8)
        if run:
            return NativeSide(DEINTERLEAVE, 0, run)
    return NativeSide(SCALAR)


def aligned_run(values: list[int], step: int, least: int) -> int:
    """The longest r among least, 2 * least, 4 * least, ... that divides len(values) and such that each aligned group
    of r values goes up by `step` from one to the next; 0 when `least` already fails."""
    run, size = 0, least
    while size <= len(values) and len(values) % size == 0:
        if any(values[first + j] != values[first] + j * step
               for first in range(0, len(values), size) for j in range(size)):
            break
        run, size = size, size * 2
    return run
