"""Small pieces shared by subcommands: finding recipe files, loading them."""

from __future__ import annotations

from pathlib import Path

from stackctl.errors import StackctlError


def resolve_recipe_path(name: str) -> Path:
    """A recipe path as given, or the name of a shipped recipe (``cpu-smoke`` or ``cpu-smoke.toml``)."""
    path = Path(name)
    if path.exists():
        return path
    if path.parent == Path(".") or str(path.parent) == "recipes":
        from stackctl.resources import shipped

        stem = path.name[:-5] if path.name.endswith(".toml") else path.name
        candidate = shipped("recipes") / f"{stem}.toml"
        if candidate.exists():
            return candidate
    raise StackctlError(f"{name}: no such recipe file (fix: check the path; shipped recipes: "
                        f"{', '.join(shipped_recipe_names())})")


def shipped_recipe_names() -> list[str]:
    from stackctl.resources import shipped

    return sorted(p.stem for p in shipped("recipes").glob("*.toml"))


def load(name: str):
    """Resolve and load one recipe (raises RecipeError with every problem)."""
    from stackctl.recipe import load_recipe

    return load_recipe(resolve_recipe_path(name))
