"""The container a stack runs as: docker-py `containers.run` arguments built from its stack spec (pure; `up
--dry-run` prints them, secrets hidden: lifecycle/plan.py), and the secrets it receives at run time."""

from __future__ import annotations

import os
from pathlib import Path

from stackctl.bundle import render
from stackctl.layout import RUN_DIR
from stackctl.engine import docker_adapter as dk
from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import platform_of

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def container_kwargs(spec, files: dict, bundle_dir: Path, pinning, host_groups: dict | None = None,
                     secrets: dict | None = None) -> dict:
    """docker-py `containers.run` arguments: ROCm devices and groups, host networking and IPC, large shm, model and
    tier volumes, the bundle's runtime files, env from the recipe, secrets from their references, and the
    pinning decision's cpuset and launcher (host/placement.py, the only place that turns a decision into these)."""
    from stackctl.host.placement import placement

    recipe = spec.recipe
    env = dict(spec.environment)
    env.update(secrets or {})
    volumes = {str(bundle_dir): {"bind": RUN_DIR, "mode": "ro"}}
    for mount in spec.volumes:
        volumes[mount["host"]] = {"bind": mount["container"], "mode": mount["mode"]}
    kwargs: dict[str, Any] = {
        "image": render.image_tag(spec, files),
        "name": spec.container_name,
        "detach": True,
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": recipe.host.shm_size,
        "environment": env,
        "volumes": volumes,
        "labels": {
            dk.LABEL_STACK: recipe.stack.name,
            dk.LABEL_RECIPE_HASH: spec.recipe_hash,
            dk.LABEL_IMAGE_HASH: render.image_hash(files),
            dk.LABEL_RECIPE_PATH: str(Path(recipe.source).resolve()),
            dk.LABEL_DESCRIPTION: recipe.stack.description,
        },
    }
    platform = platform_of(recipe)
    if platform.has_gpus:
        groups = host_groups or {}
        kwargs.update({
            "devices": list(platform.devices),
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


def read_secrets(spec) -> dict[str, str]:
    """Secret values from the host variables the recipe names; a missing one is an error naming it."""
    values, missing = {}, []
    for container_var, host_var in spec.secret_references.items():
        if host_var in os.environ:
            values[container_var] = os.environ[host_var]
        else:
            missing.append(host_var)
    if missing:
        raise StackctlError(f"{spec.source}: secret variable(s) not set: {', '.join(missing)} (fix: export them "
                            "in the shell that runs stackctl; they reach the container at run time only)")
    return values
