"""`pip install` of the built wheel into a fresh venv, outside the source tree, gives a working tool: the shipped
recipes, templates, probes, playbooks and the CPU connector come with it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow


def test_wheel_installs_and_finds_shipped_files(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(dist.glob("stackctl-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True,
                             text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-2000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    def stackctl(*args):
        return subprocess.run([str(venv / "bin" / "stackctl"), *args], cwd=outside, capture_output=True, text=True,
                              timeout=300)

    result = stackctl("validate", "cpu-smoke", "atom-lmcache-cpu-nvme")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lmcache-hash-seed" in stackctl("rules").stdout
    render = stackctl("render", "atom-lmcache-cpu", "-o", "bundle")
    assert render.returncode == 0, render.stderr
    assert (outside / "bundle" / "probes" / "probe_image.py").is_file()
    assert "BUILD_WITH_HIP=1" in (outside / "bundle" / "Dockerfile").read_text()
    assert not (outside / "bundle" / "connector").exists()  # ROCm images never carry the CPU connector
    cpu = stackctl("render", "cpu-lmcache", "-o", "cpu-bundle")
    assert cpu.returncode == 0, cpu.stderr
    connector = outside / "cpu-bundle" / "connector"
    assert (connector / "stackctl_lmcache_cpu.pth").read_bytes() == (REPO / "connector" / "stackctl_lmcache_cpu.pth").read_bytes()
    assert (connector / "stackctl_lmcache_cpu" / "kvcopy.c").read_bytes() == \
        (REPO / "connector" / "stackctl_lmcache_cpu" / "kvcopy.c").read_bytes()
    listing = subprocess.run([str(venv / "bin" / "python"), "-c", "from stackctl.resources import shipped; "
                              "print(sorted(p.name for p in shipped('playbooks').iterdir()))"],
                             cwd=outside, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and "rollout.yml" in listing.stdout, listing.stdout + listing.stderr
