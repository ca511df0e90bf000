"""Per-tier put/get latency and throughput through LMCache's own StorageManager, in the image of a recipe (default
recipes/cpu-tiers.toml), for real KV chunks of its model: every tier moves the same chunk, `cache.chunk_size` tokens
of the model's KV (the smoke model: 1 KiB a token, 128 KiB a chunk). Needs the image built (`stackctl build
RECIPE`), the Ceph RGW running (scripts/start-ceph-rgw.sh) and its credentials in STACKCTL_S3_ACCESS_KEY /
STACKCTL_S3_SECRET_KEY (read from /tmp/stackctl-ceph/s3.env when unset).
Usage: python benchmarks/tiers.py [RECIPE] [-n CHUNKS]."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from stackctl.bundle.stackspec import StackSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    from stackctl.doctor import tier_roundtrip
    from stackctl.doctor.context import DoctorContext
    from stackctl.recipe import load_recipe

    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-tiers.toml"))
    parser.add_argument("-n", type=int, help="chunks per tier (default: enough for 16 MiB each way)")
    args = parser.parse_args()
    env_file = Path("/tmp/stackctl-ceph/s3.env")
    if env_file.is_file():
        for line in env_file.read_text().split():
            key, _, value = line.partition("=")
            os.environ.setdefault(key, value)
    for name in ("disk", "fs"):
        Path("/tmp/stackctl-tiers", name).mkdir(parents=True, exist_ok=True)
    context = DoctorContext(StackSpec(load_recipe(args.recipe)))
    chunk, outcomes = tier_roundtrip.run(context, keys=args.n)
    keys = args.n or tier_roundtrip.keys_per_tier(chunk.bytes)
    print(f"{keys} x {chunk.describe()} per tier ({Path(args.recipe).name}); latency: median of one chunk; MB/s "
          "(10^6 B/s): all chunks' bytes over their summed time")
    print(f"{'tier':<6} {'put ms':>9} {'put MB/s':>10} {'get ms':>9} {'get MB/s':>10}  result")
    for o in outcomes:
        f = o.figures
        print(f"{o.kind:<6} {f.get('put_ms', 0):9.3f} {f.get('put_mb_s', 0):10.1f} {f.get('get_ms', 0):9.3f} "
              f"{f.get('get_mb_s', 0):10.1f}  {'ok' if o.ok else o.message}")


if __name__ == "__main__":
    main()
