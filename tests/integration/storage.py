"""The real storage behind the tier tests: Ceph RGW (scripts/start-ceph-rgw.sh) and the tier directories that
recipes/cpu-tiers.toml names; a second, separate Ceph RGW on 127.0.0.2 (same names, ports, bucket and keys: another
store) for a fleet host that must see a different S3 store under the same endpoint name."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from helpers import REPO

CEPH_DIR = Path("/tmp/stackctl-ceph")
SECOND_CEPH_DIR = Path("/tmp/stackctl-ceph-second")  # short: Ceph's admin sockets live under it
SECOND_CEPH_ADDR = "127.0.0.2"
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
    return not already, _settings(CEPH_DIR)


def stop_ceph_rgw() -> None:
    subprocess.run(["bash", str(SCRIPT), "stop"], check=True, timeout=120)


def _settings(directory: Path) -> dict:
    return dict(line.split("=", 1) for line in (directory / "s3.env").read_text().split())


@contextmanager
def second_ceph_rgw():
    """A second single-node Ceph RGW on 127.0.0.2 (its own directory, monitor, OSD and CA), stopped afterwards,
    always. Yields its s3.env as a dict (STACKCTL_S3_CA_FILE is its own CA)."""
    env = dict(os.environ, STACKCTL_CEPH_DIR=str(SECOND_CEPH_DIR), STACKCTL_CEPH_ADDR=SECOND_CEPH_ADDR)
    try:
        started = time.monotonic()
        subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=300, env=env)
        print(f"second Ceph RGW ({SECOND_CEPH_ADDR}) started in {time.monotonic() - started:.1f} s")
        yield _settings(SECOND_CEPH_DIR)
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=True, timeout=120, env=env)


def bucket_keys(settings: dict, prefix: str = "") -> list[str]:
    """The keys in a test RGW's bucket (plain HTTP, path style: straight to the address the settings name)."""
    import boto3
    from botocore.config import Config

    address = settings.get("STACKCTL_S3_ADDR", "127.0.0.1")
    client = boto3.client("s3", endpoint_url=f"http://{address}:{settings['STACKCTL_S3_HTTP_PORT']}",
                          region_name="us-east-1", aws_access_key_id=settings["STACKCTL_S3_ACCESS_KEY"],
                          aws_secret_access_key=settings["STACKCTL_S3_SECRET_KEY"],
                          config=Config(s3={"addressing_style": "path"}))
    listing = client.list_objects_v2(Bucket=settings["STACKCTL_S3_BUCKET"], Prefix=prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


def make_tier_dirs() -> None:
    """The tier directories, empty: LMCache's disk backend never evicts the chunks an earlier server wrote (it
    counts only its own against size_gb), so a run that kept them would add its own to every run before it."""
    for name in ("disk", "fs"):
        shutil.rmtree(TIER_ROOT / name, ignore_errors=True)
        (TIER_ROOT / name).mkdir(parents=True, exist_ok=True)


def remove_tier_dirs() -> None:
    shutil.rmtree(TIER_ROOT, ignore_errors=True)


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


@contextmanager
def paused_osd(directory: Path = CEPH_DIR):
    """The Ceph RGW's storage daemon paused (SIGSTOP), resumed afterwards, always: the gateway keeps taking
    connections and holds every request that needs the store, as in front of a full cluster."""
    pid = int((directory / "osd.pid").read_text().strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
