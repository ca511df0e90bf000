"""Waiting for a server to answer /health, and what a server that stopped says about why: used by `up` (the
replacement and its rollback), `status`, and doctor's second servers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from stackctl import layout
from stackctl.engine import docker_adapter as dk
from stackctl.engine.records import ContainerState
from stackctl.errors import StackctlError
from stackctl.httpclient import client_host
from stackctl.state.store import stack_dir, write_atomically
from stackctl.recipe.model import Recipe


def health_url(host: str, port) -> str:
    return f"http://{client_host(host)}:{port}/health"


def wait_healthy(recipe: Recipe, container, timeout: float, say) -> None:
    wait_for_health(recipe.stack.name, health_url(recipe.serve.host, recipe.serve.port), container, timeout, say)


def wait_for_health(stack: str, url: str, container, timeout: float, say) -> None:
    """Poll /health until 200; fail fast with the log's relevant tail when the container exits."""
    from stackctl.httpclient import get_status

    started = time.monotonic()
    tty = sys.stderr.isatty()
    last_report = 0.0
    while True:
        elapsed = time.monotonic() - started
        dk.refresh(container)
        if container.status in ("exited", "dead"):
            log = dk.logs_text(container)
            raise StackctlError(f"{stack}: the server exited during start-up (exit code "
                                f"{dk.container_state(container).exit_code}):\n{relevant_log_tail(log)}")
        if get_status(url, timeout=2.0) == 200:
            if tty:
                sys.stderr.write("\n")
            return
        if elapsed > timeout:
            log = dk.logs_text(container, tail=200)
            raise StackctlError(f"{stack}: not healthy after {timeout:.0f} s (fix: raise "
                                f"checks.startup_timeout_s, or read the log):\n{relevant_log_tail(log)}")
        if tty:
            sys.stderr.write(f"\r\033[Kwaiting for /health: {elapsed:4.0f} s")
            sys.stderr.flush()
        elif elapsed - last_report >= 30:
            say(f"waiting for /health: {elapsed:.0f} s")
            last_report = elapsed
        time.sleep(1.0)


def relevant_log_tail(log: str, lines: int = 25) -> str:
    """The part of a failed server's log that explains it: from the first Traceback, else the last lines."""
    all_lines = log.rstrip().splitlines()
    for index, line in enumerate(all_lines):
        if "Traceback (most recent call last)" in line:
            return "\n".join(all_lines[index:index + 60])
    return "\n".join(all_lines[-lines:])


def save_failure_log(recipe: Recipe, container) -> Path | None:
    """Keep a failed server's log as STATE/NAME/last-failure.log (the container itself is removed)."""
    log = dk.logs_or_reason(container)  # the container may be gone already: say so, do not fail the cleanup
    path = stack_dir(recipe.stack.name) / "last-failure.log"
    try:
        write_atomically(path, log)
    except OSError:
        return None
    return path


def stop_reason(state: ContainerState) -> str:
    """Why a server is not running, from the engine's record of its end (exit code, signal, OOM)."""
    code = state.exit_code
    finished = state.finished_at[:19]
    if state.oom_killed:
        why = "killed by the kernel: out of memory"
    elif code == 137:
        why = "killed (SIGKILL: kill -9, or the engine's stop timeout)"
    elif code == 143:
        why = "stopped (SIGTERM)"
    elif code == 0:
        why = "exited normally (code 0)"
    elif code is None:
        why = f"state {state.status or 'unknown'}"
    else:
        why = f"exited with code {code}"
    if state.error:
        why += f": {state.error}"
    return why + (f" at {finished}Z" if finished and not finished.startswith("0001") else "")


def served_address(container) -> tuple[str, str | None]:
    """Host and port the server listens on, read from the bundle's serve.sh the container runs (the recipe may
    have changed since)."""
    source = dk.container_mounts(container).get(layout.RUN_DIR)
    if source is not None:
        serve = Path(source) / "serve.sh"
        if serve.is_file():
            words = [w.strip("'\"") for w in serve.read_text().split()]
            host = words[words.index("--host") + 1] if "--host" in words else "127.0.0.1"
            port = words[words.index("--port") + 1] if "--port" in words else None
            return host, port
    return "127.0.0.1", None
