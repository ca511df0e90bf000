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

from stackctl import render as renderer
from stackctl import stackspec
from stackctl.engine import docker_adapter as dk
from stackctl.errors import StackctlError
from stackctl.recipe.model import Recipe

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def state_dir(recipe: Recipe) -> Path:
    """Per-stack state: the rendered bundle the container mounts, and the last failure log."""
    base = os.environ.get("STACKCTL_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "stackctl")
    return Path(base) / recipe.stack.name


# -- pure: what would be done ----------------------------------------------------------------------------------

def image_tag(recipe: Recipe, files: dict) -> str:
    return f"{stackspec.image_name(recipe)}:{renderer.image_hash(files)}"


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
          rebuild: bool = False, no_cache: bool = False, say=print) -> tuple[str, bool]:
    """Build the stack's image unless one with the same hash exists. Returns (tag, built)."""
    files = renderer.render_files(recipe)
    tag = image_tag(recipe, files)
    engine = engine or dk.client()
    if not (rebuild or no_cache) and dk.find_image(engine, tag) is not None:
        say(f"image {tag} is up to date (same build inputs): not rebuilding")
        return tag, False
    with tempfile.TemporaryDirectory(prefix="stackctl-build-") as context:
        context_dir = Path(context)
        renderer.write_bundle(files, context_dir / "bundle")
        bundle = context_dir / "bundle"
        _add_site_inputs(bundle, recipe, wheelhouse, ca_bundle, say)
        labels = {dk.LABEL_STACK: recipe.stack.name, dk.LABEL_IMAGE_HASH: renderer.image_hash(files)}
        say(f"building {tag} from {stackspec.base_image(recipe)}")
        started = time.monotonic()
        dk.stream_build(engine, dk.build_kwargs(str(bundle), tag, labels, nocache=no_cache))
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
       say=print) -> int:
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
    bundle_dir = state_dir(recipe) / "bundle"
    kwargs = container_kwargs(recipe, files, bundle_dir, pinning, groups, secrets)
    _show_pinning(recipe, pinning, say)
    if dry_run:
        print(json.dumps(redacted(kwargs, secrets), indent=2, sort_keys=True))
        return 0

    engine = dk.client()
    current = dk.find_container(engine, kwargs["name"])
    wanted_hash = kwargs["labels"][dk.LABEL_RECIPE_HASH]
    if current is not None and current.status == "running" and \
            current.labels.get(dk.LABEL_RECIPE_HASH) == wanted_hash:
        say(f"{kwargs['name']} is running recipe {wanted_hash} already: nothing to do")
        return 0
    if current is not None and current.labels.get(dk.LABEL_STACK) != recipe.stack.name:
        raise StackctlError(f"a container named {kwargs['name']} exists and was not made by stackctl "
                            "(fix: rename the stack, or remove that container yourself)")

    build(recipe, engine=engine, wheelhouse=wheelhouse, ca_bundle=ca_bundle, say=say)
    renderer.write_bundle(files, bundle_dir)
    if current is not None:
        say(f"replacing {kwargs['name']} (recipe {current.labels.get(dk.LABEL_RECIPE_HASH)} -> {wanted_hash})")
        dk.remove_container(current)
    container = engine.containers.run(**kwargs)
    say(f"started {kwargs['name']} ({container.short_id}); waiting for http://{recipe.serve.host}:"
        f"{recipe.serve.port}/health")
    try:
        wait_healthy(recipe, container, timeout or recipe.checks.startup_timeout_s, say)
    except BaseException:
        _save_failure_log(recipe, container)
        dk.remove_container(container)
        raise
    say(f"{recipe.stack.name} is healthy on http://{recipe.serve.host}:{recipe.serve.port} "
        f"(model {recipe.served_name})")
    return 0


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


def wait_healthy(recipe: Recipe, container, timeout: float, say) -> None:
    """Poll /health until 200; fail fast with the log's relevant tail when the container exits."""
    from stackctl.httpclient import get_status

    url = f"http://{recipe.serve.host}:{recipe.serve.port}/health"
    started = time.monotonic()
    tty = sys.stderr.isatty()
    last_report = 0.0
    while True:
        elapsed = time.monotonic() - started
        container.reload()
        if container.status in ("exited", "dead"):
            log = container.logs().decode(errors="replace")
            raise StackctlError(f"{recipe.stack.name}: the server exited during start-up (exit code "
                                f"{container.attrs['State'].get('ExitCode')}):\n{relevant_log_tail(log)}")
        if get_status(url, timeout=2.0) == 200:
            if tty:
                sys.stderr.write("\n")
            return
        if elapsed > timeout:
            log = container.logs(tail=200).decode(errors="replace")
            raise StackctlError(f"{recipe.stack.name}: not healthy after {timeout:.0f} s (fix: raise "
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


def _save_failure_log(recipe: Recipe, container) -> None:
    try:
        log = container.logs().decode(errors="replace")
    except Exception:
        return
    path = state_dir(recipe) / "last-failure.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(log)
    os.replace(tmp, path)


def down(recipe: Recipe, remove_image: bool = False, say=print) -> int:
    engine = dk.client()
    removed = 0
    for container in dk.stack_containers(engine, recipe.stack.name):
        dk.remove_container(container)
        say(f"removed container {container.name}")
        removed += 1
    if remove_image:
        for image in engine.images.list(filters={"label": f"{dk.LABEL_STACK}={recipe.stack.name}"}):
            engine.images.remove(image.id, force=True)
            say(f"removed image {', '.join(image.tags) or image.short_id}")
    if not removed:
        say(f"{recipe.stack.name}: no container to remove")
    return 0


def status_rows(recipe: Recipe | None = None) -> list[dict]:
    """One row per stackctl container: name, description, state, image, recipe hash (and whether it matches),
    health, uptime."""
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
        port = _served_port(container) or "?"
        health = None
        if container.status == "running":
            code = get_status(f"http://127.0.0.1:{port}/health", timeout=2.0) if port != "?" else None
            health = "healthy" if code == 200 else ("starting" if code is None else f"unhealthy ({code})")
        rows.append({
            "stack": labels.get(dk.LABEL_STACK), "container": container.name, "state": container.status,
            "description": labels.get(dk.LABEL_DESCRIPTION, ""),
            "image": (container.image.tags or [container.image.short_id])[0],
            "recipe_hash": labels.get(dk.LABEL_RECIPE_HASH),
            "recipe_current": (labels.get(dk.LABEL_RECIPE_HASH) == wanted) if wanted else None,
            "health": health, "uptime_s": uptime, "port": port,
            "hash_seed": env.get("PYTHONHASHSEED"),
        })
    return rows


def _served_port(container) -> str | None:
    """The server port, read from the bundle's serve.sh the container runs (the recipe may have changed since)."""
    for mount in container.attrs.get("Mounts", []):
        if mount.get("Destination") == stackspec.RUN_DIR:
            serve = Path(mount["Source"]) / "serve.sh"
            if serve.is_file():
                words = serve.read_text().split()
                if "--port" in words:
                    return words[words.index("--port") + 1]
    return None
