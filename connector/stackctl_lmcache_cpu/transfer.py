"""Copies between vLLM-CPU's paged KV cache and LMCache's token-major `KV_2LTD` tensors, `[2, layers, tokens,
kv_heads * head_size]`, with a learned block layout (layout.py), three ways:

- "native" (the default where it loads): one call into the compiled copy loop (kvcopy.c via native.py) per chunk,
  for every layer, K and V, whole and partly covered blocks alike; it needs the layout's offsets to be separable
  (offset = tok[t] + head[h] + dim[d], true of all of vLLM 0.32's ISAs).
- "strided": torch only. The slots of a chunk are cut into pieces (a few per chunk, never one per token): runs of
  whole, consecutive blocks move with one strided `copy_` per layer and K/V (the layout's StridedPlan), and the tokens
  of a partly covered block with `index_select` / `index_copy_` over the learned offsets.
- "indexed": torch's `index_select` / `index_copy_` for everything (the fallback when a layout has no strided form).

What bounds them (bench.py measures them beside memcpy and says more): memory bandwidth first, as for memcpy; then
element order: runs that keep LMCache's order move like memcpy, elements that do not (vec/vec16 K, amx K and V) move
one at a time through torch (about 0.3x memcpy) or through SIMD register transposes in the compiled copy (0.6-0.8x);
then how well the hardware prefetches the transposed side's scattered lines. Both run on the calling thread only.

Loads can also go through vLLM's own write kernel, the SIMD code that fills the cache on every forward pass: with
LMCache's rows as its `key`/`value` input it writes exactly what a forward pass would have written.
`faster_load` times it against the connector's own copy on a scratch cache once, and the connector uses the winner.
"""

from __future__ import annotations

import time

import torch

from . import native
from .digits import Piece, StridedPlan, cut_run, native_side
from .layout import BlockLayout, LayoutError, WriteKernel, split_kv

WORDS = {4: torch.int32, 8: torch.int64}  # word size in bytes -> the dtype a copy moves them as
COPIES = ("native", "strided", "indexed")


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

    def __init__(self, layers: list[torch.Tensor], layout: BlockLayout, copy: str = "native",
                 level: int | None = None):
        """`copy`: "native", "strided" or "indexed" (see the module's docstring); "native" falls back to "strided"
        where the compiled copy cannot serve (`self.fallback` says why), "strided" to "indexed" where the layout has
        no strided form. `level`: the compiled copy's highest SIMD level (native.LEVELS; default: the CPU's best)."""
        if copy not in COPIES:
            raise ValueError(f"copy {copy!r}: one of {', '.join(COPIES)}")
        self.layers, self.layout, self.level = layers, layout, level
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
        self.fallback = ""
        self.native: native.Prepared | None = None
        if copy == "native":
            self.native, self.fallback = self._prepare_native()
            copy = "native" if self.native is not None else "strided"
        # Whole blocks move as strided views when both K and V have a strided plan.
        if copy == "strided" and not all(plan is not None for plan in layout.plans):
            copy = "indexed"
        self.copy = copy
        self.strided = copy == "strided"

    def _prepare_native(self) -> tuple[native.Prepared | None, str]:
        """The compiled copy for these caches, or None and why not."""
        library = native.load()
        if isinstance(library, str):
            return None, library
        tables = native_tables(self.layout)
        if tables is None:
            return None, "the layout's offsets are not separable (tok[t] + head[h] + dim[d])"
        if any(layer.stride(0) != self.block_stride for layer in self.layers):
            return None, "the layers' block strides differ"
        return library.prepare(tables, [layer.data_ptr() for layer in self.layers], self.block_stride), ""

    def describe(self) -> str:
        """Which copy moves the rows, as the connector's log line says it."""
        if self.native is not None:
            level = self.native.library.level if self.level is None else min(self.level, self.native.library.level)
            return f"compiled copy ({native.LEVELS[level]}; {self.native.tables.describe()})"
        why = f" ({self.fallback})" if self.fallback else ""
        return f"torch {self.copy} copy{why}"

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
        if self.native is not None:
            if slots.numel():
                slots = slots.contiguous()
                self.native.move(to_chunk, slots.data_ptr(), int(slots.numel()), chunk.data_ptr(),
                                 (chunk.stride(0), chunk.stride(1), chunk.stride(2)), self.level)
            return
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
        if slots.dtype != torch.int64 or slots.dim() != 1:
            raise ValueError(f"slot mapping {slots.dtype} of {slots.dim()} dimensions, expected 1-D int64")
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


def native_tables(layout: BlockLayout) -> native.Tables | None:
    """The layout's offsets as kvcopy.c's tables (tok[t] + head[h] + dim[d] per K and V), or None when they are not
    of that form."""
    tok, head, dim, sides = [], [], [], []
    itemsize = torch.empty((), dtype=layout.dtype).element_size()
    for kv in (0, 1):
        offsets = layout.offsets[kv]  # [token, head, dim]
        base = offsets[0, 0, 0]
        tokens, heads, dims = offsets[:, 0, 0], offsets[0, :, 0] - base, offsets[0, 0, :] - base
        if not torch.equal(tokens[:, None, None] + heads[None, :, None] + dims[None, None, :], offsets):
            return None
        tok.append(tokens.tolist())
        head.append(heads.tolist())
        dim.append(dims.tolist())
        sides.append(native_side(tok[-1], dim[-1], itemsize))
    if itemsize not in (2, 4) or max(max(values) for values in tok) >= 2**31:
        return None
    return native.Tables(itemsize, layout.block_size, layout.num_heads, layout.head_size, (sides[0], sides[1]),
                         (tok[0], tok[1]), (head[0], head[1]), (dim[0], dim[1]))


def copy_description(layout: BlockLayout, copy: str = "native", level: int | None = None) -> str:
    """What PagedKV.describe says for caches of this layout (asked of a one-block scratch cache)."""
    scratch = torch.zeros(1, layout.num_heads, layout.block_size, 2 * layout.head_size, dtype=layout.dtype)
    return PagedKV([scratch], layout, copy, level).describe()


def faster_load(layout: BlockLayout, write: WriteKernel, chunk_tokens: int, copy: str = "native", chunks: int = 4,
                repeats: int = 3) -> tuple[str, dict]:
    """"kernel" or "layout" (the connector's own `copy`), whichever loads `chunks` chunks of `chunk_tokens` tokens
    (blocks in shuffled order, two layers) into a scratch cache faster, and both times in seconds. The scratch cache is
    the connector's own: vLLM's cache is never written for this."""
    blocks = chunks * -(-chunk_tokens // layout.block_size)
    scratch = PagedKV([torch.zeros(blocks, layout.num_heads, layout.block_size, 2 * layout.head_size,
                                   dtype=layout.dtype) for _ in range(2)], layout, copy)
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(0))
    slots = (order[:, None] * layout.block_size + torch.arange(layout.block_size)[None, :]).reshape(-1)
    parts = [slots[start:start + chunk_tokens] for start in range(0, chunks * chunk_tokens, chunk_tokens)]
    sources = [torch.zeros(2, 2, int(part.numel()), scratch.hidden, dtype=layout.dtype) for part in parts]

    def kernel():
        for source, part in zip(sources, parts):
            scratch.scatter_with_kernel(source, part, write)

    def own():
        for source, part in zip(sources, parts):
            scratch.scatter(source, part)

    times = {}
    for name, load in (("kernel", kernel), ("layout", own)):
        load()  # first touch of the scratch memory is not timed
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            load()
            runs.append(time.perf_counter() - started)
        times[name] = min(runs)
    return min(times, key=times.__getitem__), times
