"""Remove CUDA-only Python distributions from an image, then prove none remains and the engine still imports.

Exit status 1 (failing the image build) when a CUDA-only distribution survives or an import breaks.
"""

import argparse
import importlib
import importlib.metadata as metadata
import json
import re
import subprocess
import sys


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_only_installed(config, keep_prefixes=()):
    names = {normalize(n) for n in config["names"]}
    found = set()
    for dist in metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if any(name.startswith(p) for p in keep_prefixes):
            continue
        if name in names or any(name.startswith(p) for p in config["prefixes"]):
            found.add(name)
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="cuda_only.json (names and prefixes)")
    parser.add_argument("--verify-import", default="", help="comma-separated modules that must still import")
    parser.add_argument("--keep-prefix", action="append", default=[],
                        help="leave distributions with this prefix (CPU images: a PyPI torch needs nvidia-*)")
    args = parser.parse_args()
    config = json.load(open(args.config))
    doomed = cuda_only_installed(config, args.keep_prefix)
    if doomed:
        print("stackctl purge: removing " + " ".join(doomed), flush=True)
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", *doomed], check=True)
    else:
        print("stackctl purge: no CUDA-only distribution installed", flush=True)
    left = cuda_only_installed(config, args.keep_prefix)
    if left:
        sys.exit("stackctl purge: still installed: " + " ".join(left))
    for module in filter(None, args.verify_import.split(",")):
        importlib.import_module(module)
        print(f"stackctl purge: import {module} ok", flush=True)


if __name__ == "__main__":
    main()
