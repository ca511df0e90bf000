"""Rules judged against the facts read from the packages themselves (stackctl/knowledge/facts/, written by
scripts/extract-facts.py): every `vllm serve` flag the recipe makes (typed keys and serve.extra_args), every
compilation_config / pass_config key, every VLLM_* and LMCACHE_* variable of serve.env, every cache.extra key of
LMCache's config, the remote_url scheme and the KV connector name, for the release the recipe pins (the nearest
release with facts when that one has none, and the message says so).

Severity follows what the package does: what makes `vllm serve` exit (an unknown flag, a bad value, a key its
config classes forbid, an unregistered connector) is an error; what the package only warns about and ignores (an
unknown variable, an unknown LMCache key) is a warning. Keys that a hand-written rule already judges
(compat.toml: pass-config-version, compilation-key-removed, removed-env-var) are left to that rule.
"""

from __future__ import annotations

import json

from stackctl.knowledge import compat
from stackctl.knowledge import facts as factdb
from stackctl.knowledge.serve_flags import json_flag_values
from stackctl.rules.registry import package_version, rule

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable, Iterator

    from stackctl.rules.registry import Hit

COMPILATION_FLAGS = ("--compilation-config", "-cc")


OLDEST_SUPPORTED = {"vllm": "0.19.0", "lmcache": "0.4.1"}


def fact_rule(rule_id: str, severity: str, summary: str, fix: str, package: str,
              judged: Callable[..., bool] | None = None):
    """Register JUDGE(recipe, release) as a rule on the facts of the recipe's PACKAGE release. With that version
    unknown, what every supported release reports is still reported (a flag no release has needs no version to be
    judged), and `version-unknown` names the rule only when the releases disagree. JUDGED(recipe), when given, says
    whether the recipe holds anything the rule judges: when it does not, no release's facts are read (with the
    version unknown, that would be every release's) and the rule reports nothing, as JUDGE would."""

    def register(judge):
        def has_input(spec) -> bool:
            return judged is None or judged(spec)

        def check(spec):
            release = factdb.release(package, package_version(spec, package)) if has_input(spec) else None
            return judge(spec, release) if release is not None else iter(())

        check.__doc__ = judge.__doc__
        rule(rule_id, severity, summary, fix, needs_version=package,
             applies=lambda spec: has_input(spec) and _verdicts(spec, package, judge)[1],
             unknown_check=lambda spec: _verdicts(spec, package, judge)[0] if has_input(spec) else [])(check)
        return judge

    return register


def _verdicts(spec, package: str, judge) -> tuple[list, bool]:
    """(hits every supported release reports, whether the releases disagree) for a recipe whose version is
    unknown. The message is the newest release's, saying the version was not known."""
    from stackctl.knowledge.compat import version_key

    oldest = version_key(OLDEST_SUPPORTED[package])
    releases = [v for v in factdb.versions(package) if version_key(v) >= oldest]
    per_release = [{tuple(path) if not isinstance(path, str) else (path,): message
                    for path, message in judge(spec, factdb.release(package, version))} for version in releases]
    common = set(per_release[0]).intersection(*per_release[1:]) if per_release else set()
    disagree = any(set(hits) != common for hits in per_release)
    name = "vLLM" if package == "vllm" else "LMCache"
    span = f"{releases[0]} to {releases[-1]}" if releases else ""
    hits = [(path, f"{per_release[-1][path]} [{name} version unknown: every release from {span} says so]")
            for path in sorted(common, key=str)]
    return hits, disagree


# -- vLLM serve flags ------------------------------------------------------------------------------------------

def _flag_problems(spec, release: factdb.Release, kind: str) -> Iterator[Hit]:
    from stackctl.bundle.keys import SERVE_FLAG_KEYS
    from stackctl.knowledge import serve_flags

    args = spec.serve_args
    offset = len(args) - len(spec.recipe.serve.extra_args)
    for problem in serve_flags.judge(args, release):
        if problem.kind != kind:
            continue
        if problem.index >= offset:
            yield (("serve", "extra_args", problem.index - offset), problem.message)
        elif problem.kind != "value" and problem.flag in SERVE_FLAG_KEYS:
            # a flag stackctl writes from a typed key: its name is judged (the value is the typed key's, checked by
            # the schema), never a value that merely looks like an option
            key = SERVE_FLAG_KEYS.get(problem.flag, "serve")
            yield (tuple(key.split(".")), f"{problem.message} (stackctl writes it from {key})")


@fact_rule("vllm-flag-removed", "error",
      "a `vllm serve` flag the pinned vLLM no longer has: the server stops with \"unrecognized arguments\"",
      "remove the flag, or use the replacement the message names", "vllm")
def _flag_removed(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM parses its command line with argparse (vLLM 0.33.0 vllm/utils/argparse_utils.py:156
    `FlexibleArgumentParser`): a flag the release does not define ends the server before it loads anything, with
    `unrecognized arguments`. Flags are removed often: `--disable-log-requests` (last in vLLM 0.16.0
    vllm/engine/arg_utils.py:2087; its successor is `--no-enable-log-requests`, vLLM 0.33.0
    vllm/engine/arg_utils.py:3259), `--swap-space` (last in vLLM 0.17.1 vllm/engine/arg_utils.py:951),
    `--cuda-graph-sizes` (last in vLLM 0.12.0 vllm/engine/arg_utils.py:1097, whose deprecation notice names
    `--cudagraph-capture-sizes`).

    The flags of every release come from its own source (stackctl/knowledge/facts/vllm-VERSION.json, each with the
    file:line of its `add_argument`); the message names the last release that had the flag and its replacement
    when the package names one. A recipe pinned to a release without a facts file is judged against the nearest
    one, and the message says which.
    """
    yield from _flag_problems(spec, release, "removed")


@fact_rule("vllm-flag-unknown", "error",
      "a `vllm serve` flag the pinned vLLM does not know: the server stops with \"unrecognized arguments\"",
      "fix the spelling (the message suggests the closest flag), or pin a vLLM release that has it", "vllm")
def _flag_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """A flag that no release stackctl has facts for defines (a typo, another program's option), or one that only
    later releases have. argparse (vLLM 0.33.0 vllm/utils/argparse_utils.py:156) ends the server with
    `unrecognized arguments`; a unique prefix of a real flag is accepted, as argparse does. The flags of each release
    are in stackctl/knowledge/facts/vllm-VERSION.json, read from that release's vllm/engine/arg_utils.py and
    cli_args.py.
    """
    yield from _flag_problems(spec, release, "unknown")


@fact_rule("vllm-flag-value", "error",
      "a `vllm serve` flag with a value its parser rejects: a boolean given a value, an invalid choice, a number "
      "that is not one, a missing value",
      "write the flag as the message shows", "vllm")
def _flag_value(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM builds each flag from its config dataclass field (vLLM 0.33.0 vllm/engine/arg_utils.py:325
    `_compute_kwargs`): a bool field becomes `--x/--no-x` (argparse.BooleanOptionalAction), which takes no value,
    so `--enable-chunked-prefill true` leaves `true` as an unrecognised argument and `--enable-chunked-prefill=true`
    is "ignored explicit argument" (both exit 2); a Literal field gives choices (`--dtype bf16` is not one); int
    and float fields must parse; JSON flags must be JSON. The kinds and choices of each release's flags are in
    stackctl/knowledge/facts/vllm-VERSION.json with the file:line of the field they come from (e.g.
    `--enable-chunked-prefill`: vLLM 0.33.0 vllm/config/scheduler.py:134, registered at
    vllm/engine/arg_utils.py:1784).
    """
    yield from _flag_problems(spec, release, "value")


@fact_rule("vllm-flag-deprecated", "warning",
      "a `vllm serve` flag the pinned vLLM marks deprecated: it goes away in a coming release",
      "use the replacement the deprecation notice names", "vllm")
def _flag_deprecated(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM marks flags it is about to remove (`deprecated=True`, or a help text saying so; e.g.
    `--log-config-file`, vLLM 0.33.0 vllm/engine/arg_utils.py:457 and :1665). The flag still works in the pinned
    release, and stops the server after the next upgrade. The notice is quoted from the release's own source.
    """
    yield from _flag_problems(spec, release, "deprecated")


# -- compilation_config / pass_config --------------------------------------------------------------------------

def _compilation_configs(spec) -> Iterator[tuple[tuple, dict]]:
    """(key path prefix, config dict) of the recipe's compilation config and of any in serve.extra_args."""

    yield ("serve", "compilation_config"), spec.compilation_config
    for index, config in json_flag_values(spec.recipe.serve.extra_args, COMPILATION_FLAGS):
        yield ("serve", "extra_args", index), config


def _handwritten(section: str) -> set[str]:
    table = compat.table()
    return {e["key"] for e in table["compilation_keys" if section == "compilation_config" else "pass_config_keys"]}


def _key_problems(spec, release: factdb.Release) -> Iterator[tuple[str, tuple, str, str]]:
    """(kind, path, key, message): kind "unknown" or "value"."""
    for prefix, config in _compilation_configs(spec):
        yield from _judge_keys(release, "compilation_config", prefix, config)
        nested = config.get("pass_config")
        if isinstance(nested, dict):
            inner = prefix + ("pass_config",) if prefix[1] == "compilation_config" else prefix
            yield from _judge_keys(release, "pass_config", inner, nested)


def _judge_keys(release: factdb.Release, section: str, prefix: tuple, config: dict):
    known = release.section(section)
    skip = _handwritten(section)
    for key, value in config.items():
        path = prefix + (key,) if prefix[1] == "compilation_config" else prefix
        entry = known.get(key)
        if entry is None:
            if key not in skip:
                yield "unknown", path, key, _missing_key(release, section, key)
            continue
        problem = _json_problem(value, entry)
        if problem:
            yield "value", path, key, f"{section}.{key} = {json.dumps(value)}: {problem} " \
                                      f"({release.cite(entry['at'])})"


def _missing_key(release: factdb.Release, section: str, key: str) -> str:
    from stackctl.knowledge.compat import version_key

    seen = factdb.history("vllm", section, key)
    target = version_key(release.version)
    earlier = [(v, e) for v, e in seen if version_key(v) < target]
    later = [v for v, _ in seen if version_key(v) > target]
    if earlier:
        last, entry = earlier[-1]
        note = f" (its deprecation notice said: {entry['deprecated']})" if isinstance(entry, dict) and \
            entry.get("deprecated") else ""
        return f"{section}.{key} was removed: vLLM {last} was the last release with it (vllm {last} " \
               f"{entry['at']}), {release.label()} rejects it (its config classes forbid unknown keys){note}"
    if later:
        return f"{section}.{key} is not in {release.label()}: it first appears in vLLM {later[0]}"
    import difflib

    close = difflib.get_close_matches(key, list(release.section(section)), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{section}.{key} is not a key of {release.label()} or of any release stackctl has facts for{hint}"


JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict", type(None): "none"}
ACCEPTS = {"bool": {"bool", "int", "str"}, "int": {"int", "str", "bool"}, "float": {"float", "int", "str"},
           "str": {"str"}, "list": {"list"}, "tuple": {"list"}, "set": {"list"}, "dict": {"dict"},
           "object": {"dict"}, "none": {"none"}, "literal": {"str", "int", "bool"}}


def _json_problem(value, entry: dict) -> str | None:
    """A clear type mismatch pydantic rejects (lax mode: numeric strings pass for numbers, so they are not
    reported); choices of a Literal."""
    types = entry.get("types", [])
    if "other" in types or not types:
        return None
    given = JSON_TYPES.get(type(value), "other")
    if not any(given in ACCEPTS.get(t, set()) for t in types):
        return f"expected {' or '.join(types)}, got {given}"
    choices = entry.get("choices")
    if choices and given in ("str", "int") and str(value) not in choices:
        return f"not one of {', '.join(choices)}"
    if given == "str" and set(types) <= {"int", "float", "none"}:
        try:
            float(value)
        except ValueError:
            return f"expected {' or '.join(types)}, got the word {value!r}"
    return None


@fact_rule("compilation-config-key-unknown", "error",
      "a compilation_config or pass_config key the pinned vLLM does not have: `vllm serve` exits at start-up",
      "remove the key, or use the one the message names", "vllm")
def _compilation_key_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """`--compilation-config` is validated into `CompilationConfig` and its `pass_config` into `PassConfig`
    (vLLM 0.33.0 vllm/config/compilation.py:692 for the `pass_config` field), pydantic dataclasses made by vLLM's `@config`, which forbids extra
    keys (vllm/config/utils.py:71 `ConfigDict(extra="forbid")`): an unknown key stops `vllm serve` with
    `Unexpected keyword argument`. The keys of each release are read from that release's compilation.py
    (stackctl/knowledge/facts/vllm-VERSION.json); the message says when a key was removed and what its last
    deprecation notice named. Keys with a hand-written range in compat.toml (`level`, `fuse_minimax_qk_norm`) are
    reported by compilation-key-removed and pass-config-version.
    """
    for kind, path, _key, message in _key_problems(spec, release):
        if kind == "unknown":
            yield (path, message)


@fact_rule("compilation-config-value", "error",
      "a compilation_config or pass_config value of the wrong type or outside its choices: `vllm serve` exits",
      "give the key a value of the type the message names", "vllm")
def _compilation_value(spec, release: factdb.Release) -> Iterator[Hit]:
    """pydantic validates each compilation_config / pass_config value against the field's type (vLLM 0.33.0
    vllm/config/compilation.py:651 `cudagraph_capture_sizes: list[int]`; e.g. `pass_config.eliminate_noops` is a bool, `cudagraph_capture_sizes` a list of
    ints). Only clear mismatches are reported: a list or object where a scalar is expected, a word where a number
    is, a value outside a Literal's choices; numeric strings pass, as pydantic's lax mode reads them.
    """
    for kind, path, _key, message in _key_problems(spec, release):
        if kind == "value":
            yield (path, message)


# -- environment variables -------------------------------------------------------------------------------------

def _env_names(spec, prefix: str) -> list[tuple[tuple, str]]:
    names = [(("serve", "env", name), name) for name in spec.recipe.serve.env if name.startswith(prefix)]
    return names + [(("serve", "secret_env", name), name) for name in spec.recipe.serve.secret_env
                    if name.startswith(prefix)]


def _removed_env() -> set[str]:
    """Variables compat.toml `removed_env` lists: removed-env-var reports them."""
    return {e["name"] for e in compat.table()["removed_env"]}


@fact_rule("vllm-env-unknown", "warning",
      "a VLLM_* variable the pinned vLLM does not know: it is ignored",
      "remove it from serve.env, or use the variable the release has", "vllm")
def _vllm_env_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM reads its variables through `vllm.envs.environment_variables` (vLLM 0.33.0 vllm/envs.py:619) and, at
    start-up, warns `Unknown vLLM environment variable detected` for any other VLLM_* variable
    (vllm/platforms/interface.py:1458-1471; a hard failure only with --fail-on-environ-validation). The variable
    does nothing. The names of each release come from its own envs.py (stackctl/knowledge/facts/vllm-VERSION.json);
    the message says when a variable was removed. `VLLM_USE_V1` and the other names in compat.toml `removed_env`
    are reported by removed-env-var.
    """
    known = release.section("env")
    skip = _removed_env()
    for path, name in _env_names(spec, "VLLM_"):
        if name in known or name in skip:
            continue
        from stackctl.knowledge.compat import version_key

        seen = [v for v, _ in factdb.history("vllm", "env", name)]
        earlier = [v for v in seen if version_key(v) < version_key(release.version)]
        if earlier:
            message = f"{name} was removed after vLLM {earlier[-1]}: {release.label()} ignores it"
        elif seen:
            message = f"{name} is not in {release.label()}: it first appears in vLLM {seen[0]}"
        else:
            message = f"{name} is not a variable of {release.label()} (nor of any release stackctl has facts for)"
        yield (path, message)


@fact_rule("kv-connector-unknown", "error",
      "a --kv-transfer-config naming a KV connector the pinned vLLM has not registered: the server exits",
      "use a connector the message lists, or give kv_connector_module_path", "vllm")
def _kv_connector_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM builds the connector named by `kv_connector` from its registry (`register_connector` calls; the
    lookup is vLLM 0.33.0 vllm/distributed/kv_transfer/kv_connector/factory.py:93), unless
    `kv_connector_module_path` names a module to load it from; any other name raises `Connector '...' is not
    registered` / `Unsupported connector type` (factory.py:93, :128) and the server does not start. The names each
    release registers are in stackctl/knowledge/facts/vllm-VERSION.json. An LMCache connector name the release
    lacks gets its replacement: `LMCacheConnector`, the V0 engine's connector (last in vLLM 0.9.2,
    factory.py:100-103; compat.toml `removed_kv_connector`), is replaced by `LMCacheConnectorV1`, which runs LMCache
    inside vLLM as it did; `LMCacheMPConnector` is not its replacement: it talks to a separate `lmcache server`.
    """
    from stackctl.knowledge.kv_transfer import ATOM_LMCACHE_CONNECTORS, connector_configs

    registry = release.section("kv_connectors")
    for path, config in connector_configs(spec.recipe):
        connector = config.get("kv_connector")
        if isinstance(connector, str) and connector not in registry and not config.get("kv_connector_module_path"):
            if connector in ATOM_LMCACHE_CONNECTORS:
                yield (path, f"kv_connector {connector!r} is ATOM's own server's LMCache offload connector, not "
                             f"registered in {release.label()}: for LMCache under vLLM set cache.enabled = true "
                             "(LMCacheConnectorV1)")
                continue
            import difflib

            from stackctl.knowledge.lmcache_connectors import replacement

            instead = replacement(connector, registry)
            close = difflib.get_close_matches(connector, list(registry), n=1)
            hint = f"{instead}; " if instead else f"did you mean {close[0]}? " if close else ""
            yield (path, f"kv_connector {connector!r} is not registered in {release.label()} "
                         f"({hint}registered: {', '.join(registry)})")


@fact_rule("offload-engine-release", "error",
      "the pinned vLLM lacks what the offload engine (cache.offload) is written with: its connector or its flags",
      "pin a vLLM release that has them (the message names the first), or choose another engine", "vllm")
def _offload_engine_release(spec, release: factdb.Release) -> Iterator[Hit]:
    """stackctl writes each offload engine as vLLM expects it: a `--kv-transfer-config` naming the engine's
    connector (LMCacheConnectorV1, LMCacheMPConnector, SimpleCPUOffloadConnector), or the `--kv-offloading-backend`
    and `--kv-offloading-size` flags (vllm-native; vLLM 0.32 vllm/engine/arg_utils.py:1415-1419, mapped to the
    OffloadingConnector in vllm/config/vllm.py:1115-1123). The connectors each release registers and its flags are
    in stackctl/knowledge/facts/vllm-VERSION.json; a release without them makes the server exit at start-up.
    """
    if not spec.recipe.cache.enabled:
        return
    from stackctl.knowledge.kinds import engine_of

    engine = engine_of(spec.recipe)
    if engine.connector not in release.section("kv_connectors"):
        yield (("cache", "offload"), f"offload engine {engine.name!r} runs vLLM's {engine.connector}, which "
                                     f"{release.label()} does not register"
                                     f"{_first_with('vllm', 'kv_connectors', engine.connector)}")
    for flag in engine.flags:
        if flag not in release.section("flags"):
            yield (("cache", "offload"), f"offload engine {engine.name!r} is written with {flag}, which "
                                         f"{release.label()} does not have{_first_with('vllm', 'flags', flag)}")


@fact_rule("lmcache-server-release", "error",
      "cache.offload = \"lmcache-mp\" with an LMCache release that has no `lmcache server`, or lacks a flag or L2 "
      "adapter stackctl starts it with",
      "pin an LMCache release that has them (versions.lmcache; the message names the first), or choose another "
      "engine", "lmcache",
      judged=lambda spec: bool(_lmcache_server_argv(spec)))
def _lmcache_server_release(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache's multiprocess mode runs as its own server, started by the `lmcache server` command
    (lmcache/cli/commands/server.py), which vLLM's LMCacheMPConnector reaches over ZMQ. stackctl starts it with
    --host, --port, --http-host, --http-port, --chunk-size, --l1-size-gb and --eviction-policy (the legacy L1 form
    needs both: 0.5.6 lmcache/v1/distributed/config.py:1071-1074), --supported-transfer-mode auto (a worker on a
    device other than CUDA or NPU drives the transfer itself: lmcache/v1/multiprocess/server.py:232-241) and, for
    an fs tier, an
    `--l2-adapter` of type fs. Each release's command, flags and L2 adapter types are in
    stackctl/knowledge/facts/lmcache-VERSION.json (read by scripts/factgen/lmcache_facts.py).
    """
    argv = _lmcache_server_argv(spec)
    if not argv:
        return
    if not release.section("mp_server"):
        yield (("versions", "lmcache"), f"{release.label()} has no `lmcache server` command"
                                        f"{_first_with('lmcache', 'mp_server', 'command')}")
        return
    known = release.section("mp_server_flags")
    for flag in dict.fromkeys(a for a in argv if a.startswith("--")):
        if flag not in known:
            yield (("versions", "lmcache"), f"`lmcache server` of {release.label()} has no {flag}"
                                            f"{_first_with('lmcache', 'mp_server_flags', flag)}")
    adapters = release.section("l2_adapter_types")
    for flag, value in zip(argv, argv[1:]):
        kind = json.loads(value).get("type") if flag == "--l2-adapter" else None
        if kind is not None and kind not in adapters:
            yield (("cache", "tiers"), f"`lmcache server` of {release.label()} has no L2 adapter of type {kind!r}"
                                       f"{_first_with('lmcache', 'l2_adapter_types', kind)}")


def _lmcache_server_argv(spec) -> list[str] | None:

    return spec.lmcache_server_command


def _first_with(package: str, section: str, name: str) -> str:
    """" (first in PACKAGE X)" when a release stackctl has facts for has NAME in SECTION, else ""."""
    seen = factdb.history(package, section, name)
    return f" (first in {'vLLM' if package == 'vllm' else 'LMCache'} {seen[0][0]})" if seen else ""


# -- LMCache config --------------------------------------------------------------------------------------------

def _lmcache_keys_present(spec) -> bool:
    return bool(spec.recipe.cache.extra) or bool(_env_names(spec, "LMCACHE_"))


@fact_rule("lmcache-key-unknown", "warning",
      "a cache.extra key LMCache does not know: LMCache logs \"Unknown configuration key\" and ignores it",
      "remove the key, or use the name the message gives", "lmcache",
      judged=lambda spec: bool(spec.recipe.cache.extra))
def _lmcache_key_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache reads its YAML through `_resolve_config_aliases` (LMCache 0.5.6 lmcache/v1/config_base.py:184-215):
    a key that is neither in `_CONFIG_DEFINITIONS` (lmcache/v1/config.py:88) nor a deprecated name is logged as
    `Unknown configuration key` and dropped, so the setting does nothing. Note that names in `_CONFIG_ALIASES`
    (config.py:57, e.g. `nixl_buffer_size` -> `pd_buffer_size`) are mapped only from the environment, not from the
    YAML (unless also deprecated): in cache.extra they are ignored too, and the message names the key to use. The
    keys of each release are in stackctl/knowledge/facts/lmcache-VERSION.json.
    """
    config, aliases, deprecated = (release.section(n) for n in ("config", "aliases", "deprecated"))
    for key in spec.recipe.cache.extra:
        if key in config or key in deprecated:
            continue
        path = ("cache", "extra", key)
        if key in aliases:
            new = aliases[key]["value"]
            yield (path, f"`{key}` is ignored in LMCache's YAML ({release.label()} maps it to `{new}` only from the "
                         f"environment, {release.cite(aliases[key]['at'])}): use `{new}`")
            continue
        from stackctl.knowledge.compat import lmcache_renamed_key

        renamed = lmcache_renamed_key(key, release.version)
        if renamed is not None:
            yield (path, f"`{key}` is not a config key of {release.label()}: {renamed}")
            continue
        import difflib

        close = difflib.get_close_matches(key, list(config), n=1, cutoff=0.75)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        older = _lmcache_last_with(key, release)
        where = f"; {older}" if older else ""
        yield (path, f"`{key}` is not a config key of {release.label()}{hint}{where}")


def _lmcache_last_with(key: str, release: factdb.Release) -> str:
    from stackctl.knowledge.compat import version_key

    seen = [v for v, _ in factdb.history("lmcache", "config", key)
            if version_key(v) < version_key(release.version)]
    return f"LMCache {seen[-1]} was the last release with it" if seen else ""


@fact_rule("lmcache-key-renamed", "warning",
      "a cache.extra key LMCache has deprecated: it still works, under a new name",
      "use the new name the message gives", "lmcache",
      judged=lambda spec: bool(spec.recipe.cache.extra))
def _lmcache_key_renamed(spec, release: factdb.Release) -> Iterator[Hit]:
    """`_DEPRECATED_CONFIGS` (LMCache 0.5.6 lmcache/v1/config.py:73) lists names LMCache still reads with a warning
    (e.g. `external_backends` -> `storage_plugins`); `_CONFIG_ALIASES` (config.py:57) says which new key receives
    the value. They go away in a later release. Read from each release's config.py
    (stackctl/knowledge/facts/lmcache-VERSION.json).
    """
    aliases, deprecated = release.section("aliases"), release.section("deprecated")
    for key in spec.recipe.cache.extra:
        if key in deprecated:
            new = aliases.get(key, {}).get("value")
            target = f"; use `{new}`" if new else ""
            yield (("cache", "extra", key), f"{deprecated[key]['value']} ({release.label()}, "
                                            f"{release.cite(deprecated[key]['at'])}){target}")


@fact_rule("lmcache-key-value", "error",
      "a cache.extra value of the wrong type: LMCache's converter turns it into None or False without an error",
      "give the key a value of the type the message names", "lmcache",
      judged=lambda spec: bool(spec.recipe.cache.extra))
def _lmcache_key_value(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache converts every YAML value with the key's converter (LMCache 0.5.6 lmcache/v1/config_base.py:28-47
    `_apply_env_converter_safely`): a value that does not convert is logged and replaced by None, and a bool
    converter (`_to_bool`, config_base.py:128-134) reads anything but true/1 as False, so `local_cpu: "yes"` turns
    the CPU tier off. The types of each release's keys are in stackctl/knowledge/facts/lmcache-VERSION.json.
    """
    config = release.section("config")
    for key, value in spec.recipe.cache.extra.items():
        entry = config.get(key)
        if entry is None:
            continue
        problem = _lmcache_value_problem(value, entry["type"])
        if problem:
            yield (("cache", "extra", key), f"`{key}: {json.dumps(value)}`: {problem} (type {entry['type']}, "
                                            f"{release.cite(entry['at'])})")


def _lmcache_value_problem(value, type_text: str) -> str | None:
    optional = type_text.endswith("?")
    base = type_text.rstrip("?")
    if value is None:
        return None if optional else "null where a value is required"
    if base == "bool":
        if isinstance(value, bool) or value in (0, 1):
            return None
        if isinstance(value, str) and value.strip().lower() in ("true", "1", "false", "0"):
            return None
        return "LMCache reads it as False (only true/1 count as true)"
    if base in ("int", "float"):
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            return "not a number: LMCache sets the key to null, not to its default"
        try:
            number = float(value)
        except (TypeError, ValueError):
            return "not a number: LMCache sets the key to null, not to its default"
        if base == "int" and not float(number).is_integer():
            return "not a whole number: LMCache sets the key to null, not to its default"
        return None
    if base.startswith("dict") and not isinstance(value, (dict, str)):
        return "not an object"
    if base == "str" and isinstance(value, (list, dict)):
        return "not a string"
    return None


@fact_rule("lmcache-env-unknown", "warning",
      "an LMCACHE_* variable the pinned LMCache does not read: it is ignored",
      "remove it, or use the variable of the key the message names", "lmcache",
      judged=lambda spec: bool(_env_names(spec, "LMCACHE_") or _env_names(spec, "LM_CACHE_")))
def _lmcache_env_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache takes a config key from the variable `LMCACHE_<KEY>` (LMCache 0.5.6 lmcache/v1/config.py:1003,
    upper case of the key, for every key of `_CONFIG_DEFINITIONS`), the deprecated names from their own
    LMCACHE_<OLD> variables, and reads a few variables by name elsewhere (LMCACHE_CONFIG_FILE, LMCACHE_LOG_LEVEL,
    ...: every LMCACHE_* literal of its code). Anything else, such as a pre-0.5 name, is never read, nor is a name
    spelled with the package's words apart (`LM_CACHE_CHUNK_SIZE`: no LMCache release reads an LM_CACHE_ variable).
    Each release's names are in stackctl/knowledge/facts/lmcache-VERSION.json.
    """
    config, aliases = release.section("config"), release.section("aliases")
    read = release.section("env_read")
    prefixes = tuple(name for name in read if name.endswith("_") and name != "LMCACHE_")
    for path, name in _env_names(spec, "LMCACHE_"):
        key = name[len("LMCACHE_"):].lower()
        if key in config or key in aliases or name in read or name.startswith(prefixes):
            continue
        import difflib

        close = difflib.get_close_matches(key, list(config), n=1, cutoff=0.75)
        hint = f" (did you mean LMCACHE_{close[0].upper()}?)" if close else ""
        yield (path, f"{name} is not read by {release.label()}{hint}")
    for path, name in _env_names(spec, "LM_CACHE_"):
        key = name[len("LM_CACHE_"):]
        meant = "LMCACHE_" + key
        hint = f" (did you mean {meant}?)" if key.lower() in config or meant in read else ""
        yield (path, f"{name} is not read by {release.label()}: its variables start with LMCACHE_{hint}")


def unprefixed_lmcache_keys(env: dict, release: factdb.Release, upper: bool = False) -> list[tuple[str, str]]:
    """(variable, LMCACHE_ variable meant) for each variable spelled like an LMCache config key without the LMCACHE_
    prefix (`chunk_size`); with UPPER (LMCache on: a name like APP_ID means little elsewhere then) upper-cased ones
    too (`LOCAL_CPU`). The importer notes them as well."""
    config = release.section("config")
    prefix = release.section("env_prefix").get("prefix", "LMCACHE_")
    return [(name, prefix + name.upper()) for name in env
            if name.lower() in config and (name == name.lower() or upper and name == name.upper())]


@fact_rule("lmcache-env-unprefixed", "warning",
      "a variable named like an LMCache config key without the LMCACHE_ prefix (chunk_size=256): LMCache never reads "
      "it",
      "rename it to LMCACHE_<KEY> (the message names it), or set the recipe key (cache.chunk_size, ...)", "lmcache",
      judged=lambda spec: bool(spec.recipe.serve.env or spec.recipe.serve.secret_env))
def _lmcache_env_unprefixed(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache reads a config key from the environment only as `LMCACHE_<KEY>`: `_update_config_from_env` asks
    `os.getenv(f"LMCACHE_{name.upper()}")` for each key of `_CONFIG_DEFINITIONS` (LMCache 0.5.6
    lmcache/v1/config.py:1001-1009). A variable spelled like the YAML key (`chunk_size=256`, `local_cpu=True`, as
    some launch scripts and manifests carry them) or upper-cased without the prefix (`MAX_LOCAL_CPU_SIZE`) is never
    read: the setting silently stays at its default. The keys of each release are in
    stackctl/knowledge/facts/lmcache-VERSION.json.
    """
    from stackctl.rules.seed import lmcache_connections

    upper = bool(lmcache_connections(spec))
    for section in ("env", "secret_env"):
        values = getattr(spec.recipe.serve, section)
        for name, meant in unprefixed_lmcache_keys(values, release, upper):
            yield (("serve", section, name), f"{name} is not read by {release.label()}: LMCache reads {meant} "
                                             f"({release.cite(release.section('env_prefix').get('at', ''))})")


def _remote_urls(spec) -> list[tuple[tuple, str]]:
    urls = []
    if isinstance(spec.recipe.cache.extra.get("remote_url"), str):
        urls.append((("cache", "extra", "remote_url"), spec.recipe.cache.extra["remote_url"]))
    if spec.recipe.serve.env.get("LMCACHE_REMOTE_URL"):
        urls.append((("serve", "env", "LMCACHE_REMOTE_URL"), spec.recipe.serve.env["LMCACHE_REMOTE_URL"]))
    return urls


@fact_rule("lmcache-remote-url-scheme", "error",
      "a remote_url whose scheme no LMCache connector adapter accepts: LMCache fails to create the remote backend",
      "use a scheme the message lists (s3://, fs://, redis://, lm://, ...)", "lmcache",
      judged=lambda spec: bool(_remote_urls(spec)))
def _remote_url_scheme(spec, release: factdb.Release) -> Iterator[Hit]:
    """LMCache finds the remote connector by asking each adapter of lmcache/v1/storage_backend/connector/
    (`*_adapter.py`, discovered at start) whether it can parse the URL; none raises `No adapter found for URL`
    (LMCache 0.5.6 lmcache/v1/storage_backend/connector/__init__.py:355), and the engine runs without the remote
    tier. The schemes each release's adapters accept are in stackctl/knowledge/facts/lmcache-VERSION.json, with
    the adapter file:line.
    """
    schemes = release.section("remote_url_schemes")
    for path, url in _remote_urls(spec):
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in schemes:
            yield (path, f"{url}: scheme {scheme or '(none)'!r} is not accepted by any connector adapter of "
                         f"{release.label()} (accepted: {', '.join(schemes)})")
