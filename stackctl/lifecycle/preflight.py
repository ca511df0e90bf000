"""Checks `up` makes before it changes anything: the server's port is free (else which process holds it)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.storage.registry import storage_of


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
    """What each tier's storage makes ready on the host before `up` starts the server (a disk or fs tier's directory
    exists, or can be made, and takes a file): LMCache would otherwise start, fail to write its first chunk, and
    serve on without the tier."""
    _refuse_first(recipe, lambda storage, tier: storage.prepare(tier))


def ensure_tier_files_readable(recipe) -> None:
    """The files each tier's storage mounts (the S3 tier's credentials file and CA) are readable files on this host:
    Docker would otherwise make an empty directory at a missing mount source, and the server would start without
    the credentials or the CA."""
    _refuse_first(recipe, lambda storage, tier: storage.mount_problems(tier))


def _refuse_first(recipe, problems) -> None:
    """Raise the first (tier field, problem) of `problems(storage, tier)` over the tiers, at the field's position."""
    from stackctl.recipe.positions import lookup

    for index, tier in enumerate(recipe.cache.tiers if recipe.cache.enabled else []):
        for key, problem in problems(storage_of(tier), tier):
            line, col = lookup(recipe.positions, ("cache", "tiers", index, key))
            raise StackctlError(f"{recipe.source}:{line}:{col}: cache.tiers[{index}].{key}: {problem}")
