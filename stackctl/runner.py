"""Build, up, down, status: the stack lifecycle on a Docker engine.

`up` renders the bundle into the stack's state directory (mounted read-only into the container, so runtime tuning
never touches the image), builds the image only when its hash is new, runs the container pinned to the GPUs' NUMA
node, and waits for /health. It is idempotent: an unchanged running stack is left alone; a changed recipe replaces
the container. A server that dies during start-up is removed, and the relevant part of its log is shown.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from stackctl.bundle import render as renderer
from stackctl import state
from stackctl.bundle import stackspec
from stackctl.engine import docker_adapter as dk
from stackctl.errors import ExitCode, StackctlError
from stackctl.recipe.model import Recipe

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def state_dir(recipe: Recipe) -> Path:
    """Per-stack state (see stackctl/state.py): deployments, history, lock, the last failure log."""
    return state.stack_dir(recipe.stack.name)


# -- pure: what would be done ----------------------------------------------------------------------------------

def image_tag(recipe: Recipe, files: dict, base_id: str | None = None) -> str:
    """stackctl/NAME:HASH where HASH covers the build inputs and, once resolved, the base image's id: the same
    `FROM debian:bookworm-slim` over a newer base image is another image, so it gets another tag."""
    build_inputs = renderer.image_hash(files)
    if base_id is None:
        return f"{stackspec.image_name(recipe)}:{build_inputs}"
    import hashlib

    return f"{stackspec.image_name(recipe)}:{hashlib.sha256(f'{build_inputs}:{base_id}'.encode()).hexdigest()[:12]}"


def base_image_id(engine, recipe: Recipe) -> str:
    """The id of the recipe's base image as the engine has it now ("unresolved:NAME" when it has none: the build
    will pull it, and the tag then names the pull)."""
    base = stackspec.base_image(recipe)
    image = dk.find_image(engine, base)
    return image.id if image is not None else f"unresolved:{base}"


def resolved_image_tag(engine, recipe: Recipe, files: dict) -> str:
    return image_tag(recipe, files, base_image_id(engine, recipe))


def container_kwargs(recipe: Recipe, files: dict, bundle_dir: Path, pinning, host_groups: dict | None = None,
                     secrets: dict | None = None) -> dict:
    """docker-py `containers.run` arguments: ROCm devices and groups, host networking and IPC, large shm, model and
    tier volumes, the bundle's runtime files, env from the recipe, secrets from their references, and the
    pinning decision's cpuset and launcher (host/placement.py, the only place that turns a decision into these)."""
    from stackctl.host.placement import placement

    env = dict(stackspec.environment(recipe))
    env.update(secrets or {})
    volumes = {str(bundle_dir): {"bind": stackspec.RUN_DIR, "mode": "ro"}}
    for mount in stackspec.volumes(recipe):
        volumes[mount["host"]] = {"bind": mount["container"], "mode": mount["mode"]}
    kwargs: dict[str, Any] = {
        "image": image_tag(recipe, files),
        "name": stackspec.container_name(recipe),
        "detach": True,
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": recipe.host.shm_size,
        "environment": env,
        "volumes": volumes,
        "labels": {
            dk.LABEL_STACK: recipe.stack.name,
            dk.LABEL_RECIPE_HASH: stackspec.recipe_hash(recipe),
            dk.LABEL_IMAGE_HASH: renderer.image_hash(files),
            dk.LABEL_RECIPE_PATH: str(Path(recipe.source).resolve()),
            dk.LABEL_DESCRIPTION: recipe.stack.description,
        },
    }
    if recipe.stack.platform == "rocm":
        groups = host_groups or {}
        kwargs.update({
            "devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
            "group_add": [str(groups.get("video", "video")), str(groups.get("render", "render"))],
            "cap_add": ["SYS_PTRACE"],
            "security_opt": ["seccomp=unconfined"],
        })
    if pinning is not None:
        place = placement(pinning)
        kwargs.update(place.cpuset)
        env.update(place.environment())
        if place.capabilities:
            kwargs["cap_add"] = kwargs.get("cap_add", []) + list(place.capabilities)
    return kwargs


def redacted(kwargs: dict, secrets: dict) -> dict:
    """A copy safe to print: secret values replaced by where they come from."""
    shown = json.loads(json.dumps(kwargs))
    for name in secrets:
        if name in shown.get("environment", {}):
            shown["environment"][name] = "<secret: read at run time>"
    return shown


def read_secrets(recipe: Recipe) -> dict[str, str]:
    """Secret values from the host variables the recipe names; a missing one is an error naming it."""
    values, missing = {}, []
    for container_var, host_var in stackspec.secret_references(recipe).items():
        if host_var in os.environ:
            values[container_var] = os.environ[host_var]
        else:
            missing.append(host_var)
    if missing:
        raise StackctlError(f"{recipe.source}: secret variable(s) not set: {', '.join(missing)} (fix: export them "
                            "in the shell that runs stackctl; they reach the container at run time only)")
    return values


# -- build -----------------------------------------------------------------------------------------------------

def build(recipe: Recipe, *, engine=None, wheelhouse: str | None = None, ca_bundle: str | None = None,
          rebuild: bool = False, no_cache: bool = False, say=print, locked: bool = False) -> tuple[str, bool]:
    """Build the stack's image unless one with the same hash exists. Returns (tag, built). Takes the stack's lock
    unless the caller (`up`) holds it already."""
    if locked:
        return _build(recipe, engine, wheelhouse, ca_bundle, rebuild, no_cache, say)
    from stackctl.lock import StackLock

    directory = state_dir(recipe)
    state.ensure_writable(directory)
    with StackLock(directory, recipe.stack.name, "build", say=say):
        return _build(recipe, engine, wheelhouse, ca_bundle, rebuild, no_cache, say)


def _build(recipe, engine, wheelhouse, ca_bundle, rebuild, no_cache, say) -> tuple[str, bool]:
    files = renderer.render_files(recipe)
    engine = engine or dk.client()
    base_id = base_image_id(engine, recipe)
    tag = image_tag(recipe, files, base_id)
    if not (rebuild or no_cache) and dk.find_image(engine, tag) is not None:
        say(f"image {tag} is up to date (same build inputs): not rebuilding")
        return tag, False
    with tempfile.TemporaryDirectory(prefix="stackctl-build-") as context:
        context_dir = Path(context)
        renderer.write_bundle(files, context_dir / "bundle")
        bundle = context_dir / "bundle"
        _add_site_inputs(bundle, recipe, wheelhouse, ca_bundle, say)
        labels = {dk.LABEL_STACK: recipe.stack.name, dk.LABEL_IMAGE_HASH: renderer.image_hash(files),
                  dk.LABEL_BASE_IMAGE: stackspec.base_image(recipe), dk.LABEL_BASE_ID: base_id}
        say(f"building {tag} from {stackspec.base_image(recipe)}")
        started = time.monotonic()
        try:
            dk.stream_build(engine, dk.build_kwargs(str(bundle), tag, labels, nocache=no_cache))
        except KeyboardInterrupt:  # stream_build has cancelled the build on the engine
            say(f"interrupted during the build of {tag}: build cancelled, no image tagged; the stack's container "
                "(if any) was not touched")
            raise
        say(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag, True


def _add_site_inputs(bundle: Path, recipe: Recipe, wheelhouse: str | None, ca_bundle: str | None, say) -> None:
    """Copy the site's wheelhouse and CA bundle into the build context (not into the bundle's hash)."""
    wheelhouse = wheelhouse or recipe.build.wheelhouse or os.environ.get("STACKCTL_WHEELHOUSE")
    ca_bundle = ca_bundle or recipe.build.ca_bundle or os.environ.get("STACKCTL_CA_BUNDLE")
    if wheelhouse:
        wheels = sorted(Path(wheelhouse).expanduser().glob("*.whl"))
        if not Path(wheelhouse).expanduser().is_dir():
            raise StackctlError(f"wheelhouse {wheelhouse}: no such directory (fix: build.wheelhouse or "
                                "STACKCTL_WHEELHOUSE must name a folder of .whl files)")
        for wheel in wheels:
            shutil.copy2(wheel, bundle / "wheelhouse" / wheel.name)
        say(f"wheelhouse {wheelhouse}: {len(wheels)} wheel(s)")
    if ca_bundle:
        if not Path(ca_bundle).expanduser().is_file():
            raise StackctlError(f"CA bundle {ca_bundle}: no such file (fix: build.ca_bundle or STACKCTL_CA_BUNDLE)")
        shutil.copy2(Path(ca_bundle).expanduser(), bundle / "ca" / "ca.crt")
        say(f"CA bundle {ca_bundle}")


# -- up / down / status ----------------------------------------------------------------------------------------

def up(recipe: Recipe, *, wheelhouse=None, ca_bundle=None, dry_run=False, timeout: float | None = None,
       say=print, rollback: bool = True, gate: str | None = None, command: str = "up") -> int:
    from stackctl.host import PinningError, discover, pinning_for

    files = renderer.render_files(recipe)
    facts = discover()
    if not dry_run:
        _refuse_without_gpus(recipe, facts)
    try:
        pinning = pinning_for(recipe, facts)
    except PinningError as exc:
        raise exc.located(recipe) from None
    groups = {g.name: g.gid for g in facts.devices.groups if g.gid is not None}
    secrets = read_secrets(recipe) if not dry_run else {k: "" for k in stackspec.secret_references(recipe)}
    bundle_dir = state.deployment_dir(recipe.stack.name, stackspec.recipe_hash(recipe)) / "bundle"
    kwargs = container_kwargs(recipe, files, bundle_dir, pinning, groups, secrets)
    _show_pinning(recipe, pinning, say)
    if dry_run:
        print(json.dumps(redacted(kwargs, secrets), indent=2, sort_keys=True))
        return ExitCode.OK

    from stackctl.deploy import Deployment
    from stackctl.lock import StackLock

    engine = dk.client()
    directory = state_dir(recipe)
    state.ensure_writable(directory)
    with StackLock(directory, recipe.stack.name, command, say=say):
        deployment = Deployment(recipe, files, kwargs, engine, say, rollback=rollback, gate=gate, command=command,
                                timeout=timeout or recipe.checks.startup_timeout_s)
        return deployment.run(lambda: build(recipe, engine=engine, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                                            say=say, locked=True))


def _show_pinning(recipe: Recipe, pinning, say) -> None:
    """The decision, its reasons and warnings, the cpuset and the exact launcher line serve.sh will run."""
    from stackctl.host.placement import placement

    place = placement(pinning)
    for reason in pinning.reasons:
        say(f"pinning: {reason}")
    for warning in pinning.warnings:
        say(f"pinning: warning: {warning}")
    cpuset = " ".join(f"{key}={value}" for key, value in place.cpuset.items()) or "none (not pinned)"
    say(f"pinning: cpuset: {cpuset}")
    say(f"pinning: launcher: {place.command_line(stackspec.server_command(recipe) + stackspec.serve_args(recipe))}")


def _refuse_without_gpus(recipe: Recipe, facts) -> None:
    """Say before an hour-long build, not after it, that this host cannot run a ROCm stack."""
    if recipe.stack.platform != "rocm":
        return
    if not facts.devices.kfd:
        raise StackctlError(f"{recipe.source}: platform rocm but /dev/kfd is missing on this host (fix: load the "
                            f"amdgpu driver; `stackctl doctor {recipe.source} --scope host` shows the host checks)")
    if len(facts.gpus) < recipe.model.tensor_parallel:
        raise StackctlError(f"{recipe.source}: model.tensor_parallel = {recipe.model.tensor_parallel} but this host "
                            f"has {len(facts.gpus)} AMD GPU(s) (fix: lower tensor_parallel or run on a bigger host)")


def health_url(host: str, port) -> str:
    from stackctl.preflight import client_host

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
        container.reload()
        if container.status in ("exited", "dead"):
            log = container.logs().decode(errors="replace")
            raise StackctlError(f"{stack}: the server exited during start-up (exit code "
                                f"{container.attrs['State'].get('ExitCode')}):\n{relevant_log_tail(log)}")
        if get_status(url, timeout=2.0) == 200:
            if tty:
                sys.stderr.write("\n")
            return
        if elapsed > timeout:
            log = container.logs(tail=200).decode(errors="replace")
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
    import docker

    try:
        log = container.logs().decode(errors="replace")
    except docker.errors.APIError as exc:  # the container may be gone already: say so, do not fail the cleanup
        log = f"(log unavailable: {exc})\n"
    path = state_dir(recipe) / "last-failure.log"
    try:
        state.write_atomically(path, log)
    except OSError:
        return None
    return path


def down(recipe: Recipe, remove_image: bool = False, say=print) -> int:
    from stackctl.lock import StackLock
    from stackctl.signals import shielded

    engine = dk.client()
    directory = state_dir(recipe)
    state.ensure_writable(directory)
    removed = 0
    with StackLock(directory, recipe.stack.name, "down", say=say):
        for container in dk.stack_containers(engine, recipe.stack.name):
            with shielded():  # a container is removed and said, or neither
                dk.remove_container(container)
                say(f"removed container {container.name}")
            removed += 1
        if remove_image:
            for image in engine.images.list(filters={"label": f"{dk.LABEL_STACK}={recipe.stack.name}"}):
                engine.images.remove(image.id, force=True)
                say(f"removed image {', '.join(image.tags) or image.short_id}")
        if removed:
            state.record_deployment(recipe.stack.name, {"command": "down", "outcome": "removed",
                                                        "recipe_hash": stackspec.recipe_hash(recipe)})
    if not removed:
        say(f"{recipe.stack.name}: no container to remove")
    return ExitCode.OK


def status_rows(recipe: Recipe | None = None) -> list[dict]:
    """One row per stackctl container: name, description, state, image, recipe hash (and whether it matches),
    health, uptime, and for a stopped server why it stopped."""
    from datetime import datetime, timezone

    from stackctl.httpclient import get_status

    engine = dk.client()
    rows = []
    wanted = stackspec.recipe_hash(recipe) if recipe else None
    for container in dk.stack_containers(engine, recipe.stack.name if recipe else None):
        labels = container.labels
        started = container.attrs["State"].get("StartedAt", "")
        uptime = None
        if container.status == "running" and started:
            begun = datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00")
            uptime = int((datetime.now(timezone.utc) - begun).total_seconds())
        env = dict(item.split("=", 1) for item in container.attrs["Config"].get("Env") or [] if "=" in item)
        host, port = served_address(container)
        health = None
        if container.status == "running":
            code = get_status(health_url(host, port), timeout=2.0) if port else None
            health = "healthy" if code == 200 else ("starting" if code is None else f"unhealthy ({code})")
        rows.append({
            "stack": labels.get(dk.LABEL_STACK), "container": container.name, "state": container.status,
            "description": labels.get(dk.LABEL_DESCRIPTION, ""),
            "image": (container.image.tags or [container.image.short_id])[0],
            "recipe_hash": labels.get(dk.LABEL_RECIPE_HASH),
            "recipe_current": (labels.get(dk.LABEL_RECIPE_HASH) == wanted) if wanted else None,
            "health": health, "uptime_s": uptime, "host": host, "port": port or "?",
            "hash_seed": env.get("PYTHONHASHSEED"),
            "stopped_because": stop_reason(container.attrs.get("State") or {}) if container.status != "running"
            else None,
            "newer_base": newer_base(engine, container.image),
        })
    return rows


def newer_base(engine, image) -> str | None:
    """Whether the base image the container's image was built from has changed in the engine since (the next
    `up` would build another tag), as a sentence; None when it has not or cannot be told."""
    labels = image.labels or {}
    base, built_from = labels.get(dk.LABEL_BASE_IMAGE), labels.get(dk.LABEL_BASE_ID)
    if not base or not built_from:
        return None
    now = dk.find_image(engine, base)
    if now is None or now.id == built_from:
        return None
    return f"base image {base} is now {now.short_id} (built from {built_from.split(':')[-1][:10]}): the next up " \
           "builds a new image"


def stop_reason(container_state: dict) -> str:
    """Why a server is not running, from the engine's record of its end (exit code, signal, OOM)."""
    code = container_state.get("ExitCode")
    finished = (container_state.get("FinishedAt") or "")[:19]
    if container_state.get("OOMKilled"):
        why = "killed by the kernel: out of memory"
    elif code == 137:
        why = "killed (SIGKILL: kill -9, or the engine's stop timeout)"
    elif code == 143:
        why = "stopped (SIGTERM)"
    elif code == 0:
        why = "exited normally (code 0)"
    elif code is None:
        why = f"state {container_state.get('Status', 'unknown')}"
    else:
        why = f"exited with code {code}"
    if container_state.get("Error"):
        why += f": {container_state['Error']}"
    return why + (f" at {finished}Z" if finished and not finished.startswith("0001") else "")


def served_address(container) -> tuple[str, str | None]:
    """Host and port the server listens on, read from the bundle's serve.sh the container runs (the recipe may
    have changed since)."""
    for mount in container.attrs.get("Mounts", []):
        if mount.get("Destination") == stackspec.RUN_DIR:
            serve = Path(mount["Source"]) / "serve.sh"
            if serve.is_file():
                words = [w.strip("'\"") for w in serve.read_text().split()]
                host = words[words.index("--host") + 1] if "--host" in words else "127.0.0.1"
                port = words[words.index("--port") + 1] if "--port" in words else None
                return host, port
    return "127.0.0.1", None
