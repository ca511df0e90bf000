"""Python environments shaped like a stack image's site-packages (torch, vLLM, LMCache from the ELF fixtures of
tests/fixtures/elf, aiofile, ATOM's entry point, extra distributions), and the real image probe run over one, as in
an image: a fresh interpreter that sees the site first, nothing imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers import FIXTURES, REPO

ELF = FIXTURES / "elf"
ROCM_TORCH = '__version__ = "2.9.0+rocm7.0.2"\nhip = "7.0.51831"\ncuda = None\n'
CUDA_TORCH = '__version__ = "2.9.0+cu128"\nhip = None\ncuda = "12.8"\n'
CPU_TORCH = '__version__ = "2.13.0+cpu"\nhip = None\ncuda = None\n'


def dist_info(site, name, version, entry_points=""):
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


def package(site, name, files):
    (site / name).mkdir()
    for file, text in {"__init__.py": "", **files}.items():
        (site / name / file).write_text(text)


def build_site(site, lmcache="lmcache-0.5.6-hip", torch=ROCM_TORCH, vllm="0.27.1", aiofile=True, atom=True,
               extra=()):
    """A site-packages folder as a stack image has it; `lmcache=None` leaves LMCache out, "fallback" installs it
    without a native module."""
    site.mkdir()
    if lmcache == "fallback":
        package(site, "lmcache", {"_version.py": '__version__ = version = "0.5.6"\n'})
    elif lmcache:
        shutil.copytree(ELF / lmcache / "lmcache", site / "lmcache")
    if torch:
        package(site, "torch", {"version.py": torch})
    package(site, "vllm", {})
    dist_info(site, "vllm", vllm)
    if aiofile:
        package(site, "aiofile", {})
    if atom:
        dist_info(site, "atom", "0.1.0",
                  "[vllm.platform_plugins]\natom = atom.plugin.vllm.register:register_platform\n")
    for name, version in extra:
        dist_info(site, name, version)
    return site


def probe(site) -> dict:
    """The real probe in a fresh interpreter that sees `site` first, as in an image."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PYTHONHASHSEED", None)
    out = subprocess.run([sys.executable, str(REPO / "probes" / "probe_image.py")], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)
