"""Store and load throughput of the connector, beside this machine's memcpy throughput measured in the same run;
prints one JSON object (`python -m stackctl_lmcache_cpu.bench [--threads N] ...`, used by `stackctl bench`).

What is measured: LMCache's own calls, `batched_from_gpu` (store: vLLM's paged cache -> KV_2LTD memory objects from
LMCache's allocator) and `batched_to_gpu` (load: the reverse), for 256-token chunks whose blocks lie in random order
in a cache shaped like the model's (default: the 150M-parameter Llama of the bench, 12 layers, 8 KV heads, head size
64, bf16, block size 128), with the ISA vLLM picks on this CPU unless --isa says otherwise. `memcpy` is one
contiguous torch copy of the same number of bytes, with the same thread count. Each figure is the median of
--repeats runs, the three interleaved; GB/s are 1e9 bytes of KV moved per second.

What bounds it: a store or load reads and writes every byte once, as memcpy does, so one core's memory bandwidth is
the ceiling (the copies here are far larger than the caches: both are DRAM-bound). Below that:
- Element size and order. Where vLLM-CPU keeps LMCache's element order in runs (vec/vec16 V: a head's 64 dims, 128
  bytes per token), the runs move like memcpy. Where it does not (vec/vec16 K transposed per head, amx's dim pairs of
  K and token pairs of V), neighbours in a row are 2 (or 4) bytes from different places in the block: torch's strided
  copy (`--copy strided`, the fallback) moves them one element at a time, at 0.2-0.35x memcpy; the compiled copy
  (kvcopy.c, the default) moves them with SIMD register transposes, 8x8 two-byte elements or 4x4 four-byte dim pairs
  per step, twice that with AVX2; with the data in cache those shuffles take about a third of memcpy's time here.
- Gather versus contiguous runs. The transposed side reads (store) or writes (load) a head's 16 KiB one cache line
  per dim and 16 tokens at a time, which the hardware prefetchers follow less well than memcpy's single stream: the
  compiled copy prefetches the next head where its lines lie apart (vec K), and stores gather a block's rows in cache
  and stream them out whole with non-temporal stores (memcpy's plain stores first read every target line: this is
  why stores can come closer to memcpy than loads, which write vLLM's cache in place).
- Per chunk, the Python side (checks, one ctypes call): about 4% of a 256-token chunk's time.
- Thread count: the compiled copy runs on the calling thread only, so --threads N gives memcpy N threads and the copy
  one; the figures compare like with like at 1 (the default). torch's copies use the N threads.
Measured on the 2-core AVX-512/AMX development machine, one thread, this model, three runs each: store 0.60-0.73x
memcpy (vec, vec16) and 0.72-0.82x (amx), load 0.64-0.72x; torch's strided copy 0.28-0.33x (amx: vLLM's kernel loads
at 0.45-0.54x).
The load path uses vLLM's own SIMD write kernel where that is faster (see connector.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=256, help="LMCache chunk size in tokens")
    parser.add_argument("--chunks", type=int, default=16, help="chunks moved per run")
    parser.add_argument("--isa", default=None, help="vec, vec16, amx (default: vLLM's pick on this CPU)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: compare with one core's memcpy)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--copy", default="native", choices=("native", "strided", "indexed"),
                        help="the connector's copy (transfer.py; default: the compiled one)")
    parser.add_argument("--level", type=int, default=None, help="the compiled copy's highest SIMD level (0-2)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args)))
    return 0


def measure(args) -> dict:
    import torch
    from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import (
        AdHocMemoryAllocator,
    )
    from lmcache.v1.memory_management import MemoryFormat
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from .connector import CPUPagedConnector

    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16
    isa = args.isa or _get_attn_isa(dtype, args.block_size, args.head_size, "auto")
    blocks_per_chunk = -(-args.chunk // args.block_size)
    num_blocks = 2 * args.chunks * blocks_per_chunk  # twice what moves: blocks are picked at random
    generator = torch.Generator().manual_seed(0)
    caches = [torch.randn(num_blocks, args.kv_heads, args.block_size, 2 * args.head_size,
                          generator=generator).to(dtype) for _ in range(args.layers)]
    order = torch.randperm(num_blocks, generator=generator)[:args.chunks * blocks_per_chunk]
    tokens = args.chunks * args.chunk
    slots = (order[:, None] * args.block_size + torch.arange(args.block_size)[None, :]).reshape(-1)[:tokens]
    connector = CPUPagedConnector(args.kv_heads * args.head_size, args.layers, isa=isa, copy=args.copy,
                                  level=args.level)
    allocator = AdHocMemoryAllocator("cpu")
    objects = [allocator.allocate(connector.get_shape(args.chunk), dtype, MemoryFormat.KV_2LTD)
               for _ in range(args.chunks)]
    starts = [i * args.chunk for i in range(args.chunks)]
    ends = [start + args.chunk for start in starts]
    kwargs = {"kvcaches": caches, "slot_mapping": slots}
    connector.batched_from_gpu(objects, starts, ends, **kwargs)  # learns the layout (not timed)
    moved = sum(obj.tensor.numel() * obj.tensor.element_size() for obj in objects)
    source = torch.randn(moved // 2, generator=generator).to(dtype)
    target = torch.empty_like(source)

    actions = {"store": lambda: connector.batched_from_gpu(objects, starts, ends, **kwargs),
               "load": lambda: connector.batched_to_gpu(objects, starts, ends, **kwargs),
               "memcpy": lambda: target.copy_(source)}
    runs: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(args.repeats):  # interleaved, so the three see the same machine (other load comes and goes)
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            runs[name].append(time.perf_counter() - started)
    store, load, memcpy = (moved / statistics.median(runs[name]) / 1e9 for name in ("store", "load", "memcpy"))
    return {"isa": isa, "layout": connector.describe(), "copy": connector.copy_path(), "load_path": connector.load_path,
            "threads": args.threads,
            "layers": args.layers, "kv_heads": args.kv_heads, "head_size": args.head_size,
            "block_size": args.block_size, "chunk_tokens": args.chunk, "chunks": args.chunks, "bytes": moved,
            "store_gb_s": round(store, 3), "load_gb_s": round(load, 3), "memcpy_gb_s": round(memcpy, 3),
            "store_over_memcpy": round(store / memcpy, 3), "load_over_memcpy": round(load / memcpy, 3)}


if __name__ == "__main__":
    sys.exit(main())
