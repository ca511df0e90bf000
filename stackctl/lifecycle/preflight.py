"""Checks `up` makes before it changes anything: the server's port is free (else which process holds it)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import kind_of


def ensure_ports_free(spec, what: str) -> None:
    """Every port the stack listens on (the server's; the LMCache server's with cache.offload = "lmcache-mp")."""
    for host, port, key in spec.listening_ports:
        ensure_port_free(host, port, what, key)


def ensure_port_free(host: str, port: int, what: str, key: str = "serve.port") -> None:
    """Refuse, naming the holder, when something already listens on the port the server needs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT from a previous server is fine
        try:
            sock.bind((host, port))
            return
        except OSError:
            pass
    holder = port_holder(port)
    raise StackctlError(f"{what}: port {port} on {host} is already in use by {holder} (fix: stop that process, "
                        f"or set {key} to a free port)")


def port_holder(port: int, proc: Path = Path("/proc")) -> str:
    """'pid N (command line)' of the process listening on a TCP port, read from /proc; or why it is unknown."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return "another process (not visible here: another network namespace or user)"
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    command = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    return f"pid {pid_dir.name} ({command.strip()[:120] or '?'})"
        except OSError:  # a process that ended while we looked, or one we may not inspect
            continue
    return "a process this user may not inspect"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def ensure_tier_paths_writable(recipe) -> None:
    """Each disk and fs tier directory exists (or can be made) and takes a file: LMCache would otherwise start,
    fail to write its first chunk, and serve on without the tier."""
    from stackctl.recipe.positions import lookup

    for index, tier in enumerate(recipe.cache.tiers if recipe.cache.enabled else []):
        if not kind_of(tier).host_directory or not tier.path:
            continue
        try:
            Path(tier.path).mkdir(parents=True, exist_ok=True)
            probe = Path(tier.path) / f".stackctl-write-test.{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            line, col = lookup(recipe.positions, ("cache", "tiers", index, "path"))
            raise StackctlError(f"{recipe.source}:{line}:{col}: cache.tiers[{index}].path: {tier.path} is not "
                                f"writable ({exc.strerror or exc}) (fix: create it writable for the server, or "
                                "choose another directory)") from None


def ensure_tier_files_readable(recipe) -> None:
    """The S3 tier's credentials file and CA are readable files on this host: Docker would otherwise make an empty
    directory at a missing mount source, and the server would start without the credentials or the CA."""
    from stackctl.recipe.positions import lookup

    for index, tier in enumerate(recipe.cache.tiers if recipe.cache.enabled else []):
        for key in ("credentials_file", "ca_file"):
            path = getattr(tier, key, None) if kind_of(tier).s3_bucket else None
            if not path or (os.path.isfile(path) and os.access(path, os.R_OK)):
                continue
            problem = ("is not readable" if os.path.isfile(path) else "is not a file" if os.path.exists(path)
                       else "does not exist")
            line, col = lookup(recipe.positions, ("cache", "tiers", index, key))
            raise StackctlError(f"{recipe.source}:{line}:{col}: cache.tiers[{index}].{key}: {path} {problem} (fix: "
                                "point it at a readable file on this host)")
