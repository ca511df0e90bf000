"""The recipe format as JSON Schema and as a Markdown reference, both generated from recipe/model.py."""

from __future__ import annotations

import copy

from stackctl.recipe.model import Cache, Recipe, Tier, recipe_fields

_KIND_SCHEMAS: dict[str, dict] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "str_list": {"type": "array", "items": {"type": "string"}},
    "int_list": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    "str_map": {"type": "object", "additionalProperties": {"type": "string"}},
    "table": {"type": "object"},
    "table_list": {"type": "array", "items": {"type": "object"}},
    "numa": {"anyOf": [{"enum": ["auto", "off"]}, {"type": "integer", "minimum": 0},
                       {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}]},
    "cpulist_or_mode": {"type": "string", "pattern": r"^(auto|off|\d+(-\d+)?(,\d+(-\d+)?)*)$"},
}
_TOML_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "str_list": "array of "
               "strings", "int_list": "array of integers", "str_map": "table of strings", "table": "table",
               "table_list": "array of tables",
               "numa": '"auto", "off", integer or array', "cpulist_or_mode": '"auto", "off" or cpulist',
               "tiers": "array of tables", "section": "table"}


def json_schema() -> dict:
    """JSON Schema (draft 2020-12) of a recipe, for editors' TOML completion (e.g. Taplo, Even Better TOML)."""
    schema = _section_schema(Recipe)
    schema.update({"$schema": "https://json-schema.org/draft/2020-12/schema",
                   "$id": "https://stackctl.dev/schema/recipe.json", "title": "stackctl recipe"})
    return schema


def _section_schema(cls) -> dict:
    properties, required = {}, []
    for spec in recipe_fields(cls):
        properties[spec.name] = _field_schema(spec)
        if spec.required:
            required.append(spec.name)
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _field_schema(spec) -> dict:
    meta = spec.meta
    kind = spec.kind
    if kind == "section":
        schema = _section_schema(spec.default)
    elif kind == "tiers":
        schema = {"type": "array", "items": _section_schema(Tier)}
    else:
        schema = copy.deepcopy(_KIND_SCHEMAS[kind])  # the nested items/value schemas get constraints below
    schema["description"] = spec.doc
    # Each keyword goes where its type is: a pattern on an array or a table applies to its items or values.
    values = schema.get("items") or schema.get("additionalProperties")
    if "key_pattern" in meta:
        schema["patternProperties"] = {meta["key_pattern"]: schema.pop("additionalProperties")}
        schema["additionalProperties"] = False
    for key in ("minimum", "maximum", "exclusive_minimum", "pattern"):
        if key in meta:
            target = values if key == "pattern" and isinstance(values, dict) else schema
            target["exclusiveMinimum" if key == "exclusive_minimum" else key] = meta[key]
    if "choices" in meta:
        schema["enum"] = list(meta["choices"])
    default = _default(spec)
    if default is not None and kind not in ("section", "tiers"):
        schema["default"] = default
    return schema


def _default(spec):
    return None if spec.kind in ("section", "tiers") else spec.make_default()


def markdown_reference() -> str:
    """The recipe reference for the README: one table per section."""
    out = []
    for section in recipe_fields(Recipe):
        cls = section.default
        out += _table(f"[{section.name}]", section.doc, cls)
        if cls is Cache:
            out += _table("[[cache.tiers]]", "One KV tier below GPU HBM.", Tier)
    return "\n".join(out).rstrip() + "\n"


def _table(header: str, doc: str, cls) -> list:
    rows = [f"### `{header}`", "", doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for spec in recipe_fields(cls):
        if spec.kind == "tiers":
            continue
        meta = spec.meta
        default = "required" if spec.required else _format_default(_default(spec))
        meaning = spec.doc
        if "choices" in meta:
            meaning += " One of: " + ", ".join(f"`{c}`" for c in meta["choices"]) + "."
        rows.append(f"| `{spec.name}` | {_TOML_TYPES[spec.kind]} | {default} | {meaning} |")
    return rows + [""]


def _format_default(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if value in ([], {}):
        return "empty"
    return f"`{value}`"
