"""Real fleet hosts for the fleet tests and benchmark: containers of stackctl-test-sshd (Debian, sshd, python3),
each with host networking and sshd on its own 127.0.0.1 port (2221-2229), reached with real SSH and a key made
for the run. Containers are named stackctl-fleet-host-N and removed by `remove()`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO

IMAGE = "stackctl-test-sshd:latest"
FIRST_PORT, LAST_PORT = 2221, 2229
NAME = "stackctl-fleet-host-{}"


def ansible_unavailable() -> str | None:
    """None when ansible-runner and ansible-playbook are usable, else the reason."""
    try:
        import ansible_runner  # noqa: F401
    except ImportError:
        return "ansible-runner not installed"
    beside = Path(sys.executable).parent / "ansible-playbook"
    if not beside.exists() and shutil.which("ansible-playbook") is None:
        return "ansible-playbook not found (pip install ansible-core)"
    return None


def fleet_unavailable() -> str | None:
    """None when fleet hosts can be made here (Docker engine, base image, ssh, ansible), else the reason."""
    from stacks import docker_available

    reason = ansible_unavailable() or docker_available()
    if reason:
        return reason
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install openssh-client)"
    return None


def ensure_image() -> None:
    """Build stackctl-test-sshd:latest from the local base image when it is missing."""
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0:
        return
    result = subprocess.run(["bash", str(REPO / "scripts" / "make-sshd-image.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"make-sshd-image.sh failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")


def make_key(directory: Path) -> Path:
    """A fresh ed25519 key pair (no passphrase); returns the private key's path."""
    key = Path(directory) / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "stackctl-fleet-test", "-f", str(key)],
                   check=True)
    return key


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _sshd_banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


class FleetHosts:
    """N sshd containers; `inventory()` writes an INI inventory for them."""

    def __init__(self, count: int, key: Path, first_port: int = FIRST_PORT, mounts: dict | None = None):
        """mounts: {host: ["HOST_DIR:CONTAINER_DIR", ...]} bind mounts per host (e.g. a shared tier directory)."""
        self.mounts = mounts or {}
        if first_port < FIRST_PORT or first_port + count - 1 > LAST_PORT:
            raise ValueError(f"fleet test hosts use ports {FIRST_PORT}-{LAST_PORT}")
        self.key = Path(key)
        self.hosts = [f"host-{n}" for n in range(1, count + 1)]
        self.ports = {host: first_port + i for i, host in enumerate(self.hosts)}
        self.containers = {host: NAME.format(i + 1) for i, host in enumerate(self.hosts)}

    def __enter__(self) -> FleetHosts:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def start(self) -> None:
        public_key = self.key.with_suffix(".pub").read_text()
        try:
            for host in self.hosts:
                name, port = self.containers[host], self.ports[host]
                # A container of this name is one an earlier, interrupted run of these tests left behind.
                subprocess.run(["docker", "rm", "-f", name], capture_output=True)
                if not _port_free(port):
                    raise RuntimeError(f"127.0.0.1:{port} is in use: cannot start {name}")
                volumes = [arg for mount in self.mounts.get(host, []) for arg in ("-v", mount)]
                subprocess.run(["docker", "run", "-d", "--name", name, "--network", "host", *volumes, IMAGE,
                                "/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o", "ListenAddress=127.0.0.1"],
                               check=True, capture_output=True)
                subprocess.run(["docker", "exec", "-i", name, "sh", "-c",
                                "cat > /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys"],
                               input=public_key, text=True, check=True, capture_output=True)
            for host in self.hosts:
                self._wait_ready(host)
        except BaseException:
            self.remove()
            raise

    def _wait_ready(self, host: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _sshd_banner(self.ports[host]) and self.ssh(host, "true").returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"sshd of {self.containers[host]} did not accept the key within {timeout:.0f} s")

    def ssh(self, host: str, command: str) -> subprocess.CompletedProcess:
        """Run a command on a host over real SSH."""
        return subprocess.run(["ssh", "-i", str(self.key), "-p", str(self.ports[host]), "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "root@127.0.0.1", command],
                              capture_output=True, text=True, timeout=60)

    def exists(self, host: str, path: str) -> bool:
        """Whether a path exists inside a host (read through docker, not through the fleet's SSH)."""
        result = subprocess.run(["docker", "exec", self.containers[host], "test", "-e", path], capture_output=True)
        return result.returncode == 0

    def read(self, host: str, path: str) -> str:
        return subprocess.run(["docker", "exec", self.containers[host], "cat", path], capture_output=True,
                              text=True, check=True).stdout

    def inventory(self, path: Path, hosts: list[str] | None = None, host_vars: dict | None = None) -> Path:
        """An INI inventory of (some of) the hosts, with per-host variables (e.g. stackctl_recipe)."""
        addresses = {host: f"ansible_host=127.0.0.1 ansible_port={self.ports[host]}" for host in hosts or self.hosts}
        return write_inventory(path, addresses, self.key, host_vars)

    def remove(self) -> None:
        for name in self.containers.values():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def write_inventory(path: Path, addresses: dict[str, str], key: Path, host_vars: dict | None = None) -> Path:
    """An INI inventory: each host with its connection variables (`addresses`) and its own variables, root over SSH
    with the run's key, the hosts' own python3."""
    lines = ["[fleet]"]
    for host, connection in addresses.items():
        extra = "".join(f" {k}={v}" for k, v in (host_vars or {}).get(host, {}).items())
        lines.append(f"{host} {connection}{extra}")
    lines += ["", "[fleet:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={key}",
              "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
              "-o LogLevel=ERROR'",
              "ansible_python_interpreter=/usr/bin/python3", ""]
    Path(path).write_text("\n".join(lines))
    return Path(path)


def build_wheelhouse(directory: Path) -> Path:
    """`pip wheel REPO -w DIR`: the wheelhouse a rollout installs from (pip's cache makes repeats quick)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "-w", str(directory),
                    str(REPO)], check=True, capture_output=True, env=dict(os.environ))
    return Path(directory)
