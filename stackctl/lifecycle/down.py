"""`stackctl down`: remove the stack's containers (and, asked to, its images), recorded in its history."""

from __future__ import annotations

from stackctl.engine import docker_adapter as dk
from stackctl.errors import ExitCode
from stackctl.state import store
from stackctl.state.lock import StackLock
from stackctl.state.signals import shielded


def down(spec, remove_image: bool = False, say=print) -> int:
    engine = dk.client()
    directory = store.stack_dir(spec.name)
    store.ensure_writable(directory)
    removed = 0
    with StackLock(directory, spec.name, "down", say=say):
        for container in dk.stack_containers(engine, spec.name):
            with shielded():  # a container is removed and said, or neither
                dk.remove_container(container)
                say(f"removed container {container.name}")
            removed += 1
        if remove_image:
            for image in dk.stack_images(engine, spec.name):
                dk.remove_image(engine, image)
                say(f"removed image {', '.join(dk.image_tags(image)) or dk.short_id(image)}")
        if removed:
            store.record_deployment(spec.name, {"command": "down", "outcome": "removed",
                                                        "recipe_hash": spec.recipe_hash})
    if not removed:
        say(f"{spec.name}: no container to remove")
    return ExitCode.OK
