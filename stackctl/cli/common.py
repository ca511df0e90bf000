"""Small pieces shared by subcommands: finding recipe files, loading them."""

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


def load(name: str):
    """Resolve and load one recipe (raises RecipeError with every problem)."""
    from stackctl.recipe import load_recipe

    return load_recipe(resolve_recipe_path(name))


def load_checked(name: str, verb: str, ignore_errors: bool = False):
    """Load a recipe and run the rules: `render`, `build` and `up` refuse a recipe with errors, unless the user
    passes --ignore-errors, which is said loudly and recorded (manifest.json's ignored_errors)."""
    return check_rules(load(name), name, verb, ignore_errors)


def check_rules(recipe, name: str, verb: str, ignore_errors: bool = False):
    """The rule check of load_checked, for a recipe already loaded; returns the recipe."""
    import sys

    from stackctl.recipe.rules import run_rules

    errors = [f for f in run_rules(recipe) if f.severity == "error"]
    if not errors:
        return recipe
    ids = ", ".join(sorted({f.rule_id for f in errors}))
    if not ignore_errors:
        lines = [f.format() for f in errors]
        raise StackctlError("\n".join(lines) + f"\nstackctl: {verb} refused: {len(errors)} rule error(s) ({ids}) "
                            f"(fix: correct them, see `stackctl validate {name}`; --ignore-errors goes ahead anyway)")
    for finding in errors:
        print(finding.format(), file=sys.stderr)
    print(f"stackctl: WARNING: --ignore-errors: {verb} goes ahead DESPITE {len(errors)} rule error(s) ({ids}); "
          "recorded in manifest.json as ignored_errors", file=sys.stderr)
    recipe.ignored_errors = [{"rule_id": f.rule_id, "key": f.key, "line": f.line, "message": f.message}
                             for f in errors]
    return recipe
