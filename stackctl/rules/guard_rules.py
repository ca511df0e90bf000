"""Rules that keep the recipe the one source of truth: no secret in it, nothing that bypasses the other rules
through the free-form keys (cache.extra, serve.extra_args), no unknown ids in checks.skip, no unsafe host paths.

They register in the same catalog as stackctl/rules/stack_rules.py (rules/ruleset.py loads both), with the same fixtures in
tests/fixtures/rules/<id>/.
"""

from __future__ import annotations

from stackctl import secrets
from stackctl.knowledge.kinds import kind_of, kind_of_url
from stackctl.recipe.safety import host_path_problem, unresolved_values
from stackctl.rules.registry import rule

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from stackctl.rules.registry import Hit


@rule("secret-in-recipe", "error",
      "a secret value is written in the recipe: it would reach the bundle, the image or a log",
      "put the value in a host environment variable and name it: serve.secret_env, or the S3 tier's "
      "access_key_env / secret_key_env")
def _secret_in_recipe(spec) -> Iterator[Hit]:
    """A recipe is a file people share, commit and paste into issues; everything in it is rendered into the bundle
    (serve.sh, lmcache.yaml, stack.env) and may end in an image layer or a log. A secret written in it has leaked.

    stackctl looks everywhere a value can hide: by key name (secret, secret_key, s3_secret_key, access_key,
    password, token, api_key, ... at any depth of cache.extra and serve.compilation_config), by value shape (AWS
    access key ids AKIA/ASIA..., a 40-character secret key next to one, GitHub ghp_/github_pat_, Hugging Face
    hf_, sk- API keys, Slack xox?- tokens, JSON web tokens, PEM private keys, URLs with user:password) in serve.env
    values, serve.extra_args (`--api-key VALUE`, `--api-key=VALUE`), model.path, tier URLs and build.pip_index.
    Messages never show the value, only its kind, its public prefix and its length.

    `stackctl render` and `up` refuse such a recipe even when this rule is skipped.

    A value named by its host variable (`serve.secret_env = { VLLM_API_KEY = "MY_KEY" }`: container variable =
    host variable) reaches the container at run time only, and is never written to a file.
    """
    yield from secrets.find_in_recipe(spec.recipe)


@rule("unresolved-value", "error",
      "a recipe value holds a shell reference or a placeholder ($MODEL, ${arr[$i]}, ~/x, <your model path>): "
      "stackctl writes values as given, so the server would receive that text",
      "write the value itself (the path, the number, the Hugging Face id) in place of the reference")
def _unresolved_value(spec) -> Iterator[Hit]:
    """A launch script's values can come from its run time: a variable set in the user's shell, a loop counter, an
    array element, a command substitution, `~`, or a placeholder a document asks the reader to fill in. A recipe
    has no run time: serve.sh quotes every argument and stack.env is read by Docker without expansion, so `$MODEL`
    or `<your model file path>` would reach vLLM as that very text (a model it cannot find, a port it cannot
    parse). `stackctl init --from-command` leaves such settings out with a note, except the model path, which a
    recipe needs: it keeps the reference and this rule refuses it until it is replaced. `stackctl render` refuses
    such a recipe even when this rule is skipped.
    """
    yield from unresolved_values(spec.recipe)


# -- free-form keys that would bypass the recipe -------------------------------------------------------------

@rule("cache-extra-shadows-key", "error",
      "a cache.extra key that stackctl writes from a recipe key: it overrides the recipe behind the rules' back",
      "remove it from cache.extra and set the recipe key the message names")
def _cache_extra_shadows(spec) -> Iterator[Hit]:
    """`cache.extra` is written into lmcache.yaml after the keys stackctl derives from the recipe, so a key there
    with the same name silently wins: `save_decode_cache: true` in extra escapes the `save-decode-cache` rule, a
    `chunk_size` escapes the fleet consistency check, a `max_local_cpu_size` makes `plan` and `doctor` judge a size
    that is not used, and a `local_disk` in extra is never mounted into the container (LMCache writes into the
    container's own filesystem, and loses it on restart).

    The list of keys is the one stackctl writes (bundle/keys.py `LMCACHE_KEYS`, and `s3_region`, `disable_tls`,
    `remote_storage_plugin.fs.base_path` under `extra_config`). A `remote_url` for a backend the recipe has no tier
    kind for (lm://, redis://, ...), `remote_serde`, and a `local_disk` LMCache never uses (no
    `max_local_disk_size` above 0, which `disk-tier-without-size` reports) stay allowed.
    """
    from stackctl.bundle.keys import LMCACHE_EXTRA_CONFIG_KEYS, LMCACHE_KEYS

    extra = spec.recipe.cache.extra
    for key, value in extra.items():
        if key not in LMCACHE_KEYS or not _recipe_expresses(spec, key, value):
            continue
        why = " (and a disk in extra is never mounted into the container)" if key == "local_disk" else ""
        yield (("cache", "extra", key), f"`{key}` is written by stackctl from {LMCACHE_KEYS[key]}; set that "
                                        f"instead{why}")
    extra_config = extra.get("extra_config")
    if isinstance(extra_config, dict):
        for key in extra_config:
            if key in LMCACHE_EXTRA_CONFIG_KEYS:
                yield (("cache", "extra", "extra_config", key),
                       f"`extra_config.{key}` is written by stackctl from {LMCACHE_EXTRA_CONFIG_KEYS[key]}; "
                       "set that instead")


def _recipe_expresses(spec, key: str, value) -> bool:
    """Whether the recipe has a key for this value (a remote URL of a kind the tiers cannot describe has none)."""
    if key == "remote_url":
        return kind_of_url(str(value)) is not None or any(kind_of(t).remote for t in spec.recipe.cache.tiers)
    if key == "remote_storage_plugins":
        return "fs" in (value if isinstance(value, list) else [value]) or bool(spec.recipe.tiers_of("fs"))
    extra, cpu_tier = spec.recipe.cache.extra, bool(spec.recipe.tiers_of("cpu"))
    if key == "local_cpu":  # false without a cpu tier is what stackctl writes anyway
        return bool(value) or cpu_tier
    if key == "max_local_cpu_size":  # without a CPU tier it sizes LMCache's CPU buffer, which no recipe key does
        return cpu_tier or bool(extra.get("local_cpu"))
    if key in ("local_disk", "max_local_disk_size") and not _disk_used(extra) and not spec.recipe.tiers_of("disk"):
        return False  # a disk LMCache never uses has no tier to express it (disk-tier-without-size reports it)
    return True


def _disk_used(extra: dict) -> bool:
    """Whether cache.extra names a local_disk with a max_local_disk_size above 0 (LMCache uses only such a disk)."""
    try:
        return bool(extra.get("local_disk")) and float(extra.get("max_local_disk_size") or 0) > 0
    except (TypeError, ValueError):
        return False


@rule("extra-args-shadow-flag", "error",
      "a serve.extra_args flag that stackctl writes from a recipe key: it overrides the recipe behind the rules' back",
      "remove the flag from serve.extra_args and set the recipe key the message names")
def _extra_args_shadow(spec) -> Iterator[Hit]:
    """`serve.extra_args` is appended to the server command after the flags stackctl writes, and vLLM keeps the
    last value of a repeated flag. So `--enforce-eager` there escapes `atom-cuda-graphs`, a `--port` makes `up` and
    `doctor` wait on the wrong port, a `--kv-transfer-config` replaces the connector stackctl configured, and a
    `--gpu-memory-utilization 1.5` is never checked. Every flag stackctl writes (`keys.SERVE_FLAG_KEYS`,
    also in `--flag=value`, `--flag_with_underscores` and dotted `--compilation-config.key=value` forms) has a
    recipe key; its value is checked like that key's (range, choices), and the message says which key to set.

    A `--kv-transfer-config` for another connector is allowed while `cache.enabled = false` (stackctl then writes
    none).
    """
    from stackctl.bundle.keys import SERVE_FLAG_KEYS

    args = spec.recipe.serve.extra_args
    for index, token in enumerate(args):
        flag = _flag_name(token)
        if flag is None or flag not in SERVE_FLAG_KEYS:
            continue
        key = SERVE_FLAG_KEYS[flag]
        value = token.split("=", 1)[1] if "=" in token else (
            args[index + 1] if index + 1 < len(args) and not args[index + 1].startswith("--")
            and _takes_value(flag, key) else None)
        if flag == "--kv-transfer-config" and not _kv_transfer_shadows(spec, value):
            continue
        if key == "cache.offload" and not spec.recipe.cache.enabled:
            continue  # vLLM's own offload flags, kept as given while stackctl writes no offload engine
        problem = _value_problem(key, value) if value is not None else None
        detail = f"; and as {key} the value {problem}" if problem else ""
        yield (("serve", "extra_args", index), f"{flag} repeats a flag stackctl writes from {key}: set {key} "
                                               f"instead{detail}")


def _kv_transfer_shadows(spec, text: str | None) -> bool:
    """A --kv-transfer-config shadows the recipe when the recipe could say it all (LMCache's V1 connector, kv_both:
    cache.enabled and the cache keys), or when it replaces the connector stackctl writes for an enabled cache. A
    config the recipe has no key for (a producer/consumer role, connector settings, another connector while the
    cache is off) is the user's to keep."""
    import json

    from stackctl.bundle.keys import kv_transfer_says_only_recipe_keys
    from stackctl.knowledge.kinds import engine_of

    try:
        config = json.loads(text or "")
    except ValueError:
        return False  # kv-transfer-config-invalid reports it
    if kv_transfer_says_only_recipe_keys(config):
        return True
    connector = config.get("kv_connector") if isinstance(config, dict) else None
    return spec.recipe.cache.enabled and connector != engine_of(spec.recipe).connector


def _takes_value(flag: str, key: str) -> bool:
    """Boolean flags (--enforce-eager) take no value; the JSON config flags and the others do."""
    from stackctl.recipe.model import SECTION_TYPES

    section, _, name = key.partition(".")
    return flag in ("--kv-transfer-config", "--compilation-config", "-cc", "--served-model-name",
                    "--tool-call-parser") or SECTION_TYPES[section]._fields[name].kind != "bool"


def _flag_name(token: str) -> str | None:
    """`--max_model_len=8` -> `--max-model-len`; `--compilation-config.mode=3` -> `--compilation-config`."""
    if not token.startswith("-") or token == "-" or token[1:2].isdigit():
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    else:
        name = name.split(".", 1)[0]
    return name


def _value_problem(key: str, value: str) -> str | None:
    """What is wrong with a flag value for the recipe key it belongs to (range, type, choices), or None."""
    from stackctl.recipe.model import SECTION_TYPES

    section, _, name = key.partition(".")
    field = SECTION_TYPES[section]._fields.get(name)
    if field is None or field.kind not in ("int", "float", "str"):
        return None
    meta = field.meta
    try:
        number = int(value) if field.kind == "int" else float(value) if field.kind == "float" else None
    except ValueError:
        return f"{value!r} is not {'an integer' if field.kind == 'int' else 'a number'}"
    if number is not None:
        if "minimum" in meta and number < meta["minimum"]:
            return f"must be >= {meta['minimum']}, got {value}"
        if "maximum" in meta and number > meta["maximum"]:
            return f"must be <= {meta['maximum']}, got {value}"
        if "exclusive_minimum" in meta and number <= meta["exclusive_minimum"]:
            return f"must be > {meta['exclusive_minimum']}, got {value}"
    elif "choices" in meta and value not in meta["choices"]:
        return f"{value!r} is not one of {', '.join(meta['choices'])}"
    return None


# -- skip lists ----------------------------------------------------------------------------------------------

def unknown_skip_ids(ids) -> list[str]:
    """Messages for the ids in `ids` that are neither a rule nor a doctor check, with a did-you-mean."""
    from stackctl.ids import REGISTERED, known_ids

    unknown = [i for i in ids if i not in REGISTERED]
    if not unknown:
        return []
    known = sorted(known_ids())
    messages = []
    for skip_id in unknown:
        if skip_id in known:
            continue
        import difflib

        close = difflib.get_close_matches(skip_id, known, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`?" if close else "see `stackctl rules` and `stackctl doctor --list`"
        messages.append(f"{skip_id!r} is not a rule or check id ({hint})")
    return messages


def refuse_unknown_skip_ids(ids, option: str = "--skip") -> None:
    """A StackctlError (one line) when a --skip id names nothing: a typo must not silently skip nothing."""
    from stackctl.errors import StackctlError

    problems = unknown_skip_ids(ids)
    if problems:
        raise StackctlError(f"{option}: {'; '.join(problems)}")


@rule("skip-unknown-id", "error",
      "checks.skip names an id that is neither a rule nor a doctor check: it skips nothing",
      "use an id from `stackctl rules` or `stackctl doctor --list` (the message suggests the closest)")
def _skip_unknown_id(spec) -> Iterator[Hit]:
    """`checks.skip` silences rules (validate, render, up) and doctor checks. A misspelt id skips nothing, and the
    recipe's author believes a finding was acknowledged when it was not; a renamed rule does the same after an
    upgrade. Every id must name a rule or a check; the message suggests the closest one.
    """
    for index, skip_id in enumerate(spec.recipe.checks.skip):
        for problem in unknown_skip_ids([skip_id]):
            yield (("checks", "skip", index), problem)


# -- host paths ---------------------------------------------------------------------------------------------

@rule("host-path-unsafe", "error",
      "a host path (model, disk or fs tier, wheelhouse, CA bundle, credentials file) that is relative, climbs with "
      "`..`, holds a `:`, or is / or a system directory",
      "use an absolute path of a directory of your own, e.g. /data/models or /nvme/kvcache")
def _host_path_unsafe(spec) -> Iterator[Hit]:
    """Host paths in a recipe become Docker bind mounts (`-v HOST:CONTAINER:MODE`) and directories LMCache writes
    into. A relative path means something else in every shell that runs stackctl; `..` hides where it lands; a `:`
    breaks the mount syntax; and `/`, `/etc`, `/usr`, `/proc`, `/sys`, `/dev`, `/boot`, `/var/lib/docker`, ...
    mounted read-write for a disk or fs tier let LMCache's files land in (or eviction delete from) the host's own
    system. Read-only inputs (model, wheelhouse, CA bundle, credentials file) may live under /etc or /usr (the CA
    bundle usually does) but are never / itself, a system directory itself, or under /proc, /sys or /dev.

    A model path counts as a host path when it starts with `/`, `.` or `~`; anything else is a Hugging Face id.
    """
    model = spec.recipe.model.path
    if not spec.recipe.model.generate and model.startswith(("/", ".", "~")):
        yield from _judge(("model", "path"), model, writable=False)
    for index, tier in enumerate(spec.recipe.cache.tiers):
        if tier.path is not None:
            yield from _judge(("cache", "tiers", index, "path"), tier.path, writable=True)
        if tier.credentials_file is not None:
            yield from _judge(("cache", "tiers", index, "credentials_file"), tier.credentials_file, writable=False)
    for key in ("wheelhouse", "ca_bundle"):
        value = getattr(spec.recipe.build, key)
        if value is not None:
            yield from _judge(("build", key), value, writable=False)


def _judge(path: tuple, value: str, writable: bool) -> Iterator[Hit]:
    problem = host_path_problem(value, writable)
    if problem:
        yield (path, f"{value!r} {problem}")
