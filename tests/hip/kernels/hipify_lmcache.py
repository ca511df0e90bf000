"""Hipify LMCache's CUDA sources the way its ROCm build does, for the kernel tests (run while building the image).

    python hipify_lmcache.py VERSION OUT_DIR

Fetches LMCache VERSION's sdist from PyPI (its sha256 checked against PyPI's), runs the build profile LMCache's
setup.py selects under BUILD_WITH_HIP=1 (setup_extensions/build_profiles/rocm.py: torch's hipify over csrc/cuda
plus its own token fixes), and keeps csrc (the hipified csrc_hip next to it) in OUT_DIR, with hipified.json naming
the sources that profile compiles.
"""

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request

# The index API pip itself reads (PEP 691, JSON form).
SIMPLE_INDEX = "https://pypi.org/simple/lmcache/"


def fetch_sdist(version: str, into: str) -> str:
    """Download and unpack the sdist; returns the unpacked source root."""
    request = urllib.request.Request(SIMPLE_INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        files = json.load(reply)["files"]
    name = f"lmcache-{version}.tar.gz"
    sdist = next((f for f in files if f["filename"] == name), None)
    if sdist is None:
        raise SystemExit(f"{name}: not on {SIMPLE_INDEX}")
    archive = os.path.join(into, name)
    with urllib.request.urlopen(sdist["url"], timeout=300) as reply, open(archive, "wb") as out:
        shutil.copyfileobj(reply, out)
    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != sdist["hashes"]["sha256"]:
        raise SystemExit(f"{name}: sha256 {digest}, the index says {sdist['hashes']['sha256']}")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return os.path.join(into, f"lmcache-{version}")


def hipify(root: str) -> list:
    """Run LMCache's ROCm build profile from its own source tree; returns the sources it would compile."""
    sys.path.insert(0, root)
    os.chdir(root)
    from setup_extensions.build_profiles.rocm import RocmProfile

    ext_modules, _cmdclass = RocmProfile().build()
    return [src for ext in ext_modules for src in ext.sources]


def main() -> None:
    version, out_dir = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp()
    root = fetch_sdist(version, work)
    sources = hipify(root)
    shutil.copytree(os.path.join(root, "csrc"), os.path.join(out_dir, "csrc"))
    shutil.copytree(os.path.join(root, "csrc_hip"), os.path.join(out_dir, "csrc_hip"))
    with open(os.path.join(out_dir, "hipified.json"), "w") as f:
        json.dump({"lmcache": version, "sources": sources}, f, indent=1)
    shutil.rmtree(work)
    print(f"LMCache {version}: hipified {len(sources)} sources into {out_dir}")


if __name__ == "__main__":
    main()
