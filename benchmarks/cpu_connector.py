"""Store and load throughput of stackctl's LMCache connector for vLLM-CPU, per ISA this CPU can run, beside one
core's memcpy measured in the same run, in the image of recipes/cpu-tiers.toml (`python -m stackctl_lmcache_cpu.bench`
in the image; its docstring says what is measured and what bounds it). Needs the image built (`stackctl build
recipes/cpu-tiers.toml`). Usage: python benchmarks/cpu_connector.py [RECIPE] [--threads N] [--json]."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from stackctl.bundle.stackspec import StackSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def isas() -> list[str]:
    """vec and vec16 everywhere vLLM-CPU runs on x86; amx where the CPU has AMX (vLLM picks it for bf16 there)."""
    flags = Path("/proc/cpuinfo").read_text().split()
    return ["vec", "vec16"] + (["amx"] if "amx_bf16" in flags else [])


def main() -> None:
    from stackctl.doctor.context import DoctorContext
    from stackctl.recipe import load_recipe

    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-tiers.toml"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object per ISA instead of the table")
    args = parser.parse_args()
    image = DoctorContext(StackSpec(load_recipe(args.recipe))).image_tag
    rows = []
    for isa in isas():
        command = ["docker", "run", "--rm", "--network", "host", "--entrypoint", "python", image, "-m",
                   "stackctl_lmcache_cpu.bench", "--isa", isa, "--threads", str(args.threads)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        if result.returncode != 0:
            sys.exit(f"{isa}: {result.stderr.strip()[-2000:]}")
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    first = rows[0]
    print(f"{first['chunks']} chunks of {first['chunk_tokens']} tokens, {first['layers']} layers x {first['kv_heads']} "
          f"KV heads x head size {first['head_size']}, bf16, blocks in random order; {first['threads']} thread(s); "
          f"median of runs ({image})")
    print(f"{'isa':<6} {'store GB/s':>10} {'load GB/s':>10} {'memcpy GB/s':>11} {'store/memcpy':>12} "
          f"{'load/memcpy':>11}  load path")
    for row in rows:
        print(f"{row['isa']:<6} {row['store_gb_s']:10.2f} {row['load_gb_s']:10.2f} {row['memcpy_gb_s']:11.2f} "
              f"{row['store_over_memcpy']:12.2f} {row['load_over_memcpy']:11.2f}  {row['load_path']}")


if __name__ == "__main__":
    main()
