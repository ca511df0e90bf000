"""Copies between vLLM-CPU's paged KV cache and LMCache's token-major `KV_2LTD` tensors, `[2, layers, tokens,
kv_heads * head_size]`, with a learned block layout (layout.py).

The slots of a chunk are cut into pieces (a few per chunk, never one per token): runs of whole, consecutive blocks
move with one strided `copy_` per layer and K/V (the layout's StridedPlan), and the tokens of a partly covered block
move with `index_select` / `index_copy_` over the learned offsets. Nothing is computed per token in Python.

Loads can also go through vLLM's own write kernel, the SIMD code that fills the cache on every forward pass: with
LMCache's rows as its `key`/`value` input it writes exactly what a forward pass would have written. Which of the two
loads faster depends on the ISA (the kernel's amx packing is vectorised, its vec transposes are not), so
`faster_load` times both on a scratch cache once and the connector uses the winner.
"""

from __future__ import annotations

import time

import torch

from .digits import Piece, StridedPlan, cut_run
from .layout import BlockLayout, LayoutError, WriteKernel, split_kv

WORDS = {4: torch.int32, 8: torch.int64}  # word size in bytes -> the dtype a copy moves them as


def pieces(slots: torch.Tensor, block_size: int) -> list[Piece]:
    """Cut a chunk's slot mapping into runs of whole blocks and partly covered blocks."""
    count = int(slots.numel())
    if count == 0:
        return []
    breaks = (torch.nonzero(slots[1:] != slots[:-1] + 1).flatten() + 1).tolist()
    starts = slots[[0, *breaks]].tolist() if breaks else [int(slots[0])]
    result: list[Piece] = []
    for row, end, slot in zip([0, *breaks], [*breaks, count], starts):
        result.extend(cut_run(row, end - row, slot, block_size))
    return result


class PagedKV:
    """vLLM-CPU's per-layer caches `[num_blocks, num_kv_heads, block_size, 2 * head_size]` with their learned
    layout, and the two directions of copy to and from `KV_2LTD` tensors."""

    def __init__(self, layers: list[torch.Tensor], layout: BlockLayout, strided: bool = True):
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
        # Whole blocks move as strided views when both K and V have a strided plan (strided=False: always indexed).
        self.strided = strided and all(plan is not None for plan in layout.plans)

    @property
    def capacity(self) -> int:
        return self.num_blocks * self.layout.block_size

    # -- the two directions ------------------------------------------------------------------------------------

    def gather(self, out: torch.Tensor, slots: torch.Tensor) -> None:
        """Cache -> `out` ([2, layers, tokens, hidden], token-major), for the tokens at `slots`."""
        self._move(out, slots, to_chunk=True)

    def scatter(self, source: torch.Tensor, slots: torch.Tensor) -> None:
        """`source` ([2, layers, tokens, hidden]) -> cache, for the tokens at `slots`."""
        self._move(source, slots, to_chunk=False)

    def _move(self, chunk: torch.Tensor, slots: torch.Tensor, to_chunk: bool) -> None:
        self._check(chunk, slots)
        for piece in pieces(slots, self.layout.block_size):
            if piece.whole and self.strided:
                for kv in (0, 1):
                    for layer_index, layer in enumerate(self.layers):
                        rows, blocks = self._block_views(layer, chunk, layer_index, kv, piece)
                        if to_chunk:
                            rows.copy_(blocks)
                        else:
                            blocks.copy_(rows)
                continue
            index = self._piece_index(piece).view(-1)
            rows = slice(piece.row, piece.row + piece.tokens)
            for layer_index, layer in enumerate(self.layers):
                flat = self._flat(layer)
                if to_chunk:
                    chunk[:, layer_index, rows, :].copy_(flat.index_select(0, index).view(2, piece.tokens, -1))
                else:
                    flat.index_copy_(0, index, chunk[:, layer_index, rows, :].reshape(-1))

    def scatter_with_kernel(self, source: torch.Tensor, slots: torch.Tensor, write: WriteKernel) -> None:
        """`source` -> cache through vLLM's write kernel: per layer, LMCache's K and V rows as the kernel's input."""
        self._check(source, slots)
        tokens = int(slots.numel())
        if not tokens:
            return
        shape = (tokens, self.layout.num_heads, self.layout.head_size)
        slots = slots.contiguous()
        for layer_index, layer in enumerate(self.layers):
            key_cache, value_cache = split_kv(layer)
            write(source[0, layer_index].view(shape), source[1, layer_index].view(shape), key_cache, value_cache,
                  slots, self.layout.isa)

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


def faster_load(layout: BlockLayout, write: WriteKernel, chunk_tokens: int, chunks: int = 4,
                repeats: int = 3) -> tuple[str, dict]:
    """"kernel" or "strided", whichever loads `chunks` chunks of `chunk_tokens` tokens (blocks in shuffled order, two
    layers) into a scratch cache faster, and both times in seconds. The scratch cache is the connector's own: vLLM's
    cache is never written for this."""
    blocks = chunks * -(-chunk_tokens // layout.block_size)
    scratch = PagedKV([torch.zeros(blocks, layout.num_heads, layout.block_size, 2 * layout.head_size,
                                   dtype=layout.dtype) for _ in range(2)], layout)
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(0))
    slots = (order[:, None] * layout.block_size + torch.arange(layout.block_size)[None, :]).reshape(-1)
    parts = [slots[start:start + chunk_tokens] for start in range(0, chunks * chunk_tokens, chunk_tokens)]
    sources = [torch.zeros(2, 2, int(part.numel()), scratch.hidden, dtype=layout.dtype) for part in parts]

    def kernel():
        for source, part in zip(sources, parts):
            scratch.scatter_with_kernel(source, part, write)

    def strided():
        for source, part in zip(sources, parts):
            scratch.scatter(source, part)

    times = {}
    for name, load in (("kernel", kernel), ("strided", strided)):
        load()  # first touch of the scratch memory is not timed
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            load()
            runs.append(time.perf_counter() - started)
        times[name] = min(runs)
    return min(times, key=times.__getitem__), times
