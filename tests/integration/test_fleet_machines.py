"""`stackctl fleet rollout` for real: hosts that are machines (tests/integration/machine_hosts.py: each its own Docker
engine, network namespace and address, sshd on port 22), the LMCache stack started on each, gated, rolled back
and rolled forward, reached over HTTP at each host's own address on the same port, and its cache shared between
them: a prompt stored through one host is loaded through the other.

The image is built once on this machine (the controller) and shipped; the hosts cannot build it (no route to a
package index) and `stackctl up --image-id` there refuses any other image. The tests share two hosts and run in
order: each starts from the fleet the one before left (a vLLM start and a 5 GB image load per host are the cost).
Two hosts take the rollouts; a third joins through a registry (Debian's docker-registry, TLS and a password). The
hosts share one directory, mounted on each at /shared/kv as an NFS export would be: the LMCache stack's fs tier.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fleet_hosts import build_wheelhouse, fleet_unavailable, make_key
from helpers import run_cli
from machine_hosts import MachineHosts, ensure_image
from registry import Registry
from registry import unavailable as registry_unavailable
from stacks import variant

from stackctl.bundle.stackspec import recipe_hash
from stackctl.recipe import load_recipe

pytestmark = [pytest.mark.docker, pytest.mark.ansible, pytest.mark.slow]

PORT = 8020
# The fleet's recipe: cpu-lmcache, its server bound to every address of its host (each host is a network namespace of
# its own: only this machine reaches it), so the controller can ask it over HTTP as a load balancer would. Its fs
# tier is the directory the hosts share, its CPU tier each host's own; the main job's disk and S3 tiers are this
# machine's, and the hosts have neither.
FLEET = {"port = 8020": 'port = 8020\nhost = "0.0.0.0"',
         '[[cache.tiers]]\nkind = "disk"\npath = "/tmp/stackctl-tiers/disk"\nsize_gb = 1\n\n': "",
         'path = "/tmp/stackctl-tiers/fs"': 'path = "/shared/kv"',
         '[[cache.tiers]]\nkind = "s3"\nurl = "s3://stackctl-kv.rgw.stackctl.test:17443"\nregion = "us-east-1"\n'
         'ca_file = "/tmp/stackctl-ceph/tls/ca.pem"\naccess_key_env = "STACKCTL_S3_ACCESS_KEY"\n'
         'secret_key_env = "STACKCTL_S3_SECRET_KEY"\n\n': ""}
# Version 2: a runtime change (the image stays; the recipe hash and the container change).
VERSION_2 = {**FLEET, "max_num_batched_tokens = 4096": "max_num_batched_tokens = 2048"}
# Version 2 on another port, which a process on machine-1 holds: the new server there cannot serve.
PORT_TAKEN = {**FLEET, "port = 8020": 'port = 8021\nhost = "0.0.0.0"'}


def fleet_recipe(folder: Path, replacements: dict) -> Path:
    return variant(folder, "fleet", replacements, base="cpu-lmcache.toml")


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """Three machine hosts for the module, sharing one directory at /shared/kv (the fs tier's)."""
    reason = fleet_unavailable()
    if reason:
        pytest.fail(reason)
    ensure_image()
    key = make_key(tmp_path_factory.mktemp("ssh"))
    shared = tmp_path_factory.mktemp("shared-kv")
    hosts = MachineHosts(3, key, tmp_path_factory.mktemp("machines"), mounts=(f"{shared}:/shared/kv",))
    hosts.shared = shared
    hosts.start()
    try:
        yield hosts
    finally:
        hosts.remove()
    assert not [name for name in _outer_containers() if name.startswith("stackctl-fleet-machine-")]


@pytest.fixture(scope="module")
def fleet(machines, tmp_path_factory, stack_env):
    """What every rollout of the module shares: an inventory, a wheelhouse, a state dir on the controller."""
    folder = tmp_path_factory.mktemp("fleet")
    env = dict(stack_env, STACKCTL_STATE_DIR=str(folder / "state"))
    yield {"inventory": machines.inventory(folder / "hosts.ini", hosts=machines.hosts[:2]),
           "wheelhouse": build_wheelhouse(folder / "wheels"), "folder": folder, "env": env}
    shutil.rmtree(folder, ignore_errors=True)  # the image archives: 5 GB each, for the rest of the run otherwise


def rollout(fleet, recipe, *args, inventory=None, env=None):
    return run_cli("fleet", "rollout", str(recipe), "-i", str(inventory or fleet["inventory"]), "--wheelhouse",
                   str(fleet["wheelhouse"]), *args, env=env or fleet["env"], timeout=2400)


def served_hash(machines, host: str) -> str | None:
    """The recipe hash the host's rollout record names, read on the host."""
    result = machines.ssh(host, "cat /opt/stackctl/rollout.json")
    return json.loads(result.stdout)["recipe_hash"] if result.returncode == 0 else None


def answers(machines, host: str, port: int = PORT) -> bool:
    """One completion from the host's server, at the host's own address."""
    body = json.dumps({"model": "bench", "prompt": "w1 w2 w3", "max_tokens": 1}).encode()
    request = urllib.request.Request(f"http://{machines.address(host)}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200 and bool(json.loads(response.read())["choices"])
    except OSError:
        return False


def image_id_on(machines, host: str, tag: str) -> str:
    return machines.ssh(host, f"docker image inspect --format '{{{{.Id}}}}' {tag}").stdout.strip()


def _outer_containers() -> list[str]:
    import subprocess

    return subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                          text=True).stdout.split()


def test_rollout_builds_once_ships_the_image_and_every_host_serves_it(machines, fleet, tmp_path):
    recipe = fleet_recipe(tmp_path, FLEET)
    result = rollout(fleet, recipe, "--batch", "2", "--format", "json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    summary = json.loads(result.stdout)
    images = summary["images"]
    assert len({i["id"] for i in images.values()}) == 1, images
    image = images[machines.hosts[0]]
    # Built once on the controller, saved once, loaded on each host: the hosts run the controller's bytes.
    assert result.stderr.count(f"ship: docker save {image['tag']}") <= 1
    assert "built once, shipped by docker save/load" in result.stderr
    assert set(images) == set(machines.hosts[:2])
    for host in machines.hosts[:2]:
        assert image_id_on(machines, host, image["tag"]) == image["id"], host
        assert served_hash(machines, host) == recipe_hash(load_recipe(recipe)), host
        assert answers(machines, host), host  # the same port on every host, each at its own address
        assert [line for line in machines.inner_containers(host) if line.startswith("stackctl-cpu-lmcache ")], host
    # Each phase timed: the controller's, then each host's.
    phases = summary["phases"]
    assert set(phases) == {"build", "save"}, phases
    for host in summary["hosts"]:
        assert set(host["phase_seconds"]) == {"ship", "up", "gate"}, host
        assert host["phase_seconds"]["ship"] > 0 and host["phase_seconds"]["up"] > 0, host


def test_a_second_rollout_of_the_same_recipe_changes_nothing_and_says_so(machines, fleet, tmp_path):
    recipe = fleet_recipe(tmp_path, FLEET)
    result = rollout(fleet, recipe, "--batch", "2", "--format", "json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for task in ("Copy the image archive", "Load the image archive", "Run stackctl up"):
        assert f"changed      {task}" not in result.stderr, task
    for host in json.loads(result.stdout)["hosts"]:
        assert "ship" not in host["phase_seconds"], host  # the image was there: nothing shipped
        assert host["result"] == "unchanged" or host["status"] == "ok", host
    for host in machines.hosts[:2]:
        assert answers(machines, host), host


def test_up_on_a_host_refuses_an_image_that_is_not_the_plans(machines):
    host = machines.hosts[0]
    wrong = "sha256:" + "0" * 64
    result = machines.ssh(host, f"/opt/stackctl/venv/bin/stackctl up /opt/stackctl/recipes/fleet.toml "
                                f"--image-id {wrong}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"not the plan's {wrong}: refusing to start an image nobody tested" in result.stderr
    assert answers(machines, host)  # the running stack was not touched


def test_a_host_failing_its_rollout_is_rolled_back_and_the_hosts_not_reached_keep_the_old_version(
        machines, fleet, tmp_path):
    first, second = machines.hosts[:2]
    old = served_hash(machines, first)
    holder = machines.ssh(first, "nohup python3 -m http.server 8021 --bind 0.0.0.0 >/dev/null 2>&1 & echo $!")
    try:
        recipe = fleet_recipe(tmp_path, PORT_TAKEN)
        result = rollout(fleet, recipe, "--batch", "1", "--rollback-on-fail")
    finally:
        machines.ssh(first, f"kill {holder.stdout.strip()}")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-6000:]
    assert f"{first:<20} rolled back" in result.stderr
    assert "not touched: the rollout stopped before its batch" in result.stdout
    for host in (first, second):
        assert served_hash(machines, host) == old, host
        assert answers(machines, host), host  # the previous stack serves again, over HTTP


def test_a_new_version_rolls_batch_by_batch_while_the_other_host_keeps_serving(machines, fleet, tmp_path):
    recipe = fleet_recipe(tmp_path, VERSION_2)
    rounds: list[dict[str, bool]] = []
    stop = threading.Event()

    def ask_both() -> None:  # bounded: one round a second, for at most the rollout's time limit
        deadline = time.monotonic() + 2400
        while not stop.is_set() and time.monotonic() < deadline:
            rounds.append({host: answers(machines, host) for host in machines.hosts[:2]})
            stop.wait(1.0)

    asker = threading.Thread(target=ask_both, daemon=True)
    asker.start()
    try:
        result = rollout(fleet, recipe, "--batch", "1")
    finally:
        stop.set()
        asker.join(30)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    failed = {host: sum(1 for r in rounds if not r[host]) for host in machines.hosts[:2]}
    print(f"requests during the rollout: {len(rounds)} rounds; failed per host: {failed}")
    assert rounds and all(any(r.values()) for r in rounds), failed  # never both down at once
    for host in machines.hosts[:2]:
        assert served_hash(machines, host) == recipe_hash(load_recipe(recipe)), host
        assert answers(machines, host), host


def complete(machines, host: str, prompt: str, port: int = PORT) -> str:
    """The server's greedy answer to PROMPT (the LMCache stack's model: `bench`)."""
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": 8, "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{machines.address(host)}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())["choices"][0]["text"]


def lmcache_activity(machines, host: str):
    """LMCache's own account of the host's server so far (its log, read on the host), parsed as doctor parses it."""
    from stackctl.doctor.parsers.lmcache_log import activity

    return activity(machines.ssh(host, "docker logs stackctl-cpu-lmcache 2>&1").stdout)


def new_file_sizes(folder: Path, old: set) -> dict:
    sizes = {}
    for path in set(folder.iterdir()) - old:
        try:
            sizes[path] = path.stat().st_size
        except FileNotFoundError:  # a writer's temporary file, renamed meanwhile
            pass
    return sizes


def test_a_prompt_stored_through_one_host_is_loaded_through_the_other(machines, fleet, tmp_path):
    """The cache across the fleet: cpu-lmcache on both hosts, its fs tier the directory they share. A prompt sent to
    machine-1 is stored there; the same prompt sent to machine-2 is LMCache's hit on machine-2 (its own log counts
    the tokens loaded) and the same answer. That hit is the hash seed proven across the fleet: each server hashes a
    chunk with its own PYTHONHASHSEED, so a second host finds the first one's chunks only when both seeds agree."""
    first, second = machines.hosts[:2]
    prompt = " ".join(f"w{secrets.randbelow(10_000)}" for _ in range(700))
    before = {host: lmcache_activity(machines, host) for host in (first, second)}
    files_before = set(machines.shared.iterdir())
    stored_answer = complete(machines, first, prompt)
    # The fs tier is written behind the answer, a file per 128-token chunk: wait for machine-1's log to count the
    # chunks stored and for that many new files whose sizes held still for a second.
    deadline, sizes, stored = time.monotonic() + 120, None, 0
    while time.monotonic() < deadline:
        stored = lmcache_activity(machines, first).stored_tokens - before[first].stored_tokens
        now = new_file_sizes(machines.shared, files_before)
        if stored >= 512 and len(now) >= stored // 128 and now == sizes:
            break
        sizes = now
        time.sleep(1)
    assert stored >= 512 and len(sizes or {}) >= stored // 128, (stored, sizes)
    loaded_answer = complete(machines, second, prompt)
    on_second = lmcache_activity(machines, second)
    loaded = on_second.retrieved_tokens - before[second].retrieved_tokens
    print(f"machine-1 stored {stored} tokens; machine-2 loaded {loaded} of them from the shared fs tier")
    # Every chunk machine-1 stored, but the last when the prompt ends on a chunk's edge (its last token is computed).
    assert stored - 128 <= loaded <= stored and on_second.hit_tokens >= loaded, (loaded, on_second.to_dict())
    assert loaded_answer == stored_answer


def test_fleet_doctor_reads_each_servers_dtype_and_the_hosts_sharing_the_fs_tier_agree(machines, fleet, tmp_path):
    """LMCache's chunk keys carry the KV dtype: hosts sharing a tier hit each other's chunks only when their servers
    compute in one dtype, which identical recipes do not ensure (model.dtype = "auto" is each CPU's own choice). Fleet
    doctor reads each live server's dtype and compares the hosts of each shared tier; here they agree."""
    recipe = fleet_recipe(tmp_path, VERSION_2)  # what the hosts serve since the batch-by-batch rollout
    result = run_cli("fleet", "doctor", str(recipe), "-i", str(fleet["inventory"]), "--scope", "server", "--format",
                     "json", env=fleet["env"], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout)
    served = {host["host"]: host["served_dtype"] for host in summary["hosts"]}
    assert set(served) == set(machines.hosts[:2]) and len(set(served.values())) == 1, served
    assert None not in served.values(), served  # read from each server's log, not assumed
    assert summary["shared_tier_mismatches"] == [] and summary["shared_tier_notes"] == [], summary


def test_a_host_pulls_the_image_by_digest_from_a_registry_and_no_secret_is_left_behind(machines, fleet, tmp_path):
    """The third host joins through a private registry (TLS from the site's CA, a password): the controller pushes
    once, the host pulls by digest. The password comes from the environment and is found nowhere stackctl writes:
    not in its output, the run folder (ansible-runner's extra variables and its `command` artifact, which holds the
    whole environment: that is how this test first found it there), the records, the inventory or the host's
    stackctl folder."""
    reason = registry_unavailable()
    if reason:
        pytest.fail(reason)
    host = machines.hosts[2]
    password = secrets.token_hex(16)
    registry = Registry(tmp_path / "registry", "fleet", password).start()
    try:
        registry.trust_on(machines.containers[host])
        env = dict(fleet["env"], STACKCTL_REGISTRY_USER="fleet", STACKCTL_REGISTRY_PASSWORD=password)
        inventory = machines.inventory(tmp_path / "joining.ini", hosts=[host])
        recipe = fleet_recipe(tmp_path, FLEET)
        result = rollout(fleet, recipe, "--registry", "10.213.0.1:5000", "--format", "json", inventory=inventory,
                         env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        summary = json.loads(result.stdout)
        image = summary["images"][host]
        assert image["reference"].startswith("10.213.0.1:5000/stackctl/cpu-lmcache@sha256:"), image
        assert image["archive"] is None and "push" in summary["phases"]
        assert image_id_on(machines, host, image["tag"]) == image["id"]
        assert answers(machines, host)
        assert "ship" in summary["hosts"][0]["phase_seconds"]
        # The push's name is gone from the controller's image: `stackctl status` names it by the stack's tag.
        import docker

        assert docker.from_env().images.get(image["tag"]).tags == [image["tag"]]
        # The password: nowhere stackctl wrote or printed.
        assert password not in result.stdout + result.stderr
        written = [path for path in (fleet["folder"] / "state").rglob("*")  # image archives: docker save's bytes
                   if path.is_file() and path.parent.name != "images"]
        assert written and [p for p in written if password.encode() in p.read_bytes()] == []
        assert password not in inventory.read_text()
        assert not list(Path(tempfile.gettempdir()).glob("stackctl-registry-*"))  # the hosts' login file is gone
        assert password not in machines.ssh(host, "cat /opt/stackctl/rollout.json /opt/stackctl/recipes/*").stdout
    finally:
        registry.stop()


def test_a_host_without_room_for_the_image_is_refused_before_anything_is_copied(machines, fleet, tmp_path):
    """A host whose Docker data root cannot hold the image (a 512 MiB disk, the image about 5 GB) is refused with
    the sizes and the fix before the archive is copied: a load that ran out of space would fail half-way and leave
    the host's disk full under whatever it serves."""
    with MachineHosts(1, machines.key, tmp_path / "machines", first=4, mounts=(f"{machines.shared}:/shared/kv",),
                      engine_disk="512m") as small:
        host = small.hosts[0]
        result = rollout(fleet, fleet_recipe(tmp_path, FLEET), "--format", "json",
                         inventory=small.inventory(tmp_path / "small.ini"))
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-6000:]
        image = json.loads(result.stdout)["images"][host]
        [record] = json.loads(result.stdout)["hosts"]
        assert record["failed_task"] == "Check the image fits on the host's disk", record["message"]
        gigabytes = f"{image['size'] / 1e9:.2f} GB"
        assert record["message"].startswith(f"not enough disk for image {image['tag']}: it needs {gigabytes} in "
                                            f"Docker's data root (/var/lib/docker: 0."), record
        assert f"and {gigabytes} more for its archive while it loads" in record["message"], record
        assert record["message"].endswith("; free space on the host, or ship through a registry (--registry "
                                          "HOST:PORT: no archive on the host)"), record
        assert small.ssh(host, "ls -A /opt/stackctl/images 2>/dev/null; docker images -q").stdout.strip() == ""
