"""`stackctl status`: one row per stackctl container, read from the engine and the server's /health."""

from __future__ import annotations

from stackctl.engine import docker_adapter as dk
from stackctl.engine.health import health_url, served_address, stop_reason


def status_rows(spec=None) -> list[dict]:
    """One row per stackctl container: name, description, state, image, recipe hash (and whether it matches),
    health, uptime, and for a stopped server why it stopped."""
    import time

    from stackctl.httpclient import get_status

    engine = dk.client()
    rows = []
    wanted = spec.recipe_hash if spec else None
    for container in dk.stack_containers(engine, spec.name if spec else None):
        labels = container.labels
        state = dk.container_state(container)
        started = state.started_epoch
        uptime = int(time.time() - started) if container.status == "running" and started else None
        env = dk.container_env(container)
        image = dk.container_image(engine, container)
        host, port = served_address(container)
        health = None
        if container.status == "running":
            code = get_status(health_url(host, port), timeout=2.0) if port else None
            health = "healthy" if code == 200 else ("starting" if code is None else f"unhealthy ({code})")
        rows.append({
            "stack": labels.get(dk.LABEL_STACK), "container": container.name, "state": container.status,
            "description": labels.get(dk.LABEL_DESCRIPTION, ""),
            "image": dk.running_image_name(container, image),
            "recipe_hash": labels.get(dk.LABEL_RECIPE_HASH),
            "recipe_current": (labels.get(dk.LABEL_RECIPE_HASH) == wanted) if wanted else None,
            "health": health, "uptime_s": uptime, "host": host, "port": port or "?",
            "hash_seed": env.get("PYTHONHASHSEED"),
            "stopped_because": stop_reason(state) if container.status != "running" else None,
            "newer_base": newer_base(engine, image) if image is not None else None,
        })
    return rows


def newer_base(engine, image) -> str | None:
    """Whether the base image the container's image was built from has changed in the engine since (the next
    `up` builds the image again), as a sentence; None when it has not or cannot be told."""
    labels = image.labels or {}
    base, built_from = labels.get(dk.LABEL_BASE_IMAGE), labels.get(dk.LABEL_BASE_ID)
    if not base or not built_from:
        return None
    now = dk.find_image(engine, base)
    if now is None or now.id == built_from:
        return None
    return f"base image {base} is now {dk.short_id(now)} (built from {built_from.split(':')[-1][:10]}): the next up " \
           "builds a new image"
