"""A second server beside a running stack: the same image, recipe and tiers, its own port, process and container.

Some LMCache facts cannot be seen from inside one server process. Whether a chunk stored by one process is found
by another (the hash seed: LMCache keys chain from a seed that is random per process unless PYTHONHASHSEED is
fixed) needs a second process; whether a lower tier serves a load on its own needs a process that searches only
that tier (LMCache's `retrieve_locations`, lmcache/v1/config.py:159-163 in 0.5.6, read by the storage manager's
lookups, lmcache/v1/cache_engine.py:1206-1207). The second server answers both, and the stack under test is never
stopped, restarted or reconfigured: it ends as it was. The container is removed on every way out (Ctrl-C too).
"""

from __future__ import annotations

import copy
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackctl.bundle import render as renderer
from stackctl.engine import docker_adapter as dk
from stackctl.engine.handles import Container

SECOND_SERVER_LABEL = "dev.stackctl.second-server-of"


@dataclass
class SecondServer:
    """A running second server: where it answers and how to read what it logged."""
    base_url: str
    container: Container
    model: str

    def log(self) -> str:
        return dk.logs_text(dk.refresh(self.container))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def derived_recipe(recipe, label: str, port: int, env: dict[str, str]):
    """The stack's recipe as the second server runs it: its own name and port, the extra environment on top."""
    second = copy.deepcopy(recipe)
    second.stack.name = f"{recipe.stack.name}-{label}"
    second.serve.port = port
    second.serve.env = {**recipe.serve.env, **env}
    return second


@dataclass(frozen=True)
class Planned:
    """One second server to start: the stack (or an arm of it) it runs, its label, the environment added on top,
    and its port (None: one the kernel picks)."""
    spec: Any
    label: str
    env: dict[str, str]
    port: int | None = None


@contextmanager
def second_servers(image: str, planned: list[Planned], timeout: float,
                   say=lambda message: None) -> Iterator[tuple[SecondServer, ...]]:
    """Start every planned second server from `image` at once, wait until each is healthy, yield them in order, and
    remove every container and bundle whatever happens (one that failed to start included). They start together:
    most of a server's start is its own interpreter, model load and first pass, and one after another their starts
    were most of `doctor --deep`'s time."""
    from stackctl.engine.health import wait_for_health

    with ExitStack() as started:
        servers = [started.enter_context(_started(plan, image, say)) for plan in planned]
        for name, server in servers:
            wait_for_health(name, f"{server.base_url}/health", server.container, timeout, say)
        yield tuple(server for _, server in servers)


@contextmanager
def _started(plan: Planned, image: str, say) -> Iterator[tuple[str, SecondServer]]:
    """A second server's container started (not yet healthy): its stack name and the server; the container and its
    bundle are removed on the way out."""
    from stackctl.engine.container import container_kwargs, read_secrets

    port = plan.port or free_port()
    recipe = plan.spec.recipe
    second = plan.spec.with_recipe(derived_recipe(recipe, plan.label, port, plan.env))
    files = renderer.render_files(second, guard=False)
    bundle = Path(tempfile.mkdtemp(prefix=f"stackctl-{second.name}-"))
    container = None
    try:
        renderer.write_bundle(files, bundle / "bundle")
        kwargs = container_kwargs(second, files, bundle / "bundle", None, secrets=read_secrets(plan.spec))
        kwargs["image"] = image
        # Not a deployment: no stack labels, so `status`, `down` and `up` never take it for one.
        kwargs["labels"] = {SECOND_SERVER_LABEL: recipe.stack.name}
        engine = dk.client()
        leftover = dk.find_container(engine, kwargs["name"])
        if leftover is not None:  # from a doctor run that was killed outright
            dk.remove_container(leftover)
        say(f"starting a second server {kwargs['name']} on port {port} ({plan.label})")
        container = dk.run_detached(engine, **kwargs)
        yield second.name, SecondServer(f"http://127.0.0.1:{port}", container, recipe.served_name)
    finally:
        if container is not None:
            dk.remove_container(container)
        shutil.rmtree(bundle, ignore_errors=True)


def image_of(container) -> str:
    return dk.container_image_id(container)

