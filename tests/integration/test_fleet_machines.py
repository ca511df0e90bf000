"""`stackctl fleet rollout` for real: hosts that are machines (tests/integration/machine_hosts.py: each its own Docker
engine, network namespace and address, sshd on port 22), the cpu-smoke stack started on each, gated, rolled back
and rolled forward, reached over HTTP at each host's own address on the same port.

The image is built once on this machine (the controller) and shipped; the hosts cannot build it (no route to a
package index) and `stackctl up --image-id` there refuses any other image. The tests share two hosts and run in
order: each starts from the fleet the one before left (a vLLM start and a 4 GB image load per host are the cost).
Two hosts take the rollouts; a third joins through a registry (Debian's docker-registry, TLS and a password).
"""

from __future__ import annotations

import json
import secrets
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

PORT = 8000
# The fleet's recipe: cpu-smoke, its server bound to every address of its host (each host is a network namespace of
# its own: only this machine reaches it), so the controller can ask it over HTTP as a load balancer would.
FLEET = {"port = 8000": 'port = 8000\nhost = "0.0.0.0"'}
# Version 2: a runtime change (the image stays; the recipe hash and the container change).
VERSION_2 = {**FLEET, "max_num_batched_tokens = 4096": "max_num_batched_tokens = 2048"}
# Version 2 on another port, which a process on machine-1 holds: the new server there cannot serve.
PORT_TAKEN = {"port = 8000": 'port = 8001\nhost = "0.0.0.0"'}


@pytest.fixture(scope="module")
def machines(tmp_path_factory, smoke_image):
    """Two machine hosts for the module (the cpu-smoke image built on the controller: the rollouts find it current)."""
    reason = fleet_unavailable()
    if reason:
        pytest.fail(reason)
    ensure_image()
    key = make_key(tmp_path_factory.mktemp("ssh"))
    hosts = MachineHosts(3, key, tmp_path_factory.mktemp("machines"))
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
    return {"inventory": machines.inventory(folder / "hosts.ini", hosts=machines.hosts[:2]),
            "wheelhouse": build_wheelhouse(folder / "wheels"), "folder": folder, "env": env}


def rollout(fleet, recipe, *args, inventory=None, env=None):
    return run_cli("fleet", "rollout", str(recipe), "-i", str(inventory or fleet["inventory"]), "--wheelhouse",
                   str(fleet["wheelhouse"]), *args, env=env or fleet["env"], timeout=2400)


def served_hash(machines, host: str) -> str | None:
    """The recipe hash the host's rollout record names, read on the host."""
    result = machines.ssh(host, "cat /opt/stackctl/rollout.json")
    return json.loads(result.stdout)["recipe_hash"] if result.returncode == 0 else None


def answers(machines, host: str, port: int = PORT) -> bool:
    """One completion from the host's server, at the host's own address."""
    body = json.dumps({"model": "tiny", "prompt": "w1 w2 w3", "max_tokens": 1}).encode()
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
    recipe = variant(tmp_path, "fleet", FLEET)
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
        assert [line for line in machines.inner_containers(host) if line.startswith("stackctl-cpu-smoke ")], host
    # Each phase timed: the controller's, then each host's.
    phases = summary["phases"]
    assert set(phases) == {"build", "save"}, phases
    for host in summary["hosts"]:
        assert set(host["phase_seconds"]) == {"ship", "up", "gate"}, host
        assert host["phase_seconds"]["ship"] > 0 and host["phase_seconds"]["up"] > 0, host


def test_a_second_rollout_of_the_same_recipe_changes_nothing_and_says_so(machines, fleet, tmp_path):
    recipe = variant(tmp_path, "fleet", FLEET)
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
    holder = machines.ssh(first, "nohup python3 -m http.server 8001 --bind 0.0.0.0 >/dev/null 2>&1 & echo $!")
    try:
        recipe = variant(tmp_path, "fleet", PORT_TAKEN)
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
    recipe = variant(tmp_path, "fleet", VERSION_2)
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
        recipe = variant(tmp_path, "fleet", FLEET)
        result = rollout(fleet, recipe, "--registry", "10.213.0.1:5000", "--format", "json", inventory=inventory,
                         env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        summary = json.loads(result.stdout)
        image = summary["images"][host]
        assert image["reference"].startswith("10.213.0.1:5000/stackctl/cpu-smoke@sha256:"), image
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
