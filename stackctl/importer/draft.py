"""The draft recipe the mapping fills: a Draft has one SectionValues per recipe section (keys are the recipe model's
own field names; any other key is refused where it is set or read), the cache tiers, per-key comments and the
header's notes. Also the checks a value passes before it enters the draft (control characters, the field's
declared limits, nulls)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from stackctl.recipe import model

CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Keys a recipe cannot do without, and what the user gives instead when the imported value cannot be kept.
REQUIRED_KEYS = {"model.path": "the model's own directory", "stack.name": "another stack name"}

# A cache.tiers entry: its keys (model.Tier's field names) and the comment lines above it.
TierDraft = tuple[dict[str, Any], list[str]]


class SectionValues(dict[str, Any]):
    """One recipe section's values in the order they were found, keyed by the model's field names (a misspelt key
    is a KeyError where it is set or read), with the comment lines written above each key ("" for the section
    itself)."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.fields = {spec.name for spec in model.recipe_fields(model.SECTION_TYPES[name])}
        self.comments: dict[str, list[str]] = {}

    def _check(self, key: str) -> None:
        if key not in self.fields:
            raise KeyError(f"[{self.name}] has no key {key!r}")

    def __setitem__(self, key: str, value: Any) -> None:
        self._check(key)
        super().__setitem__(key, value)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().setdefault(key, default)

    def get(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().get(key, default)

    def set(self, key: str, value: Any, comment: str | None = None) -> None:
        self[key] = value
        if comment:
            self.comment(key, comment)

    def comment(self, key: str, text: str) -> None:
        """A comment line above key ("" puts it under the section header)."""
        if key:
            self._check(key)
        self.comments.setdefault(key, []).append(text)

    def put_first(self, key: str, value: Any) -> None:
        """Set key as the section's first value (stack.name leads its section)."""
        rest = {k: v for k, v in self.items() if k != key}
        self.clear()
        self[key] = value
        for other, other_value in rest.items():
            self[other] = other_value


@dataclass
class Draft:
    """The recipe being imported: typed sections, cache tiers, header notes and the secret values found (never
    written; masked wherever they would show)."""

    stack: SectionValues = field(default_factory=lambda: SectionValues("stack"))
    versions: SectionValues = field(default_factory=lambda: SectionValues("versions"))
    model: SectionValues = field(default_factory=lambda: SectionValues("model"))
    serve: SectionValues = field(default_factory=lambda: SectionValues("serve"))
    cache: SectionValues = field(default_factory=lambda: SectionValues("cache"))
    host: SectionValues = field(default_factory=lambda: SectionValues("host"))
    build: SectionValues = field(default_factory=lambda: SectionValues("build"))
    checks: SectionValues = field(default_factory=lambda: SectionValues("checks"))
    tiers: list[TierDraft] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    secret_values: list[str] = field(default_factory=list)

    def sections(self) -> list[SectionValues]:
        """Every section, in the recipe's order."""
        return [self.section(name) for name in model.SECTION_TYPES]

    def section(self, name: str) -> SectionValues:
        """The section called name (for tables that name a recipe key by section and key)."""
        if name not in model.SECTION_TYPES:
            raise KeyError(f"no recipe section {name!r}")
        section: SectionValues = getattr(self, name)
        return section

    def add_secret_env(self, variables: dict[str, str]) -> None:
        """Name host variables in serve.secret_env (their values are never copied)."""
        self.serve.setdefault("secret_env", {}).update(variables)

    def drop(self, key_path: str) -> bool:
        """Remove the value at a loader key path (`serve.env.X`, `cache.tiers[1].path`); False if there is none."""
        tier = re.match(r"cache\.tiers\[(\d+)\]", key_path)
        if tier and int(tier.group(1)) < len(self.tiers):
            del self.tiers[int(tier.group(1))]
            return True
        parts = key_path.split(".")
        if len(parts) >= 2 and parts[0] in model.SECTION_TYPES and parts[1] != "name":
            section = self.section(parts[0])
            if parts[1] in section:
                del section[parts[1]]
                return True
        return False

    def drop_inner(self, key_path: str) -> bool:
        """Remove the innermost value at a rule's key path: a nested key of a table (`cache.extra.extra_config.x`,
        the table itself when nothing is left in it), a flag of serve.extra_args with the value after it
        (`serve.extra_args[3]`), else what drop() removes. False if there is none."""
        flag = re.fullmatch(r"serve\.extra_args\[(\d+)\]", key_path)
        if flag:
            args, index = self.serve.get("extra_args") or [], int(flag.group(1))
            if index >= len(args):
                return False
            end = index + 1
            if "=" not in args[index] and end < len(args) and not args[end].startswith("-"):
                end += 1  # the flag's value
            del args[index:end]
            if not args:
                del self.serve["extra_args"]
            return True
        section_name, _, rest = key_path.partition(".")
        key, _, inner = rest.partition(".")
        if not inner or section_name not in model.SECTION_TYPES:
            return self.drop(key_path)
        table = self.section(section_name).get(key) if key in self.section(section_name).fields else None
        if not isinstance(table, dict):
            return self.drop(key_path)
        parents, node = [], table
        names = _dotted_keys(node, inner)
        for name in names[:-1]:
            parents.append((node, name))
            node = node[name]
        if not isinstance(node, dict) or names[-1] not in node:
            return False
        del node[names[-1]]
        for parent, name in reversed(parents):
            if not parent[name]:
                del parent[name]
        if not table:
            del self.section(section_name)[key]
        return True


def _dotted_keys(table: dict, dotted: str) -> list[str]:
    """The keys of a nested table a dotted path names, where keys may hold dots themselves
    (`extra_config.remote_storage_plugin.fs.base_path` is two keys)."""
    names: list[str] = []
    node: Any = table
    rest = dotted
    while rest:
        keys = sorted((key for key in node if isinstance(key, str)), key=len, reverse=True) \
            if isinstance(node, dict) else []
        match = next((key for key in keys if rest == key or rest.startswith(key + ".")), None)
        if match is None:
            return names + [rest]
        names.append(match)
        node, rest = node[match], rest[len(match) + 1:]
    return names


def clean(text: str) -> str:
    """Text on one line: control characters (newlines) would end a TOML comment or an error line."""
    return CONTROL.sub(" ", text)


def fits(cls: type[model.Section], key: str, value: Any) -> bool:
    """Whether value meets the recipe field's declared constraints, so the imported recipe loads."""
    meta = cls._fields[key].meta
    if isinstance(value, str) and CONTROL.search(value):
        return False
    if "choices" in meta and value not in meta["choices"]:
        return False
    if "pattern" in meta and isinstance(value, str) and not re.match(meta["pattern"], value):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if "minimum" in meta and value < meta["minimum"] or "maximum" in meta and value > meta["maximum"]:
            return False
        if "exclusive_minimum" in meta and value <= meta["exclusive_minimum"]:
            return False
    return True


def drop_nulls(config: dict, prefix: str = "") -> list[str]:
    """Remove null values (and lists holding one) from a nested config in place; return their dotted names."""
    dropped = []
    for key in list(config):
        if config[key] is None:
            del config[key]
            dropped.append(prefix + key)
        elif isinstance(config[key], dict):
            dropped += drop_nulls(config[key], f"{prefix}{key}.")
        elif isinstance(config[key], list) and any(item is None for item in config[key]):
            del config[key]
            dropped.append(prefix + key)
    return dropped
