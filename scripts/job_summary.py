"""The closing summary of the main job (scripts/smoke.sh), after its phase table: what it leaves running, where, how
to stop each, the figures it measured, where the full output is, and how to reach `stackctl`. Standard library only;
it asks the running things themselves (`stackctl status RECIPE --format json`, `scripts/start-ceph-rgw.sh status`)
and reads bench's probe.json and doctor's tables as the job printed them."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARM_NAMES = {"recompute": "recompute", "hbm": "vLLM prefix cache (HBM)", "lmcache": "LMCache"}
TIER_KINDS = ("cpu", "disk", "fs", "s3")
DOCTOR_COUNTS = re.compile(r"^\d+ passed, \d+ failed, \d+ warnings, \d+ skipped")


def stack_lines(recipe: str, stackctl: str) -> list[str]:
    """One line for the stack of a recipe the job brought up: its state where it serves, and how to stop it."""
    stop = f"stop: stackctl down {recipe}"
    try:
        rows = json.loads(subprocess.run([stackctl, "status", recipe, "--format", "json"], capture_output=True,
                                         text=True, timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return [f"  stack from {recipe}: state unknown ({type(exc).__name__}); {stop}"]
    lines = []
    for row in rows:
        where = f"http://{row['host']}:{row['port']}" if row.get("port") else "no port"
        lines.append(f"  stack {row['stack']}: {row['state']}, {row.get('health') or 'no health check'}, at {where} "
                     f"(OpenAI API, model list at {where}/v1/models); {stop}")
    return lines or [f"  stack from {recipe}: not running (its up failed; `stackctl status {recipe}` says why)"]


def ceph_lines() -> list[str]:
    result = subprocess.run(["bash", str(REPO / "scripts" / "start-ceph-rgw.sh"), "status"], capture_output=True,
                            text=True, timeout=60)
    return ["  " + line for line in result.stdout.splitlines()]


def probe_lines(label: str, path: Path) -> list[str]:
    """bench --probe's figures: each arm's median TTFT, how much faster than recompute, the hit rate the server
    counted."""
    if not path.is_file():
        return [f"  bench {label}: no result ({path} missing)"]
    probe = json.loads(path.read_text())
    lines = [f"  bench {label} --probe: {probe['prompt_tokens']:,}-token prompts, TTFT median of {probe['runs']}"]
    for arm, figures in probe["arms"].items():
        rate = "-" if figures.get("hit_rate") is None else f"{figures['hit_rate']:.1%}"
        ratio = figures.get("over_recompute")
        faster = f", {1 / ratio:.1f}x faster than recompute" if arm != "recompute" and ratio else ""
        lines.append(f"    {ARM_NAMES.get(arm, arm):<24} {figures['ttft_median_s'] * 1000:7.1f} ms{faster}; "
                     f"server hit rate {rate}")
    return lines


LIVE_LMCACHE = ("server.lmcache-hit", "server.lmcache-hit-correct", "server.tier-served", "server.hash-seed-proof")


def doctor_lines(label: str, path: Path) -> list[str]:
    """doctor's closing count, the tier round trip's figures (one line per tier) when it ran, and the live LMCache
    checks' lines."""
    text = path.read_text() if path.is_file() else ""
    counts = [line for line in text.splitlines() if DOCTOR_COUNTS.match(line)]
    lines = [f"  doctor {label}: {counts[-1] if counts else 'no result'}"]
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] == "image.tiers" and parts[0] != "skip":
            head, _, tiers = parts[2].partition(" per tier: ")
            lines.append(f"    image.tiers {parts[0]}, {head} per tier:")
            lines += [f"      {item}" for item in tiers.split("; ") if item.split(" ")[0] in TIER_KINDS]
        elif len(parts) == 3 and parts[1] in LIVE_LMCACHE:
            lines.append(f"    {parts[1]} {parts[0]}: {parts[2]}")
    return lines


def stackctl_lines(link: str, venv: str, path: str) -> list[str]:
    """The stackctl a person can type next: the link setup.sh made (when its folder is on PATH), else the venv."""
    activate = f"source {Path(venv).resolve()}/bin/activate"
    if link != "none" and os.path.islink(link):
        on_path = str(Path(link).parent) in path.split(os.pathsep)
        where = "" if on_path else f"; {Path(link).parent} is not on this PATH"
        return [f"stackctl: {link} (a link to {os.readlink(link)}{where}); or, in a shell of its own: {activate}"]
    return [f"stackctl: {activate}   (then `stackctl --help`)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", required=True, help="the job's log (installer output)")
    parser.add_argument("--venv", required=True)
    parser.add_argument("--link", default="none", help="the stackctl link setup.sh made, or none")
    parser.add_argument("--stack", action="append", default=[], help="a recipe whose stack the job brought up")
    parser.add_argument("--ceph", action="store_true", help="the job started the Ceph RGW")
    parser.add_argument("--probe", action="append", default=[], help="LABEL=FILE of a bench --probe probe.json")
    parser.add_argument("--doctor", action="append", default=[], help="LABEL=FILE of a doctor table")
    args = parser.parse_args()
    stackctl = str(Path(args.venv) / "bin" / "stackctl")
    lines = ["Running now:"]
    for recipe in args.stack:
        lines += stack_lines(recipe, stackctl)
    if args.ceph:
        lines += ceph_lines()
    if len(lines) == 1:
        lines.append("  nothing (the job stopped before it started anything)")
    measured = []
    for item in args.probe:
        label, _, path = item.partition("=")
        measured += probe_lines(label, Path(path))
    for item in args.doctor:
        label, _, path = item.partition("=")
        measured += doctor_lines(label, Path(path))
    if measured:
        lines += ["Measured:"] + measured
    lines.append(f"Full output (apt, pip, debootstrap, image builds): {args.log}")
    lines += stackctl_lines(args.link, args.venv, os.environ.get("PATH", ""))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
