"""Bit-exact store-then-load of the connector against vLLM's own write kernel, for every ISA the kernel can be asked
for on this CPU; prints one JSON object (`python -m stackctl_lmcache_cpu.selftest`).

Per ISA (`vec`, `vec16`, and `amx` where torch reports AMX tiles, the test vLLM itself makes at
vllm/v1/attention/backends/cpu_attn.py:533) and per case (whole blocks, partly covered blocks, blocks out of order,
a load that skips the tokens vLLM already holds), with random K/V in three layers:
1. the kernel writes K/V at the case's slots into a zeroed cache (exactly as vLLM's attention does);
2. the connector's from_gpu copies them into a KV_2LTD memory object from LMCache's own allocator;
3. that object must equal the token-major K and V the kernel was given, bit for bit;
4. the connector's to_gpu writes the object into a second zeroed cache, which must equal the first bit for bit on
   every position the kernel wrote for the loaded tokens, and stay zero everywhere else.
Every case runs six ways: the compiled copy (kvcopy.c) at this CPU's best SIMD level, at SSE2 and element by element
(so every code path of it is checked on any host), with loads through the same copy; the compiled copy storing and
vLLM's write kernel loading; torch's strided views; and torch's index_select / index_copy_ for everything (the
fallbacks). The ISA is given to the connector explicitly, so one process covers every ISA; which ISA vLLM itself
would pick here is reported as `host_isa`, and whether the compiled copy loads as `native`.
"""

from __future__ import annotations

import json
import sys

import torch

LAYERS = 3
# name -> CPUPagedConnector options
WAYS = {"native": {"load_path": "layout"}, "native sse2": {"load_path": "layout", "level": 1},
        "native scalar": {"load_path": "layout", "level": 0}, "kernel loads": {"load_path": "kernel"},
        "strided": {"load_path": "layout", "copy": "strided"}, "indexed": {"load_path": "layout", "copy": "indexed"}}


def cases(block_size: int) -> list[dict]:
    """name, slots of the request's tokens, chunk [start, end), tokens vLLM already holds for the load."""
    b = block_size

    def run(first: int, count: int) -> list[int]:
        return list(range(first, first + count))

    return [
        {"name": "whole blocks", "slots": run(2 * b, 2 * b), "start": 0, "end": 2 * b, "vllm_cached": 0},
        {"name": "blocks out of order", "slots": run(5 * b, b) + run(1 * b, b) + run(3 * b, b), "start": 0,
         "end": 3 * b, "vllm_cached": 0},
        {"name": "partial blocks", "slots": run(4 * b + 5, 2 * b), "start": 3, "end": 2 * b - 7, "vllm_cached": 0},
        {"name": "chunk after the first", "slots": run(6 * b, b) + run(2 * b, b + b // 2), "start": b,
         "end": 2 * b + b // 2, "vllm_cached": 0},
        {"name": "load skips vLLM's tokens", "slots": run(b, 2 * b), "start": 0, "end": 2 * b,
         "vllm_cached": b + b // 4},
        {"name": "odd token boundaries", "slots": run(3 * b + 3, b + 7) + run(7 * b + b // 2 + 1, b // 4 - 2),
         "start": 0, "end": b + 7 + b // 4 - 2, "vllm_cached": 1},
    ]


def shapes() -> list[dict]:
    return [
        {"block_size": 128, "num_heads": 2, "head_size": 64, "dtype": torch.bfloat16},  # the tiny test model
        {"block_size": 32, "num_heads": 4, "head_size": 128, "dtype": torch.bfloat16},
        {"block_size": 64, "num_heads": 1, "head_size": 80, "dtype": torch.float32},
    ]


def isas() -> list[str]:
    found = ["vec", "vec16"]
    if torch.cpu._is_amx_tile_supported():
        found.append("amx")
    return found


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The raw bits, so -0.0 vs 0.0 and NaN payloads count as differences."""
    return tensor.contiguous().view({2: torch.int16, 4: torch.int32}[tensor.element_size()])


def run_case(isa: str, shape: dict, case: dict, way: str, write, learn_from=None) -> dict:
    """One case one way; `learn_from` is the kernel the connector learns its layout from (default: `write`)."""
    from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import (
        AdHocMemoryAllocator,
    )
    from lmcache.v1.memory_management import MemoryFormat

    from .connector import CPUPagedConnector
    from .layout import split_kv

    block_size, heads, head_size, dtype = (shape[key] for key in ("block_size", "num_heads", "head_size", "dtype"))
    slots = torch.tensor(case["slots"], dtype=torch.int64)
    tokens = len(case["slots"])
    num_blocks = 8
    generator = torch.Generator().manual_seed(len(case["name"]) * 7919 + block_size)
    keys = torch.randn(LAYERS, tokens, heads, head_size, generator=generator).to(dtype)
    values = torch.randn(LAYERS, tokens, heads, head_size, generator=generator).to(dtype)
    written = [torch.zeros(num_blocks, heads, block_size, 2 * head_size, dtype=dtype) for _ in range(LAYERS)]
    for layer, cache in enumerate(written):
        key_cache, value_cache = split_kv(cache)
        write(keys[layer], values[layer], key_cache, value_cache, slots, isa)

    start, end = case["start"], case["end"]
    connector = CPUPagedConnector(heads * head_size, LAYERS, isa=isa, write_kernel=learn_from or write,
                                  **WAYS[way])
    memory_obj = AdHocMemoryAllocator("cpu").allocate(connector.get_shape(end - start), dtype, MemoryFormat.KV_2LTD)
    connector.from_gpu(memory_obj, start, end, kvcaches=written, slot_mapping=slots)
    stored = memory_obj.tensor
    expected = torch.stack([keys[:, start:end].reshape(LAYERS, end - start, -1),
                            values[:, start:end].reshape(LAYERS, end - start, -1)])
    stored_exact = torch.equal(bits(stored), bits(expected))

    loaded = [torch.zeros_like(cache) for cache in written]
    connector.to_gpu(memory_obj, start, end, kvcaches=loaded, slot_mapping=slots,
                     vllm_cached_tokens=case["vllm_cached"])
    first_loaded = start + min(end - start, max(0, case["vllm_cached"] - start))
    touched = touched_positions(write, isa, shape, num_blocks, slots[first_loaded:end])
    loaded_exact = all(torch.equal(bits(new)[touched], bits(old)[touched]) for new, old in zip(loaded, written))
    rest_zero = all(not bool(bits(new)[~touched].any()) for new in loaded)
    return {"isa": isa, "case": case["name"], "way": way, "block_size": block_size, "num_heads": heads,
            "head_size": head_size, "dtype": str(dtype).replace("torch.", ""), "tokens": end - start,
            "loaded_tokens": end - first_loaded, "touched_elements": int(touched.sum()), "stored_exact": stored_exact,
            "loaded_exact": loaded_exact, "untouched_zero": rest_zero, "layout": connector.describe(),
            "copy": connector.copy_path()}


def touched_positions(write, isa: str, shape: dict, num_blocks: int, slots: torch.Tensor) -> torch.Tensor:
    """Where the kernel writes the given tokens: ones written through it into a zeroed cache."""
    block_size, heads, head_size, dtype = (shape[key] for key in ("block_size", "num_heads", "head_size", "dtype"))
    from .layout import split_kv

    cache = torch.zeros(num_blocks, heads, block_size, 2 * head_size, dtype=dtype)
    ones = torch.ones(len(slots), heads, head_size, dtype=dtype)
    key_cache, value_cache = split_kv(cache)
    write(ones, ones, key_cache, value_cache, slots, isa)
    return cache != 0


def control(write) -> dict:
    """The comparison can fail: a connector that learned its layout from a kernel with K and V swapped must not
    store what the real kernel wrote."""

    def swapped(key, value, key_cache, value_cache, slot_mapping, isa):
        write(value, key, key_cache, value_cache, slot_mapping, isa)

    shape, case = shapes()[0], cases(shapes()[0]["block_size"])[0]
    results = [run_case("vec", shape, case, way, write, learn_from=swapped) for way in ("native", "strided")]
    return {"case": case["name"], "stored_exact": any(result["stored_exact"] for result in results),
            "loaded_exact": any(result["loaded_exact"] for result in results)}


def main() -> int:
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from . import native
    from .layout import vllm_write_kernel

    write = vllm_write_kernel()
    results = []
    for isa in isas():
        for shape in shapes():
            if isa == "amx" and shape["dtype"] != torch.bfloat16:
                continue  # vLLM picks amx for bf16 only (cpu_attn.py:544)
            for case in cases(shape["block_size"]):
                for way in WAYS:
                    try:
                        results.append(run_case(isa, shape, case, way, write))
                    except Exception as exc:  # reported, not raised: the test names the failing case
                        results.append({"isa": isa, "case": case["name"], "way": way,
                                        "block_size": shape["block_size"], "error": f"{type(exc).__name__}: {exc}"})
    library = native.load()
    report = {"control": control(write), "torch": torch.__version__,
              "host_isa": _get_attn_isa(torch.bfloat16, 128, 64, "auto"),
              "amx": bool(torch.cpu._is_amx_tile_supported()),
              "native": library if isinstance(library, str) else native.LEVELS[library.level], "isas": isas(),
              "results": results}
    json.dump(report, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
