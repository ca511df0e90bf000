"""Small pieces shared by subcommands: the stack spec of a recipe, and refusing recipes with rule errors.

Every command that acts on a stack derives its StackSpec here, once, from the recipe file and this shell's options
(STACKCTL_CPU_ISA_CAP; --ignore-errors), and hands it on; nothing below reads those options again."""

from __future__ import annotations

from stackctl.errors import StackctlError
from stackctl.recipe.locate import resolve_recipe_path


def load(name: str):
    """The StackSpec of one recipe (raises RecipeError with every problem of the file)."""
    from stackctl.bundle.stackspec import StackSpec
    from stackctl.recipe import load_recipe
    from stackctl.recipe.isa_cap import shell_isa_cap

    return StackSpec(load_recipe(resolve_recipe_path(name)), isa_cap=shell_isa_cap())


def spec_of(recipe):
    """The StackSpec of a recipe made here rather than read from a file (doctor's stand-in recipe of a host)."""
    from stackctl.bundle.stackspec import StackSpec

    return StackSpec(recipe)


def load_checked(name: str, verb: str, ignore_errors: bool = False):
    """Load a recipe and run the rules: `render`, `build` and `up` refuse a recipe with errors, unless the user
    passes --ignore-errors, which is said loudly and recorded (manifest.json's ignored_errors)."""
    return check_rules(load(name), name, verb, ignore_errors)


def check_rules(spec, name: str, verb: str, ignore_errors: bool = False):
    """The rule check of load_checked, for a stack spec already derived; returns the spec (with the errors gone
    ahead despite, under --ignore-errors)."""
    import sys

    from stackctl.rules.ruleset import run_rules

    errors = [f for f in run_rules(spec.recipe, spec=spec) if f.severity == "error"]
    if not errors:
        return spec
    ids = ", ".join(sorted({f.rule_id for f in errors}))
    if not ignore_errors:
        lines = [f.format() for f in errors]
        raise StackctlError("\n".join(lines) + f"\nstackctl: {verb} refused: {len(errors)} rule error(s) ({ids}) "
                            f"(fix: correct them, see `stackctl validate {name}`; --ignore-errors goes ahead anyway)")
    for finding in errors:
        print(finding.format(), file=sys.stderr)
    print(f"stackctl: WARNING: --ignore-errors: {verb} goes ahead DESPITE {len(errors)} rule error(s) ({ids}); "
          "recorded in manifest.json as ignored_errors", file=sys.stderr)
    return spec.with_ignored_errors({"rule_id": f.rule_id, "key": f.key, "line": f.line, "message": f.message}
                                    for f in errors)
