"""What each host gets from a rollout: recipe file, recipe hash, stack name, host tuning; and the wheelhouse id."""

from __future__ import annotations

import hashlib
from pathlib import Path


def tuning_for(recipe) -> dict:
    """The host tuning a recipe asks for, as the role's stackctl_host_tuning (absent keys: leave alone)."""
    tuning: dict = {"numa_balancing": 1 if recipe.host.numa_balancing else 0}
    if recipe.host.governor:
        tuning["governor"] = recipe.host.governor
    if recipe.host.isolcpus not in ("auto", "off"):
        tuning["isolcpus"] = recipe.host.isolcpus
    return tuning


def host_plan(recipe_path: str, recipe) -> dict:
    """What one host gets: the recipe file (controller path), its hash, the stack name, the tuning."""
    from stackctl.stackspec import recipe_hash

    return {"recipe": str(recipe_path), "recipe_hash": recipe_hash(recipe), "stack": recipe.stack.name,
            "tuning": tuning_for(recipe)}


def wheelhouse_id(directory: str | Path) -> str:
    """A short content hash of a wheelhouse (names and bytes of its wheels): hosts reinstall when it changes."""
    digest = hashlib.sha256()
    wheels = sorted(Path(directory).glob("*.whl"))
    for wheel in wheels:
        digest.update(wheel.name.encode() + b"\0")
        digest.update(hashlib.sha256(wheel.read_bytes()).digest())
    return digest.hexdigest()[:16]
