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
