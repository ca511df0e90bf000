"""The KV tier round trip of `stackctl doctor` (image.tiers), inside the stack's image: for every tier, real KV chunks
of the recipe's model go through LMCache's own StorageManager (the API LMCache's check tool drives,
lmcache/v1/check/utils.py) into that tier alone, are found there, read back and compared byte for byte.

Two modes in one file. Without --tier (the driver, standard library only) it runs itself once per tier in a fresh
process group with a timeout, and prints one JSON object per tier; with --tier (the worker) it imports torch and
LMCache, does the round trip of one tier, and prints its JSON result before closing LMCache. stackctl judges the
facts.

Why the worker waits after each put: LMCache stores asynchronously. The local_disk backend registers a put task,
hands the file write to its thread pool and publishes the key (what `contains` reads, :226-229) only when the
write is done (LMCache 0.5.6 lmcache/v1/storage_backend/local_disk_backend.py:333-438 submit_put_task, :676-716
async_save_bytes_to_disk: write_file, then insert_key, then remove_put_task); remote backends keep their own put
tasks (remote_backend.py:209-215, :248-254). LMCache's check tool, after each put, waits only for a RemoteBackend
(lmcache/v1/check/check_mode_test_storage_manager.py:44-47; utils.py:156-186 find_remote_backend,
wait_put_tasks_complete), so a disk chunk asked for right after its put may not be written yet: `EXISTS (exist)
4/5` on a healthy disk. Here every put waits until no backend
still has that key in flight (`exists_in_put_tasks`, every backend implements it: abstract_backend.py:62-67), and
the put time includes the write.

Other pitfalls handled: closing an S3 backend can hang (the process group is killed once the result is printed);
an unwritable disk path can hang (the timeout). Files a disk or fs tier wrote are counted, then removed.
"""

import argparse
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
RESULT_MARK = "STACKCTL-TIER-RESULT "
WRITE_WAIT_S = 30.0  # how long one put may stay in flight before it counts as not stored


# -- the driver (standard library only) ---------------------------------------------------------------------------

def run_tier(spec, args):
    """Run the worker for one tier; its result (or why there is none) plus what the tier's path holds."""
    env = dict(os.environ, LMCACHE_CONFIG_FILE=spec["config"], PYTHONUNBUFFERED="1")
    command = [sys.executable, os.path.abspath(__file__), "--spec", args.spec, "--tier", spec["tier"]]
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    lines, result, timed_out, buffer = [], None, False, b""
    deadline = started + args.timeout
    while result is None:
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
            line = raw.decode("utf-8", "replace")
            if line.startswith(RESULT_MARK):
                result = json.loads(line[len(RESULT_MARK):])  # what follows is close(), which may hang (S3)
            else:
                lines.append(line)
    elapsed = time.monotonic() - started
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    report = dict(result or {}, tier=spec["tier"], timed_out=timed_out, seconds=round(elapsed, 2),
                  log_tail=[line for line in lines if line.strip()][-40:])
    if spec.get("path"):
        report.update(inspect_and_clean(spec["path"], spec["model"]))
    return report


def inspect_and_clean(path, model):
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


# -- the worker (torch and LMCache) -------------------------------------------------------------------------------

def round_trip(spec):
    """Put, find, get and compare `spec["keys"]` chunks of the spec's KV shape through LMCache's StorageManager
    configured with this tier alone (LMCACHE_CONFIG_FILE). Returns the counts and per-operation seconds."""
    import torch
    from lmcache.integration.vllm.utils import lmcache_get_or_create_config
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.memory_management import MemoryFormat
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.storage_manager import StorageManager

    chunk = spec["chunk"]
    dtype = getattr(torch, chunk["dtype"])
    mla = chunk["kv_size"] == 1
    # LMCache's layout of one chunk (KV_2LTD, or KV_MLA_FMT for a latent): [kv, layers, tokens, hidden]
    # (lmcache/v1/metadata.py get_shapes); kv_shape is vLLM's order (layers, kv, tokens, heads, head_size).
    metadata = LMCacheMetadata(model_name=spec["model"], world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=dtype,
                               kv_shape=(chunk["layers"], chunk["kv_size"], chunk["tokens"], 1, chunk["hidden"]),
                               use_mla=mla, chunk_size=chunk["tokens"])
    shape = torch.Size([chunk["kv_size"], chunk["layers"], chunk["tokens"], chunk["hidden"]])
    fmt = MemoryFormat.KV_MLA_FMT if mla else MemoryFormat.KV_2LTD
    manager = StorageManager(config=lmcache_get_or_create_config(), metadata=metadata, event_manager=EventManager())
    backends = list(manager.storage_backends.values())
    keys = [CacheEngineKey(spec["model"], 1, 0, int(hashlib.sha256(f"{spec['model']}/{i}".encode()).hexdigest(), 16),
                           dtype) for i in range(spec["keys"])]
    result = {"object_bytes": 0, "keys": len(keys), "absent_before": 0, "stored": 0, "still_in_flight": 0,
              "answered_by": {}, "equal": 0, "get_missing": 0, "put_s": [], "get_s": [], "error": None}
    expected = []
    try:
        result["absent_before"] = sum(manager.contains(key) is None for key in keys)
        generator = torch.Generator().manual_seed(0)
        for key in keys:
            memory = manager.allocate(shape, dtype, fmt=fmt, eviction=True, busy_loop=False)
            if memory is None or memory.tensor is None:
                result["error"] = "LMCache's CPU buffer could not allocate a chunk"
                break
            data = torch.randint(0, 256, (memory.tensor.numel() * memory.tensor.element_size(),),
                                 dtype=torch.uint8, generator=generator)
            memory.tensor.view(torch.uint8).view(-1).copy_(data)
            expected.append(data)
            result["object_bytes"] = memory.get_physical_size()
            started = time.perf_counter()
            manager.batched_put([key], [memory])  # hands the chunk to every backend; the write may still run
            if not wait_for_write(backends, key, started + WRITE_WAIT_S):
                result["still_in_flight"] += 1
            result["put_s"].append(time.perf_counter() - started)
        for key in keys[:len(expected)]:
            where = manager.contains(key)
            if where is not None:
                result["stored"] += 1
                result["answered_by"][where] = result["answered_by"].get(where, 0) + 1
        for key, want in zip(keys, expected):
            started = time.perf_counter()
            memory = manager.get(key)
            result["get_s"].append(time.perf_counter() - started)
            if memory is None or memory.tensor is None:
                result["get_missing"] += 1
                continue
            # Compared as bytes: random bytes read as bfloat16 hold NaNs, which never compare equal as numbers.
            got = memory.tensor.contiguous().view(torch.uint8).view(-1)
            result["equal"] += bool(memory.tensor.shape == shape and torch.equal(got, want))
            memory.ref_count_down()
    except Exception as exc:  # the cause travels in the result; the driver judges nothing
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result, manager


def wait_for_write(backends, key, deadline):
    """True once no backend has `key` in flight (the asynchronous write finished), False at the deadline."""
    while any(backend.exists_in_put_tasks(key) for backend in backends):
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.0002)
    return True


def worker(spec):
    result, manager = round_trip(spec)
    print(RESULT_MARK + json.dumps(result), flush=True)
    manager.close()  # may hang (S3): the driver kills the process group once it has the result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True,
                        help="JSON list of {tier, config, model, path?, chunk: {layers, kv_size, tokens, hidden, "
                             "dtype}, keys}")
    parser.add_argument("--tier", help="worker mode: the round trip of this tier only")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per tier")
    args = parser.parse_args()
    with open(args.spec) as handle:
        specs = json.load(handle)
    if args.tier:  # the driver has set SSL_CERT_FILE already
        worker(next(spec for spec in specs if spec["tier"] == args.tier))
        return
    trust_s3_ca()
    for spec in specs:
        print(json.dumps(run_tier(spec, args)), flush=True)


if __name__ == "__main__":
    main()
