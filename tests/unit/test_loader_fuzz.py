"""Arbitrary TOML and arbitrary values never crash the loader: every outcome is a Recipe or a clean RecipeError."""

import os
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackctl.bundle import keys
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


# -- the free-form places: serve.extra_args, serve.env values, cache.extra ---------------------------------------
# Never a traceback (only a clean RecipeError or StackctlError), and a planted secret never shows: not in a finding,
# not in an error, not in a rendered file.

from stackctl.errors import StackctlError  # noqa: E402
from stackctl.rules.ruleset import run_rules  # noqa: E402
from stackctl.bundle.render import render_files  # noqa: E402
from stackctl.bundle.stackspec import StackSpec  # noqa: E402

SHAPED = ["AKIAQ3EXAMPLEFUZZ001", "hf_FuzzCanaryToken0123456789abcdefgh", "ghp_FuzzCanary0123456789abcdefghijklmno",
          "sk-proj-FuzzCanary0123456789abcdefXYZ", "https://u:Fuzz-Pw-31415@idx.example/simple"]
PLAIN = "Fuzz-Plain-Secret-2718"  # found by the name next to it only
CANARIES = SHAPED[:4] + ["Fuzz-Pw-31415", PLAIN]
FLAGS = sorted(keys.SERVE_FLAG_KEYS) + ["--max-log-len", "-O3", "--foo_bar", "-"]
plain_values = st.one_of(st.text(max_size=12), st.sampled_from(["0", "-1", "1.5", "1e300", "nan", "{}", "{\"a\":1}",
                                                                 "FULL", "8000", "99999", ""]))
arg_units = st.one_of(
    st.tuples(st.sampled_from(FLAGS)),
    st.tuples(st.sampled_from(FLAGS), plain_values),
    st.builds(lambda f, v: (f"{f}={v}",), st.sampled_from(FLAGS), plain_values),
    st.tuples(st.sampled_from(["--api-key", "--hf-token", "--s3-secret-key"]), st.just(PLAIN)),
    st.builds(lambda f: (f"{f}={PLAIN}",), st.sampled_from(["--api-key", "--db-password"])),
    st.tuples(st.sampled_from(SHAPED)),
)
extra_keys = st.one_of(st.sampled_from(sorted(keys.LMCACHE_KEYS) + ["extra_config", "remote_serde", "x"]),
                       st.text(alphabet=string.ascii_letters + "_.", min_size=1, max_size=10))
secret_names = st.sampled_from(["s3_secret_key", "Password", "api_token", "ACCESS_KEY", "auth"])
extra_values = st.recursive(
    st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False), plain_values, st.sampled_from(SHAPED)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(extra_keys, inner, max_size=3)),
    max_leaves=8)


def _extra_with_secrets(extra: dict, planted: dict) -> dict:
    return {**extra, **{name: PLAIN for name in planted}}


def fuzz_recipe(args, env, extra) -> str:
    lines = ['[stack]', 'name = "fuzz"', 'platform = "cpu"', "[model]", 'path = "/models/m"', "[serve]",
             f"extra_args = {toml_value(args)}",
             "env = {" + ", ".join(f"{k} = {toml_value(v)}" for k, v in env.items()) + "}",
             "[cache]", "enabled = true", f"extra = {toml_value(extra)}"]
    return "\n".join(lines) + "\n"


def assert_never_leaks(text: str) -> None:
    outputs = []
    try:
        recipe = load_recipe_text(text, "fuzz.toml")
    except RecipeError as exc:
        outputs.append(str(exc))
    else:
        outputs += [f.format() for f in run_rules(recipe)]
        try:
            outputs += [content.decode(errors="replace") for content in render_files(StackSpec(recipe)).values()]
        except StackctlError as exc:
            outputs.append(str(exc))
    for output in outputs:
        for canary in CANARIES:
            assert canary not in output, (canary, output[:300])


@settings(max_examples=int(os.environ.get("STACKCTL_FUZZ_EXAMPLES", 300)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(arg_units, max_size=6),
       st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True),
                       st.one_of(plain_values, st.sampled_from(SHAPED)), max_size=4),
       st.dictionaries(extra_keys, extra_values, max_size=4),
       st.lists(secret_names, max_size=2))
def test_free_form_places_never_crash_or_leak(units, env, extra, planted):
    args = [token for unit in units for token in unit]
    assert_never_leaks(fuzz_recipe(args, env, _extra_with_secrets(extra, planted)))


@settings(max_examples=int(os.environ.get("STACKCTL_FUZZ_EXAMPLES", 200)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(arg_units, max_size=6),
       st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True),
                       st.one_of(plain_values, st.sampled_from(SHAPED)), max_size=4),
       st.lists(secret_names, max_size=2))
def test_import_of_the_same_places_never_crashes_or_leaks(units, env, planted):
    import shlex

    from stackctl.importer import import_launch_text

    env = {**env, **{name.upper(): PLAIN for name in planted}}
    args = [token for unit in units for token in unit]
    script = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
    script += "vllm serve /models/m " + " ".join(shlex.quote(a) for a in args) + "\n"
    try:
        text = import_launch_text(script, None, "fuzz")
    except StackctlError as exc:
        text = str(exc)
    else:
        load_recipe_text(text, "imported.toml")  # always loads
    for canary in CANARIES:
        assert canary not in text, (canary, text)
