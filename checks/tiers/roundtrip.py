"""LMCache's own storage round trip, once per KV tier, inside the stack's image: `stackctl doctor` (image.tiers).

For each tier named on the command line, runs `python -m MODULE --mode MODE` (LMCache's basic check: put N chunks,
check they exist, read them back, compare contents) with that tier's config file, in its own process group, and
prints one JSON object per tier. Standard library only; stackctl judges the facts.

Pitfalls of the check tool this handles: it exits 0 on failure (the EXISTS and content columns tell the truth, not
the PUT column); an S3 run hangs in close (the process group is killed once the result table is printed); an
unwritable disk path can hang (a timeout). Files a disk or fs tier wrote are counted, then removed.
"""

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

ROW = re.compile(r"^\|\s*(?P<op>[A-Z][A-Za-z ()-]*?)\s*\|\s*(?P<avg>[\d.]+)\s*\|\s*[\d.]+\s*\|\s*[\d.]+\s*\|"
                 r"\s*(?P<passed>\d+)/(?P<total>\d+)\s*\|")
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def run_tier(spec, args):
    # Unbuffered: the result table must reach the pipe before close() hangs and the process group is killed.
    env = dict(os.environ, LMCACHE_CONFIG_FILE=spec["config"], PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", args.module, "--mode", args.mode, "--model", spec["model"],
               "--num-keys", str(args.num_keys), "--obj-size", str(spec.get("obj_size") or args.obj_size)]
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    lines, rows, timed_out = [], {}, False
    deadline = started + args.timeout
    buffer = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([process.stdout], [], [], min(remaining, 1.0))
        if not ready:
            if process.poll() is not None:
                break
            continue
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            line = re.sub(r"\x1b\[[0-9;]*m", "", raw.decode("utf-8", "replace"))
            lines.append(line)
            match = ROW.match(line)
            if match:
                rows[match["op"].strip()] = {"avg_ms": float(match["avg"]), "passed": int(match["passed"]),
                                             "total": int(match["total"])}
        if "GET" in rows:  # the table is complete: what follows is close(), which may hang (S3)
            break
    elapsed = time.monotonic() - started
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    result = {"tier": spec["tier"], "rows": rows, "timed_out": timed_out, "seconds": round(elapsed, 2),
              "log_tail": [line for line in lines if line.strip()][-40:]}
    if spec.get("path"):
        result.update(_inspect_and_clean(spec["path"], spec["model"]))
    return result


def _inspect_and_clean(path, model):
    """Count the files this run wrote under the tier's path (their names carry the run's model name), remove them,
    and report free space (a full disk makes LMCache drop writes without a word)."""
    found, removed = [], 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if model in name or model in root:
                full = os.path.join(root, name)
                found.append(full)
                try:
                    os.remove(full)
                    removed += 1
                except OSError:
                    pass
    for root, dirs, _files in os.walk(path, topdown=False):  # empty directories the run created
        for name in dirs:
            if model in name:
                try:
                    os.rmdir(os.path.join(root, name))
                except OSError:
                    pass
    facts = {"files_seen": len(found), "files_removed": removed, "writable": os.access(path, os.W_OK)}
    try:
        stat = os.statvfs(path)
        facts["free_bytes"] = stat.f_bavail * stat.f_frsize
        facts["read_only"] = bool(stat.f_flag & os.ST_RDONLY)
    except OSError as exc:
        facts["stat_error"] = str(exc)
    return facts


def trust_s3_ca():
    """The S3 tier's CA (STACKCTL_S3_CA, mounted by stackctl), trusted the way the stack's serve.sh does it: the
    image's bundle and the CA joined, SSL_CERT_FILE pointing at the result (LMCache's S3 client reads it)."""
    ca = os.environ.get("STACKCTL_S3_CA")
    if not ca:
        return
    bundle = "/tmp/stackctl-ca-bundle.pem"
    with open(bundle, "w") as out:
        if os.access(SYSTEM_BUNDLE, os.R_OK):
            with open(SYSTEM_BUNDLE) as system:
                out.write(system.read())
        with open(ca) as extra:
            out.write(extra.read())
    os.environ["SSL_CERT_FILE"] = bundle


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="JSON list of {tier, config, model, path?, obj_size?}")
    parser.add_argument("--module", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--num-keys", type=int, default=5)
    parser.add_argument("--obj-size", type=int, default=32768)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    trust_s3_ca()
    for spec in json.load(open(args.spec)):
        print(json.dumps(run_tier(spec, args)), flush=True)


if __name__ == "__main__":
    main()
