#!/usr/bin/env python3
"""Compile at image build time what vLLM compiles on a CPU server's first request with log-probabilities.

vLLM (0.32: vllm/v1/sample/ops/logprobs.py) wraps `batched_count_greater_than` in torch.compile; on CPU that is
inductor, which writes C++ against a precompiled ATen header and builds it with g++: 16-25 s on 2 cores, paid by
every new server on its first such request (doctor's answer comparisons, every user's first request asking for
logprobs). Run here, both land in a layer of the image: the graphs and kernels in TORCHINDUCTOR_CACHE_DIR, the
precompiled header in inductor's own folder (/tmp/torchinductor_root for root), and a new server's first such
request takes about 4 s. Inductor keys each entry on torch's version, the compiler and the CPU's vector ISA,
so a host of another ISA compiles again, as it would have without this.

The op is called as the sampler calls it: logits of one request, then of two (the second call makes the batch
dimension dynamic, which is a second compile), for each vocabulary size given.

Usage: warm_compile.py [--vocab N ...]   (default: the vocabulary of the models make_tiny_model.py writes)
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

OP_MODULE = "vllm.v1.sample.ops.logprobs"
OP_NAME = "batched_count_greater_than"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, action="append", help="vocabulary size of the logits (repeatable)")
    args = parser.parse_args(argv)
    if not args.vocab:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from make_tiny_model import VOCAB_SIZE
        args.vocab = [VOCAB_SIZE]
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(inductor's default)")
    try:
        op = getattr(importlib.import_module(OP_MODULE), OP_NAME)
    except (ImportError, AttributeError) as exc:
        # Another vLLM release: nothing of this name to warm, and the server behaves as before.
        print(f"stackctl warm: nothing compiled: {OP_MODULE}.{OP_NAME} is not in this vLLM ({exc})")
        return 0
    import torch
    from torch._dynamo.utils import counters

    for vocab in args.vocab:
        for batch in (1, 2):
            logits = torch.randn(batch, vocab)
            before = dict(counters["inductor"])
            start = time.monotonic()
            op(logits, logits[:, :1].clone())
            seconds = time.monotonic() - start
            # Inductor's own account of its FX graph cache: a run in a built image finds every graph (0 misses).
            hits, misses = (counters["inductor"][key] - before.get(key, 0)
                            for key in ("fxgraph_cache_hit", "fxgraph_cache_miss"))
            print(f"stackctl warm: {OP_NAME} for {batch} x {vocab} logits in {seconds:.1f} s; inductor cache "
                  f"{cache}: {hits} hit(s), {misses} miss(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
