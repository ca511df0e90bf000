"""Finding a recipe file: a path as given, or the name of a recipe shipped with stackctl."""

from __future__ import annotations

import os

from stackctl.errors import StackctlError


def resolve_recipe_path(name: str) -> str:
    """A recipe path as given, or the name of a shipped recipe (``cpu-smoke`` or ``cpu-smoke.toml``)."""
    if os.path.exists(name):
        return name  # os.path, not pathlib: this runs on `validate`'s start-up path
    folder, base = os.path.split(name)
    if folder in ("", "recipes"):
        from stackctl.resources import shipped

        stem = base[:-5] if base.endswith(".toml") else base
        candidate = shipped("recipes") / f"{stem}.toml"
        if candidate.exists():
            return str(candidate)
    raise StackctlError(f"{name}: no such recipe file (fix: check the path; shipped recipes: "
                        f"{', '.join(shipped_recipe_names())})")


def shipped_recipe_names() -> list[str]:
    from stackctl.resources import shipped

    return sorted(p.stem for p in shipped("recipes").glob("*.toml"))
