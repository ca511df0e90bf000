"""Fleet test hosts that are machines: each a container of stackctl-test-fleet-host (scripts/make-fleet-host-image.sh)
with its own Docker engine (data root on a host directory), its own network namespace and sshd on port 22 of its
own address. The namespace is reached over a veth pair: host N is 10.213.N.2, this machine's end 10.213.N.1, so
every host serves the same port, as in a real fleet, and nothing but this machine reaches it. A host's one route
out leads to 10.213.0.0/24 on this machine (a registry of the tests', registry.py), nowhere else. Containers are named stackctl-fleet-machine-N; `remove()` takes the containers, the veth pairs
(they go with the namespace) and the engines' data away."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from fleet_hosts import write_inventory
from helpers import REPO

IMAGE = "stackctl-test-fleet-host:latest"
NAME = "stackctl-fleet-machine-{}"
# Every capability but CAP_SYS_RESOURCE, which this machine's root lacks (so --privileged fails here), no seccomp
# or AppArmor profile, and a cgroup namespace of its own: what a Docker engine inside needs.
ENGINE_OPTIONS = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
                  "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
                  "--cgroupns", "private", "--network", "none",
                  # /dev/shm as a machine has it (half its RAM), not a container's 64 MiB: vLLM's engine needs 160 MiB
                  "--shm-size", "4g"]


def ensure_image() -> None:
    """Build the fleet host image when it is missing or its inputs changed (the script decides)."""
    result = subprocess.run(["bash", str(REPO / "scripts" / "make-fleet-host-image.sh")], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f"make-fleet-host-image.sh failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")


def address(number: int) -> str:
    return f"10.213.{number}.2"


def _run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kwargs)


class MachineHosts:
    """N machine hosts (numbered from `first`); `inventory()` writes an INI inventory for them."""

    def __init__(self, count: int, key: Path, data_dir: Path, first: int = 1, mounts: tuple[str, ...] = (),
                 engine_disk: str | None = None):
        self.key = Path(key)
        self.mounts = mounts  # docker -v specs on every host: a directory they share, as an NFS mount is
        self.engine_disk = engine_disk  # a size ("256m"): the engines' data on a tmpfs that small, a disk nearly full
        self.data_dir = Path(data_dir)
        self.numbers = {f"machine-{n}": n for n in range(first, first + count)}
        self.hosts = list(self.numbers)
        self.containers = {host: NAME.format(n) for host, n in self.numbers.items()}

    def __enter__(self) -> MachineHosts:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def address(self, host: str) -> str:
        return address(self.numbers[host])

    def start(self) -> None:
        public_key = self.key.with_suffix(".pub").read_text()
        try:
            for host, number in self.numbers.items():
                self._start_one(host, number, public_key)
            for host in self.hosts:
                self._wait_ready(host)
        except BaseException:
            self.remove()
            raise

    def _start_one(self, host: str, number: int, public_key: str) -> None:
        name = self.containers[host]
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)  # left by an interrupted run
        subprocess.run(["ip", "link", "del", f"sfm{number}"], capture_output=True)
        engine_data = self.data_dir / host / "docker"
        engine_data.mkdir(parents=True, exist_ok=True)
        engine_root = (["--mount", f"type=tmpfs,destination=/var/lib/docker,tmpfs-size={self.engine_disk}"]
                       if self.engine_disk else ["-v", f"{engine_data}:/var/lib/docker"])
        _run("docker", "run", "-d", "--name", name, "--hostname", host, *ENGINE_OPTIONS, *engine_root,
             *[arg for spec in self.mounts for arg in ("-v", spec)], IMAGE)
        pid = _run("docker", "inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
        outside, inside = f"sfm{number}", f"sfm{number}i"
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", pid)
        for command in (["ip", "link", "set", inside, "name", "eth0"],
                        ["ip", "addr", "add", f"{address(number)}/24", "dev", "eth0"],
                        ["ip", "link", "set", "eth0", "up"], ["ip", "link", "set", "lo", "up"],
                        # the controller's services (a registry: registry.py) and nothing else
                        ["ip", "route", "add", "10.213.0.0/24", "via", f"10.213.{number}.1", "dev", "eth0"]):
            _run("nsenter", "-t", pid, "-n", *command)
        _run("ip", "addr", "add", f"10.213.{number}.1/24", "dev", outside)
        _run("ip", "link", "set", outside, "up")
        _run("docker", "exec", "-i", name, "sh", "-c",
             "cat > /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys", input=public_key)

    def _wait_ready(self, host: str, timeout: float = 90) -> None:
        """sshd takes the key, and the host's own engine answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _sshd_banner(self.address(host)) and self.ssh(host, "docker info --format '{{.Driver}}'").returncode == 0:
                return
            time.sleep(0.5)
        log = subprocess.run(["docker", "exec", self.containers[host], "tail", "-20", "/var/log/dockerd.log"],
                             capture_output=True, text=True).stdout
        raise RuntimeError(f"{self.containers[host]}: sshd or its Docker engine not ready within {timeout:.0f} s:\n{log}")

    def ssh(self, host: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a command on a host over real SSH, at its own address."""
        return subprocess.run(["ssh", "-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                               f"root@{self.address(host)}", command],
                              capture_output=True, text=True, timeout=timeout)

    def inventory(self, path: Path, hosts: list[str] | None = None, host_vars: dict | None = None) -> Path:
        """An INI inventory of (some of) the hosts, each at its own address on port 22."""
        addresses = {host: f"ansible_host={self.address(host)} ansible_port=22" for host in hosts or self.hosts}
        return write_inventory(path, addresses, self.key, host_vars)

    def inner_containers(self, host: str) -> list[str]:
        """The containers the host's own engine has (read through docker exec, not the fleet's SSH)."""
        result = subprocess.run(["docker", "exec", self.containers[host], "docker", "ps", "-a", "--format",
                                 "{{.Names}} {{.Status}}"], capture_output=True, text=True)
        return [line for line in result.stdout.splitlines() if line.strip()]

    def remove(self) -> None:
        for host, number in self.numbers.items():
            subprocess.run(["docker", "rm", "-f", "-v", self.containers[host]], capture_output=True)
            subprocess.run(["ip", "link", "del", f"sfm{number}"], capture_output=True)
            shutil.rmtree(self.data_dir / host, ignore_errors=True)


def _sshd_banner(host_address: str) -> bool:
    try:
        with socket.create_connection((host_address, 22), timeout=2) as sock:
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False
