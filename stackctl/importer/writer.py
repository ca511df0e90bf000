"""Writing the draft as commented TOML that the recipe loader accepts, through a small TOML emitter (no dependency)
for the values a recipe holds: strings, integers, floats, booleans, arrays and inline tables."""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

from stackctl.errors import RecipeError, StackctlError
from stackctl.importer.credentials import scrub_draft
from stackctl.importer.draft import REQUIRED_KEYS, Draft, clean
from stackctl.recipe import model
from stackctl.recipe.loader import MAX_DEPTH, load_recipe_text, nesting_depth

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def render_loadable(draft: Draft, sources: str) -> str:
    """The draft as TOML that the recipe loader accepts. Values the loader still refuses (odd input the mapping did
    not foresee, e.g. control characters deep in a table) are dropped with a note naming them. Secrets never get
    this far: every one left becomes a reference first (credentials.scrub_draft)."""
    scrub_draft(draft)
    for section in draft.sections():
        for key, value in list(section.items()):
            if isinstance(value, (dict, list)) and nesting_depth(value) > MAX_DEPTH - 2:
                del section[key]
                draft.notes.append(f"{section.name}.{key} dropped: nested more than a recipe allows ({MAX_DEPTH} "
                                   "levels); set it by hand")
    for _ in range(64):  # each pass removes one refused value; a recipe has far fewer
        text = render(draft, sources)
        try:
            recipe = load_recipe_text(text, "<imported recipe>")
        except RecipeError as exc:
            for finding in exc.findings:
                if not draft.drop(finding.key):
                    raise RuntimeError(f"stackctl import produced a recipe that does not load:\n{exc}\n---\n"
                                       f"{text}") from None
                draft.notes.append(f"{finding.key} dropped: {finding.message}; set it by hand")
            continue
        contradictions = own_key_errors(recipe)
        if not contradictions:
            return text
        finding = contradictions[0]
        if finding.key in REQUIRED_KEYS:  # no recipe without it: the user must give another value
            raise StackctlError(f"{finding.key} cannot be imported: {finding.message} (fix: launch with "
                                f"{REQUIRED_KEYS[finding.key]})")
        if not draft.drop_inner(finding.key):
            raise RuntimeError(f"stackctl import produced a recipe its own rules refuse:\n{finding}\n---\n{text}")
        draft.notes.append(f"{finding.key} not imported: {finding.message} ({finding.rule_id}); set it by hand")
    raise RuntimeError("stackctl import could not produce a recipe that loads")  # pragma: no cover


# Rules that guard stackctl's own keys: what init writes never trips them (the value is left out with a note instead).
OWN_KEY_RULES = ("secret-in-recipe", "cache-extra-shadows-key", "extra-args-shadow-flag", "host-path-unsafe")


def own_key_errors(recipe) -> list:
    """Errors of the rules guarding stackctl's own keys on a recipe, innermost (longest key path) first."""
    from stackctl.rules.ruleset import rule_hits

    found = [_OwnKeyFinding(rule_id, path, message) for rule_id, (path, message) in rule_hits(recipe, OWN_KEY_RULES)]
    return sorted(found, key=lambda f: (len(f.key), f.key), reverse=True)  # innermost, then the last flag first


class _OwnKeyFinding:
    """A guard rule's hit, with the key path as text (what Draft.drop_inner reads)."""

    def __init__(self, rule_id: str, path, message: str):
        from stackctl.findings import key_path_text

        self.rule_id, self.message = rule_id, message
        self.key = key_path_text((path,) if isinstance(path, str) else tuple(path))

    def __str__(self) -> str:
        return f"{self.key}: {self.message} ({self.rule_id})"


def render(draft: Draft, sources: str) -> str:
    """The draft as commented TOML: a header with the import notes, then each section's keys in the model's order."""
    lines = [f"# Imported by `stackctl init --from-command` from {clean(sources)}.",
             "# Check every value, then run `stackctl validate` on this file: its rules report what the old "
             "launch", "# got wrong (a missing hash seed, graphs off, ...)."]
    if draft.notes:
        lines.append("#")
        lines.append("# Import notes:")
        for note in draft.notes:
            lines += _comment_lines(note, bullet=True)
    for section in draft.sections():
        section_notes = section.comments.get("", [])
        has_tiers = section is draft.cache and draft.tiers
        if not section and not section_notes and not has_tiers:
            continue
        lines += ["", f"[{section.name}]"]
        for note in section_notes:
            lines += _comment_lines(note)
        for spec in model.recipe_fields(model.SECTION_TYPES[section.name]):
            if spec.name in section:
                for note in section.comments.get(spec.name, []):
                    lines += _comment_lines(note)
                lines.append(f"{toml_key(spec.name)} = {toml_value(section[spec.name])}")
        if has_tiers:
            for tier, notes in draft.tiers:
                lines += ["", "[[cache.tiers]]"]
                for note in notes:
                    lines += _comment_lines(note)
                for spec in model.recipe_fields(model.Tier):
                    if spec.name in tier:
                        lines.append(f"{toml_key(spec.name)} = {toml_value(tier[spec.name])}")
    return "\n".join(lines) + "\n"


def _comment_lines(text: str, bullet: bool = False) -> list[str]:
    first, rest = ("# - ", "#   ") if bullet else ("# ", "# ")
    wrapped = textwrap.wrap(clean(text), width=112, break_long_words=False, break_on_hyphens=False) or [""]
    return [(first if i == 0 else rest) + line for i, line in enumerate(wrapped)]


def toml_key(key: str) -> str:
    """A key, bare when TOML allows it, else quoted."""
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, not {type(key).__name__}")
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    """A basic (double-quoted) TOML string; control characters escaped."""
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("a lone surrogate cannot be written as TOML")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """One value in TOML syntax (maps as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:
            raise ValueError(f"{value} does not fit a TOML integer")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
