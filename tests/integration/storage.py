"""The real storage behind the tier tests: Ceph RGW (scripts/start-ceph-rgw.sh) and the tier directories that
recipes/cpu-tiers.toml names."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from helpers import REPO

CEPH_DIR = Path("/tmp/stackctl-ceph")
SCRIPT = REPO / "scripts" / "start-ceph-rgw.sh"
TIER_ROOT = Path("/tmp/stackctl-tiers")


def ceph_running() -> bool:
    return subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0


def start_ceph_rgw() -> tuple[bool, dict]:
    """(whether this call started it, the settings in s3.env)."""
    already = ceph_running()
    if not already:
        if shutil.which("radosgw") is None:
            raise RuntimeError("radosgw not installed (run scripts/setup.sh)")
        started = time.monotonic()
        subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=300)
        print(f"Ceph RGW started in {time.monotonic() - started:.1f} s")
    settings = dict(line.split("=", 1) for line in (CEPH_DIR / "s3.env").read_text().split())
    return not already, settings


def stop_ceph_rgw() -> None:
    subprocess.run(["bash", str(SCRIPT), "stop"], check=True, timeout=120)


def make_tier_dirs() -> None:
    for name in ("disk", "fs"):
        (TIER_ROOT / name).mkdir(parents=True, exist_ok=True)


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]
