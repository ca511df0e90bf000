"""Load a recipe TOML file into a typed Recipe, reporting every problem at once with its line and column."""

from __future__ import annotations

import math
import os
import re

from stackctl import toml_parser
from stackctl.errors import RecipeError, StackctlError
from stackctl.findings import Finding, key_path_text
from stackctl.knowledge.kinds import TIER_KINDS, TIER_KINDS_BY_NAME, url_scheme
from stackctl.recipe.model import Recipe, Tier, recipe_fields
from stackctl.recipe.positions import index_positions, lookup
from stackctl.secrets import is_secret_name, redact

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from pathlib import Path
    from typing import Any


# Key names that would put a secret value into the recipe. Recipes name where a secret comes from instead.
_INLINE_SECRET_KEYS = {
    "access_key": "access_key_env", "secret_key": "secret_key_env", "access_key_id": "access_key_env",
    "secret_access_key": "secret_key_env", "aws_access_key_id": "access_key_env",
    "aws_secret_access_key": "secret_key_env", "password": "a *_env reference", "token": "a *_env reference",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file; raise RecipeError listing every problem, or StackctlError if unreadable."""
    path = os.fspath(path)  # plain strings: pathlib costs more start-up time than a whole validate run may spend
    try:
        text = read_small_text(path, "recipe", MAX_RECIPE_BYTES)
    except FileNotFoundError:
        raise StackctlError(f"{path}: no such recipe file (fix: check the path, or list shipped recipes with "
                            "`stackctl init --list`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StackctlError(f"{path}: cannot read recipe: {exc}") from None
    return load_recipe_text(text, path)


def read_small_text(path: str, what: str, limit: int) -> str:
    """A text file's content, refusing what is not a regular file (a FIFO would block, /dev/zero never ends) or is
    larger than `limit` bytes, before reading anything."""
    import stat

    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise StackctlError(f"{path}: not a regular file (fix: give the path of a {what} file)")
    if info.st_size > limit:
        raise StackctlError(f"{path}: {info.st_size:,} bytes, over the limit for a {what} ({limit:,} bytes) "
                            "(fix: check the path)")
    with open(path, encoding="utf-8") as handle:
        return handle.read(limit + 1)


MAX_RECIPE_BYTES = 1_000_000
MAX_DEPTH = 32  # tables and arrays inside each other; real recipes use 4


def load_recipe_text(text: str, source: str = "<recipe>") -> Recipe:
    """Parse recipe text; ``source`` names it in messages."""
    try:
        data = toml_parser.loads(text)
    except toml_parser.TOMLDecodeError as exc:
        raise RecipeError([_syntax_finding(exc, source)]) from None
    except RecursionError:
        data = None
    if data is None or nesting_depth(data) > MAX_DEPTH:
        raise RecipeError([Finding(source, 1, 1, "", f"tables and arrays nested more than {MAX_DEPTH} deep",
                                   "flatten the recipe: its keys nest a few levels at most")])
    loader = _Loader(source, index_positions(text))
    recipe = loader.build_recipe(data)
    if loader.findings:
        raise RecipeError(loader.findings)
    recipe.source = source
    recipe.positions = loader.positions
    return recipe


def _syntax_finding(exc: Exception, source: str) -> Finding:
    message = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", message)
    line, col = (int(match.group(1)), int(match.group(2))) if match else (1, 1)
    message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message) or "invalid TOML"
    message = message[0].lower() + message[1:]
    return Finding(source, line, col, "", f"TOML syntax: {message}", "see https://toml.io for the syntax")


class _Loader:
    """Walks the parsed TOML against the model's field declarations, collecting findings."""

    def __init__(self, source: str, positions: dict):
        self.source = source
        self.positions = positions
        self.findings: list[Finding] = []

    def problem(self, path: tuple, message: str, fix: str = "") -> None:
        line, col = lookup(self.positions, path)
        message = redact(message)  # messages quote bad values: never a secret-shaped one
        self.findings.append(Finding(self.source, line, col, key_path_text(path), message, fix))

    def build_recipe(self, data: dict) -> Recipe:
        return self.build_section(Recipe, data, ())

    def build_section(self, cls, data: Any, path: tuple):
        if not isinstance(data, dict):
            self.problem(path, f"must be a table, not {_toml_type(data)}", f"write it as [{key_path_text(path)}]")
            return cls()
        declared = {f.name: f for f in recipe_fields(cls)}
        self.reject_unknown_keys(data, declared, path)
        values = {}
        for name, spec in declared.items():
            key_path = path + (name,)
            if name not in data and spec.kind == "section":
                # An absent section still has required keys to report.
                values[name] = self.build_section(spec.default, {}, key_path)
                continue
            if name not in data:
                if spec.required:
                    where = key_path_text(path) or "the recipe"
                    self.problem(key_path, "is required", f"add `{name} = ...` to [{where}]")
                continue
            value = self.convert(spec, data[name], key_path)
            if value is not None:
                values[name] = value
        return cls(**values)

    def reject_unknown_keys(self, data: dict, declared: dict, path: tuple) -> None:
        for key in data:
            if key in declared:
                continue
            key_path = path + (key,)
            if key.lower() in _INLINE_SECRET_KEYS or is_secret_name(key):
                self.problem(key_path, "secrets never go in a recipe",
                             f"put the value in a host environment variable and name it with "
                             f"{_INLINE_SECRET_KEYS.get(key.lower(), 'a *_env reference')}")
                continue
            close = _close_match(key, list(declared), cutoff=0.6)
            hint = f"did you mean `{close}`?" if close else f"known keys: {', '.join(sorted(declared))}"
            self.problem(key_path, "unknown key", hint)

    def convert(self, spec, value: Any, path: tuple) -> Any:
        """Check one value against its declared kind and constraints; return the value to store (None if bad)."""
        kind = spec.kind
        converter = getattr(self, f"_convert_{kind}")
        result = converter(spec, value, path)
        if result is not None:
            self.check_constraints(spec, result, path)
        return result

    # -- one converter per field kind -------------------------------------------------------------------------

    def _convert_section(self, spec, value, path):
        return self.build_section(spec.default, value, path)

    def _convert_str(self, spec, value, path):
        if isinstance(value, str):
            return value
        return self.wrong_type(path, value, "a string", f'{path[-1]} = "{_example(spec)}"')

    def _convert_int(self, spec, value, path):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return self.wrong_type(path, value, "an integer", f"{path[-1]} = {_example(spec, 1)}")

    def _convert_float(self, spec, value, path):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                self.problem(path, "must be a finite number", f"{path[-1]} = {_example(spec, 1.0)}")
                return None
            return float(value)
        return self.wrong_type(path, value, "a number", f"{path[-1]} = {_example(spec, 1.0)}")

    def _convert_bool(self, spec, value, path):
        if isinstance(value, bool):
            return value
        return self.wrong_type(path, value, "true or false", f"{path[-1]} = true")

    def _convert_str_list(self, spec, value, path):
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return list(value)
        return self.wrong_type(path, value, "a list of strings", f'{path[-1]} = ["..."]')

    def _convert_int_list(self, spec, value, path):
        if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            negative = [i for i in value if i < 0]
            if negative:
                self.problem(path, f"must be >= 0, got {negative[0]}", f"{path[-1]} = [0, 1]")
                return None
            return list(value)
        return self.wrong_type(path, value, "a list of non-negative integers", f"{path[-1]} = [0, 1]")

    def _convert_str_map(self, spec, value, path):
        if not isinstance(value, dict):
            return self.wrong_type(path, value, "a table of strings", f'{path[-1]} = {{ NAME = "value" }}')
        good = True
        for key, item in value.items():
            if not isinstance(item, str):
                self.problem(path + (key,), f"must be a string, not {_toml_type(item)}",
                             f'quote it: {key} = "{item}"' if isinstance(item, (int, float)) else "use a string")
                good = False
        return dict(value) if good else None

    def _convert_table(self, spec, value, path):
        if isinstance(value, dict):
            return dict(value)
        return self.wrong_type(path, value, "a table", f"{path[-1]} = {{ key = value }}")

    def _convert_table_list(self, spec, value, path):
        if isinstance(value, list) and all(isinstance(item, dict) for item in value):
            return [dict(item) for item in value]
        return self.wrong_type(path, value, "an array of tables", f"write each entry as [[cache.{path[-1]}]]")

    def _convert_tiers(self, spec, value, path):
        if not isinstance(value, list):
            return self.wrong_type(path, value, "an array of tables", "write each tier as [[cache.tiers]]")
        tiers = []
        for index, item in enumerate(value):
            tier = self.build_tier(item, path + (index,))
            if tier is not None:
                tiers.append(tier)
        kinds = [t.kind for t in tiers]
        # LMCache has one slot per kind: local_cpu, local_disk, remote_url (s3) and the fs storage plugin. An s3 and
        # an fs tier coexist (two remote backends), two of one kind do not.
        for kind in TIER_KINDS:
            if kinds.count(kind) > 1:
                self.problem(path + (_last_index(kinds, kind),), f"only one {kind} tier is supported",
                             "merge them into one tier")
        # Two kinds written as the same LMCache key (two remote_url kinds) cannot coexist: the later would silently
        # replace the earlier in lmcache.yaml.
        records = [TIER_KINDS_BY_NAME[kind] for kind in kinds]
        for index, record in enumerate(records):
            for earlier in records[:index]:
                shared = sorted(set(record.lmcache_keys) & set(earlier.lmcache_keys))
                if earlier is not record and shared:
                    self.problem(path + (index,), f"a {record.name} tier and a {earlier.name} tier are both "
                                 f"LMCache's {', '.join(shared)}: LMCache takes one", "keep one of them")
        return tiers

    def _convert_numa(self, spec, value, path):
        if value in ("auto", "off"):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                     for v in value):
            return list(value)
        numbers = value if isinstance(value, list) else [value]
        if numbers and all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
            self.problem(path, f"must be >= 0, got {min(numbers)}", 'numa = "auto", or a node number such as 0')
            return None
        return self.wrong_type(path, value, '"auto", "off", a node number or a list of nodes', 'numa = "auto"')

    def _convert_cpulist_or_mode(self, spec, value, path):
        if isinstance(value, str) and (value in ("auto", "off") or re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", value)):
            return value
        return self.wrong_type(path, value, '"auto", "off" or a cpulist such as "8-15,24"', 'isolcpus = "auto"')

    # -- shared helpers ---------------------------------------------------------------------------------------

    def wrong_type(self, path, value, expected, fix):
        self.problem(path, f"must be {expected}, not {_toml_type(value)}", f"write it as `{fix}`")

    def check_constraints(self, spec, value, path) -> None:
        meta = spec.meta
        name = path[-1]
        texts = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        if any(isinstance(t, str) and _CONTROL.search(t) for t in texts):
            self.problem(path, "must not contain control characters (newlines, tabs, NUL)", "write it on one line")
            return
        if "choices" in meta and value not in meta["choices"]:
            close = _close_match(str(value), [str(c) for c in meta["choices"]], cutoff=0.5)
            hint = f"did you mean `{close}`?" if close else "use one of " + ", ".join(map(str, meta["choices"]))
            self.problem(path, f"{value!r} is not one of {', '.join(map(str, meta['choices']))}", hint)
        if "minimum" in meta and isinstance(value, (int, float)) and value < meta["minimum"]:
            self.problem(path, f"must be >= {meta['minimum']}, got {value}", f"set {name} to at least {meta['minimum']}")
        if "maximum" in meta and isinstance(value, (int, float)) and value > meta["maximum"]:
            self.problem(path, f"must be <= {meta['maximum']}, got {value}", f"set {name} to at most {meta['maximum']}")
        if "exclusive_minimum" in meta and isinstance(value, (int, float)) and value <= meta["exclusive_minimum"]:
            self.problem(path, f"must be > {meta['exclusive_minimum']}, got {value}",
                         f"set {name} to a positive value")
        if "key_pattern" in meta and isinstance(value, dict):
            for key in value:
                if not re.match(meta["key_pattern"], key):
                    self.problem(path + (key,), f"{key!r} is not a variable name", "use letters, digits and _")
        if "pattern" in meta:
            items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
            for item in items:
                if isinstance(item, str) and not re.match(meta["pattern"], item):
                    self.problem(path, f"{item!r} does not match {meta['pattern']}",
                                 f"for example {meta.get('example', 'see `stackctl schema`')}")
        if name == "pip_index" and isinstance(value, str) and re.match(r"^[a-z+]+://[^/]*@", value):
            self.problem(path, "holds credentials; secrets never go in a recipe (they would stay in the image)",
                         "give pip its credentials through a netrc file or keyring on the build host")
        if name == "env" and isinstance(value, dict):
            for key in value:
                if is_secret_name(key):
                    self.problem(path + (key,), "looks like a secret; secrets never go in a recipe",
                                 f'move it to serve.secret_env: {key} = "NAME_OF_HOST_VARIABLE"')

    def build_tier(self, data: Any, path: tuple):
        if not isinstance(data, dict):
            return self.wrong_type(path, data, "a table", "[[cache.tiers]] with kind = ...")
        tier = self.build_section(Tier, data, path)
        record = TIER_KINDS_BY_NAME.get(tier.kind)
        if record is None:
            return None
        for key in data:
            if key != "kind" and key not in record.allowed and key in Tier._fields:
                self.problem(path + (key,), f"does not apply to a {tier.kind} tier",
                             f"remove it; a {tier.kind} tier takes {', '.join(sorted(record.allowed))}")
        for key in sorted(record.required):
            if key not in data:
                self.problem(path, f"a {tier.kind} tier needs {key}", f"add `{key} = ...` to this [[cache.tiers]]")
        if tier.url is not None and record.url_schemes and url_scheme(tier.url) not in record.url_schemes:
            schemes = " or ".join(f"{scheme}://" for scheme in record.url_schemes)
            self.problem(path + ("url",), f"{tier.url!r}: a {tier.kind} tier's url starts with {schemes}",
                         f"write the {tier.kind} endpoint as {record.url_schemes[0]}://HOST[:PORT]")
        return tier


def nesting_depth(data) -> int:
    """How deeply tables and arrays nest (iteratively: a recursive walk is what a deep document breaks)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _last_index(items: list, item) -> int:
    return len(items) - 1 - items[::-1].index(item)


def _toml_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "a table"}
    for python_type, name in names.items():
        if isinstance(value, python_type):
            return name
    return "a date/time" if value is not None else "nothing"


def _close_match(word: str, candidates: list, cutoff: float) -> str | None:
    import difflib  # only on the error path

    close = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return close[0] if close else None


def _example(spec, fallback: Any = "...") -> Any:
    meta = spec.meta
    if "example" in meta:
        return meta["example"]
    if "choices" in meta:
        return meta["choices"][0]
    return fallback
