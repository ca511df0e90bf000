"""Arbitrary TOML and arbitrary values never crash the loader: every outcome is a Recipe or a clean RecipeError."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackctl.errors import RecipeError
from stackctl.recipe import load_recipe_text
from stackctl.recipe.model import SECTION_TYPES, recipe_fields

KEYS = sorted({f.name for cls in SECTION_TYPES.values() for f in recipe_fields(cls())} | {"kind", "size_gb", "x"})
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
                      max_leaves=8)


def toml_value(value) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"


def outcome_is_clean(text: str) -> None:
    try:
        load_recipe_text(text, "fuzz.toml")
    except RecipeError as exc:
        assert exc.findings
        for finding in exc.findings:
            line = finding.format()
            assert line.startswith("fuzz.toml:") and "\n" not in line


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=string.printable, max_size=200))
def test_arbitrary_text(text):
    outcome_is_clean(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(SECTION_TYPES) + ["bogus"]),
                       st.dictionaries(st.sampled_from(KEYS), values, max_size=5), max_size=6),
       st.lists(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), max_size=3))
def test_arbitrary_values_in_known_sections(sections, tiers):
    lines = []
    for section, body in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in body.items()]
    for tier in tiers:
        lines.append("[[cache.tiers]]")
        lines += [f"{key} = {toml_value(value)}" for key, value in tier.items()]
    outcome_is_clean("\n".join(lines) + "\n")
