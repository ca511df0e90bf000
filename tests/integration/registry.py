"""A real image registry for the fleet tests: Debian's docker-registry (the CNCF distribution registry) on this machine
(the controller), at 10.213.0.1:5000 (an address of this machine's loopback interface), with TLS from a CA made for the run and htpasswd
authentication, as a site's private registry is. The machine hosts reach it through their veth pair
(machine_hosts.py routes 10.213.0.0/24 to this machine); the controller's engine and each host's engine trust the CA
through /etc/docker/certs.d (read at each pull and push, no engine restart)."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ADDRESS = "10.213.0.1"
PORT = 5000
HOST = f"{ADDRESS}:{PORT}"
CERTS_D = Path("/etc/docker/certs.d") / HOST


def unavailable() -> str | None:
    if shutil.which("docker-registry") is None:
        return "docker-registry not found (apt-get install docker-registry)"
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        return "bcrypt not installed (pip install bcrypt): the registry's htpasswd file needs it"
    return None


class Registry:
    def __init__(self, folder: Path, user: str, password: str):
        self.folder = Path(folder)
        self.user, self.password = user, password
        self.process: subprocess.Popen | None = None

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def start(self) -> Registry:
        try:
            self._certificates()
            self._htpasswd()
            # On loopback: this kernel has no dummy interfaces, and a local address answers packets from any link.
            subprocess.run(["ip", "addr", "del", f"{ADDRESS}/32", "dev", "lo"], capture_output=True)
            subprocess.run(["ip", "addr", "add", f"{ADDRESS}/32", "dev", "lo"], check=True)
            CERTS_D.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.ca, CERTS_D / "ca.crt")
            config = self.folder / "config.yml"
            config.write_text(f"""version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {self.folder / 'storage'}
http:
  addr: {HOST}
  tls:
    certificate: {self.folder / 'registry.crt'}
    key: {self.folder / 'registry.key'}
auth:
  htpasswd:
    realm: stackctl-test
    path: {self.folder / 'htpasswd'}
""")
            log = open(self.folder / "registry.log", "wb")  # noqa: SIM115 - the process writes it until stop()
            self.process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _certificates(self) -> None:
        """A CA for the run and the registry's certificate for its address, signed by it."""
        f = self.folder
        f.mkdir(parents=True, exist_ok=True)
        quiet = {"check": True, "capture_output": True}
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=stackctl test CA", "-keyout", str(f / "ca.key"), "-out", str(self.ca)], **quiet)
        subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ADDRESS}",
                        "-keyout", str(f / "registry.key"), "-out", str(f / "registry.csr")], **quiet)
        (f / "san.ext").write_text(f"subjectAltName=IP:{ADDRESS}\n")
        subprocess.run(["openssl", "x509", "-req", "-in", str(f / "registry.csr"), "-CA", str(self.ca), "-CAkey",
                        str(f / "ca.key"), "-CAcreateserial", "-days", "2", "-extfile", str(f / "san.ext"),
                        "-out", str(f / "registry.crt")], **quiet)

    def _htpasswd(self) -> None:
        import bcrypt

        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt()).decode()
        (self.folder / "htpasswd").write_text(f"{self.user}:{hashed}\n")

    def _wait_ready(self, timeout: float = 30) -> None:
        """The registry answers /v2/ over TLS with the CA, and asks for credentials (401)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"https://{HOST}/v2/", context=context, timeout=2)
            except urllib.error.HTTPError as answer:
                if answer.code == 401:
                    return
            except OSError:
                pass
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"the registry did not answer at {HOST}: "
                           f"{(self.folder / 'registry.log').read_text()[-2000:]}")

    def trust_on(self, container: str) -> None:
        """The CA in a machine host's /etc/docker/certs.d (a site's CA is installed on its hosts)."""
        subprocess.run(["docker", "exec", container, "mkdir", "-p", str(CERTS_D)], check=True)
        subprocess.run(["docker", "cp", str(self.ca), f"{container}:{CERTS_D / 'ca.crt'}"], check=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        subprocess.run(["ip", "addr", "del", f"{ADDRESS}/32", "dev", "lo"], capture_output=True)
        shutil.rmtree(CERTS_D, ignore_errors=True)
        shutil.rmtree(self.folder / "storage", ignore_errors=True)
