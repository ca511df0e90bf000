"""Copies between vLLM-CPU's paged KV cache and LMCache's token-major `KV_2LTD` tensors, `[2, layers, tokens,
kv_heads * head_size]`, with a learned block layout (layout.py).

The slots of a chunk are cut into pieces (a few per chunk, never one per token): runs of whole, consecutive blocks
move with one strided `copy_` per layer and K/V (the layout's StridedPlan), and the tokens of a partly covered block
move with `index_select` / `index_copy_` over the learned offsets. Nothing is computed per token in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layout import BlockLayout, LayoutError, StridedPlan

WORDS = {4: torch.int32, 8: torch.int64}  # word size in bytes -> the dtype a copy moves them as


@dataclass(frozen=True)
class Piece:
    """Rows [row, row + tokens) of a chunk, whose slots start at `slot` and run consecutively. `whole` pieces cover
    whole blocks (slot and tokens are multiples of the block size); the others lie inside one block."""

    row: int
    slot: int
    tokens: int
    whole: bool


def pieces(slots: torch.Tensor, block_size: int) -> list[Piece]:
    """Cut a chunk's slot mapping into runs of whole blocks and partly covered blocks."""
    count = int(slots.numel())
    if count == 0:
        return []
    breaks = (torch.nonzero(slots[1:] != slots[:-1] + 1).flatten() + 1).tolist()
    starts = slots[[0, *breaks]].tolist() if breaks else [int(slots[0])]
    result: list[Piece] = []
    for row, end, slot in zip([0, *breaks], [*breaks, count], starts):
        result.extend(_cut_run(row, end - row, slot, block_size))
    return result


def _cut_run(row: int, tokens: int, slot: int, block_size: int) -> list[Piece]:
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


class PagedKV:
    """vLLM-CPU's per-layer caches `[num_blocks, num_kv_heads, block_size, 2 * head_size]` with their learned
    layout, and the two directions of copy to and from `KV_2LTD` tensors."""

    def __init__(self, layers: list[torch.Tensor], layout: BlockLayout):
        self.layers, self.layout = layers, layout
        first = layers[0]
        self.num_blocks = first.shape[0]
        shape = (layout.num_heads, layout.block_size, 2 * layout.head_size)
        block_strides = (shape[1] * shape[2], shape[2], 1)
        for index, layer in enumerate(layers):
            if tuple(layer.shape[1:]) != shape or layer.dtype != layout.dtype or layer.shape[0] != self.num_blocks:
                raise LayoutError(f"layer {index}: KV cache {tuple(layer.shape)} {layer.dtype} differs from layer 0")
            if tuple(layer.stride()[1:]) != block_strides:
                raise LayoutError(f"layer {index}: KV cache blocks are not contiguous (strides {layer.stride()})")
        self.block_stride = first.stride(0)
        self.hidden = layout.num_heads * layout.head_size
        # Learned offsets as index rows: [kv, token in block, head * dim].
        self.offsets = layout.offsets.reshape(2, layout.block_size, self.hidden)
        # Whole blocks move as strided views when both K and V have a strided plan.
        self.strided = all(plan is not None for plan in layout.plans)

    @property
    def capacity(self) -> int:
        return self.num_blocks * self.layout.block_size

    # -- the two directions ------------------------------------------------------------------------------------

    def gather(self, out: torch.Tensor, slots: torch.Tensor) -> None:
        """Cache -> `out` ([2, layers, tokens, hidden], token-major), for the tokens at `slots`."""
        self._check(out, slots)
        for piece in pieces(slots, self.layout.block_size):
            if piece.whole and self.strided:
                for kv in (0, 1):
                    for layer_index, layer in enumerate(self.layers):
                        rows, blocks = self._block_views(layer, out, layer_index, kv, piece)
                        rows.copy_(blocks)
            else:
                index = self._piece_index(piece).view(-1)
                rows = slice(piece.row, piece.row + piece.tokens)
                for layer_index, layer in enumerate(self.layers):
                    values = self._flat(layer).index_select(0, index)
                    out[:, layer_index, rows, :].copy_(values.view(2, piece.tokens, self.hidden))

    def scatter(self, source: torch.Tensor, slots: torch.Tensor) -> None:
        """`source` ([2, layers, tokens, hidden]) -> cache, for the tokens at `slots`."""
        self._check(source, slots)
        for piece in pieces(slots, self.layout.block_size):
            if piece.whole and self.strided:
                for kv in (0, 1):
                    for layer_index, layer in enumerate(self.layers):
                        rows, blocks = self._block_views(layer, source, layer_index, kv, piece)
                        blocks.copy_(rows)
            else:
                index = self._piece_index(piece).view(-1)
                rows = slice(piece.row, piece.row + piece.tokens)
                for layer_index, layer in enumerate(self.layers):
                    self._flat(layer).index_copy_(0, index, source[:, layer_index, rows, :].reshape(-1))

    # -- pieces ------------------------------------------------------------------------------------------------

    def _check(self, chunk: torch.Tensor, slots: torch.Tensor) -> None:
        tokens = int(slots.numel())
        expected = (2, len(self.layers), tokens, self.hidden)
        if tuple(chunk.shape) != expected or chunk.dtype != self.layout.dtype:
            raise ValueError(f"KV_2LTD tensor {tuple(chunk.shape)} {chunk.dtype}, expected {expected} "
                             f"{self.layout.dtype}")
        if tokens and (chunk.stride(-1) != 1 or chunk.stride(-2) != self.hidden):
            raise ValueError("the KV_2LTD tensor's token rows must be contiguous")
        if tokens and (int(slots.min()) < 0 or int(slots.max()) >= self.capacity):
            raise ValueError(f"slot mapping outside the KV cache (0..{self.capacity - 1}): "
                             f"{int(slots.min())}..{int(slots.max())}")

    def _piece_index(self, piece: Piece) -> torch.Tensor:
        """Element offsets [2, tokens, hidden] of a piece's tokens in the layer's flat view."""
        slots = torch.arange(piece.slot, piece.slot + piece.tokens, dtype=torch.int64)
        blocks, within = slots // self.layout.block_size, slots % self.layout.block_size
        return self.offsets[:, within, :] + (blocks * self.block_stride)[None, :, None]

    def _flat(self, layer: torch.Tensor) -> torch.Tensor:
        """All elements of a layer's blocks as one 1-D view (blocks may be padded apart by the block stride)."""
        span = (self.num_blocks - 1) * self.block_stride + self.layout.block_elems
        return layer.as_strided((span,), (1,), layer.storage_offset())

    def _block_views(self, layer: torch.Tensor, chunk: torch.Tensor, layer_index: int, kv: int,
                     piece: Piece) -> tuple[torch.Tensor, torch.Tensor]:
        """(chunk rows, cache blocks) of a whole-block piece as views of the same shape: blocks, then the token,
        head and dim digits of the layout's plan, in the widest words both sides allow."""
        plan = self.layout.plans[kv]
        assert plan is not None  # whole pieces take this path only when both plans exist
        rows = chunk[kv, layer_index, piece.row:piece.row + piece.tokens]
        width = _common_width(plan, layer, rows, self.block_stride)
        base, digits = plan.in_words(width)
        sizes = [piece.tokens // self.layout.block_size] + [size for size, _ in digits]
        block_words = _words(layer, width)
        word_stride = self.block_stride // width
        first = block_words.storage_offset() + piece.slot // self.layout.block_size * word_stride + base
        blocks = block_words.as_strided(sizes, [word_stride] + [stride for _, stride in digits], first)
        return _words(rows, width).view(sizes), blocks


def _common_width(plan: StridedPlan, layer: torch.Tensor, rows: torch.Tensor, block_stride: int) -> int:
    """The widest word (in elements) the plan, the cache and the chunk rows all sit aligned on."""
    width = plan.width
    while width > 1:
        aligned = (layer.storage_offset() % width == 0 and block_stride % width == 0
                   and rows.storage_offset() % width == 0 and rows.shape[-1] % width == 0
                   and width * rows.element_size() in WORDS)
        if aligned:
            return width
        width //= 2
    return 1


def _words(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """A tensor seen in words of `width` elements (itself when the width is 1)."""
    if width == 1:
        return tensor
    return tensor.view(WORDS[width * tensor.element_size()])
