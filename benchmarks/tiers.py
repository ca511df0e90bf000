"""Per-tier put/get latency and throughput through LMCache's own storage code, for 256-token chunks of the smoke
model (tiny-random-llama: 2 layers x 2 KV heads x head_dim 64, bf16 K and V = 1 KiB per token, 256 KiB a chunk), in
the image of recipes/cpu-tiers.toml. Needs the image built (`stackctl build recipes/cpu-tiers.toml`), the Ceph RGW
running (scripts/start-ceph-rgw.sh) and its credentials in STACKCTL_S3_ACCESS_KEY / STACKCTL_S3_SECRET_KEY (read
from /tmp/stackctl-ceph/s3.env when unset). Usage: python benchmarks/tiers.py [RECIPE] [-n CHUNKS]."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOKEN_BYTES = 2 * 2 * 2 * 64 * 2          # K and V x layers x KV heads x head_dim x bf16
CHUNK_TOKENS = 256


def main() -> None:
    from stackctl.doctor import tier_roundtrip
    from stackctl.doctor.context import DoctorContext
    from stackctl.knowledge import compat
    from stackctl.recipe import load_recipe

    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-tiers.toml"))
    parser.add_argument("-n", type=int, default=20, help="chunks per tier")
    args = parser.parse_args()
    env_file = Path("/tmp/stackctl-ceph/s3.env")
    if env_file.is_file():
        for line in env_file.read_text().split():
            key, _, value = line.partition("=")
            os.environ.setdefault(key, value)
    for name in ("disk", "fs"):
        Path("/tmp/stackctl-tiers", name).mkdir(parents=True, exist_ok=True)
    context = DoctorContext(load_recipe(args.recipe))
    tool = compat.lmcache_storage_check((context.probe().get("lmcache") or {}).get("version"))
    if tool is None:
        sys.exit("the image's LMCache has no storage check tool")
    chunk_bytes = TOKEN_BYTES * CHUNK_TOKENS
    outcomes = tier_roundtrip.run(context, tool, obj_elements=chunk_bytes // 2, num_keys=args.n)
    print(f"{args.n} chunks per tier of {CHUNK_TOKENS} tokens of the smoke model ({chunk_bytes // 1024} KiB); S3: the "
          f"1 KiB object LMCache's check tool can send there ({Path(args.recipe).name})")
    print(f"{'tier':<6} {'chunk KiB':>9} {'put ms':>9} {'put MB/s':>10} {'get ms':>9} {'get MB/s':>10}  result")
    for o in outcomes:
        f = o.figures
        print(f"{o.kind:<6} {f['chunk_bytes'] / 1024:9g} {f.get('put_ms', 0):9.3f} {f.get('put_mb_s', 0):10.2f} "
              f"{f.get('get_ms', 0):9.3f} {f.get('get_mb_s', 0):10.2f}  {'ok' if o.ok else o.message}")


if __name__ == "__main__":
    main()
