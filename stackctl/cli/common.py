"""Small pieces shared by subcommands: loading recipes and refusing those with rule errors."""

from __future__ import annotations

from stackctl.errors import StackctlError
from stackctl.recipe.locate import resolve_recipe_path


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

    from stackctl.rules.ruleset import run_rules

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
