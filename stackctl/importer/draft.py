"""The draft recipe: values by section with their comments and notes, rendered as commented TOML that loads."""

from __future__ import annotations

import re
import textwrap

from stackctl.errors import RecipeError
from stackctl.importer.toml_writer import toml_key, toml_value
from stackctl.importer.values import clean
from stackctl.recipe import model
from stackctl.recipe.loader import load_recipe_text


class Draft:
    """Recipe values by section, with a comment per key, section notes and header notes; renders itself as TOML."""

    def __init__(self):
        self.values: dict[str, dict] = {section: {} for section in model.SECTION_TYPES}
        self.comments: dict[tuple, list[str]] = {}  # (section, key) -> lines above the key; key "" for the section
        self.tiers: list[tuple[dict, list[str]]] = []  # cache.tiers entries with their comments
        self.notes: list[str] = []  # the header's "Import notes"
        self.secret_values: list[str] = []  # secrets found (never written; masked wherever they would show)

    def set(self, section: str, key: str, value, comment: str | None = None) -> None:
        self.values[section][key] = value
        if comment:
            self.comment(section, key, comment)

    def comment(self, section: str, key: str, text: str) -> None:
        self.comments.setdefault((section, key), []).append(text)

    def get(self, section: str, key: str, default=None):
        return self.values[section].get(key, default)

    def drop(self, key_path: str) -> bool:
        """Remove the value at a loader key path (`serve.env.X`, `cache.tiers[1].path`); False if there is none."""
        tier = re.match(r"cache\.tiers\[(\d+)\]", key_path)
        if tier and int(tier.group(1)) < len(self.tiers):
            del self.tiers[int(tier.group(1))]
            return True
        parts = key_path.split(".")
        if len(parts) >= 2 and parts[0] in self.values and parts[1] in self.values[parts[0]] and parts[1] != "name":
            del self.values[parts[0]][parts[1]]
            return True
        return False

    def render(self, sources: str) -> str:
        lines = [f"# Imported by `stackctl init --from-command` from {clean(sources)}.",
                 "# Check every value, then run `stackctl validate` on this file: its rules report what the old "
                 "launch", "# got wrong (a missing hash seed, graphs off, ...)."]
        if self.notes:
            lines.append("#")
            lines.append("# Import notes:")
            for note in self.notes:
                lines += _comment_lines(note, bullet=True)
        for section, cls in model.SECTION_TYPES.items():
            values = self.values[section]
            section_notes = self.comments.get((section, ""), [])
            has_tiers = section == "cache" and self.tiers
            if not values and not section_notes and not has_tiers:
                continue
            lines += ["", f"[{section}]"]
            for note in section_notes:
                lines += _comment_lines(note)
            for spec in model.recipe_fields(cls):
                if spec.name in values:
                    for note in self.comments.get((section, spec.name), []):
                        lines += _comment_lines(note)
                    lines.append(f"{toml_key(spec.name)} = {toml_value(values[spec.name])}")
            if has_tiers:
                for tier, notes in self.tiers:
                    lines += ["", "[[cache.tiers]]"]
                    for note in notes:
                        lines += _comment_lines(note)
                    for spec in model.recipe_fields(model.Tier):
                        if spec.name in tier:
                            lines.append(f"{toml_key(spec.name)} = {toml_value(tier[spec.name])}")
        return "\n".join(lines) + "\n"


def render_loadable(draft: Draft, sources: str) -> str:
    """The draft as TOML that the recipe loader accepts. Values the loader still refuses (odd input the mapping did
    not foresee, e.g. control characters deep in a table) are dropped with a note naming them. Secrets never get
    this far: every one left becomes a reference first (credentials.scrub_draft)."""
    from stackctl.importer.credentials import scrub_draft
    from stackctl.recipe.loader import MAX_DEPTH, nesting_depth

    scrub_draft(draft)
    for section, fields in draft.values.items():
        for key, value in list(fields.items()):
            if isinstance(value, (dict, list)) and nesting_depth(value) > MAX_DEPTH - 2:
                del fields[key]
                draft.notes.append(f"{section}.{key} dropped: nested more than a recipe allows ({MAX_DEPTH} "
                                   "levels); set it by hand")
    for _ in range(8):
        text = draft.render(sources)
        try:
            load_recipe_text(text, "<imported recipe>")
            return text
        except RecipeError as exc:
            for finding in exc.findings:
                if not draft.drop(finding.key):
                    raise RuntimeError(f"stackctl import produced a recipe that does not load:\n{exc}\n---\n"
                                       f"{text}") from None
                draft.notes.append(f"{finding.key} dropped: {finding.message}; set it by hand")
    raise RuntimeError("stackctl import could not produce a recipe that loads")  # pragma: no cover


def _comment_lines(text: str, bullet: bool = False) -> list[str]:
    first, rest = ("# - ", "#   ") if bullet else ("# ", "# ")
    wrapped = textwrap.wrap(clean(text), width=112, break_long_words=False, break_on_hyphens=False) or [""]
    return [(first if i == 0 else rest) + line for i, line in enumerate(wrapped)]
