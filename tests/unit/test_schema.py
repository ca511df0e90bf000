"""`stackctl schema` is a valid JSON Schema (checked with the jsonschema package's meta-schema) and accepts every
recipe stackctl loads: the shipped recipes and every rule fixture (rule fixtures load; only their rules differ)."""

from __future__ import annotations

import jsonschema
import pytest
import tomllib
from helpers import FIXTURES, RECIPES

from stackctl.recipe.loader import load_recipe
from stackctl.recipe.schema import json_schema

SCHEMA = json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
LOADABLE = sorted(RECIPES.glob("*.toml")) + sorted((FIXTURES / "rules").glob("*/*.toml"))


def test_schema_is_valid_draft_2020_12():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _subschemas(node):
    """Every dict in the schema (subschemas, and the name -> subschema maps, which have no string "type")."""
    if isinstance(node, dict):
        yield node
        node = list(node.values())
    if isinstance(node, list):
        for child in node:
            yield from _subschemas(child)


def test_keywords_fit_their_types():
    """Draft 2020-12 ignores a keyword of another type (pattern on an object) silently: a check that never runs."""
    subschemas = list(_subschemas(SCHEMA))
    assert sum(sub.get("type") == "object" for sub in subschemas) > 10
    for sub in subschemas:
        if sub.get("type") == "object":
            assert not {"pattern", "items", "minimum"} & set(sub), sub
        if sub.get("type") == "array":
            assert not {"pattern", "properties"} & set(sub), sub


@pytest.mark.parametrize("path", LOADABLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_loadable_recipe_validates(path):
    load_recipe(path)  # stackctl accepts it, so the schema must too
    errors = sorted(VALIDATOR.iter_errors(tomllib.loads(path.read_text())), key=lambda e: list(e.path))
    assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors]


@pytest.mark.parametrize(("section", "key", "value"), [
    ("serve", "env", {"lower-case": "x"}),
    ("serve", "secret_env", {"TOKEN": "not a name"}),
    ("versions", "gpu_arch", ["sm_90"]),
    ("stack", "name", "Bad Name"),
])
def test_schema_rejects_what_the_loader_rejects(section, key, value):
    recipe = tomllib.loads((RECIPES / "cpu-smoke.toml").read_text())
    recipe.setdefault(section, {})[key] = value
    assert list(VALIDATOR.iter_errors(recipe)), f"{section}.{key} = {value!r} passed the schema"
