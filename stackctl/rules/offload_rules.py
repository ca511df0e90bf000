"""Rules on vLLM's own offload connectors as a launch configures them in --kv-transfer-config (kept verbatim in
serve.extra_args): the OffloadingConnector's spec (`spec_name`) and the `kv_connector_extra_config` keys each
connector and spec reads, judged against the facts of the release the recipe runs (stackctl/knowledge/facts,
`kv_connector_keys`, read from vLLM's source by scripts/factgen/offload_keys.py). A MultiConnector's connectors are
judged one by one."""

from __future__ import annotations

from stackctl.knowledge import facts as factdb
from stackctl.knowledge.compat import version_key
from stackctl.knowledge.kv_transfer import connector_configs
from stackctl.rules.fact_rules import fact_rule

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from stackctl.rules.registry import Hit

OFFLOADING = "OffloadingConnector"


def _has_transfer_config(spec) -> bool:
    return bool(connector_configs(spec.recipe))


def _extra(config: dict) -> dict:
    extra = config.get("kv_connector_extra_config")
    return extra if isinstance(extra, dict) else {}


def _offloading_configs(spec, release: factdb.Release) -> Iterator[tuple[tuple, dict, str, dict | None]]:
    """(key path, kv_connector_extra_config, spec name, the release's facts of that spec or None) of every
    OffloadingConnector the recipe configures; nothing when the release has no OffloadingConnector (0.10:
    kv-connector-unknown says so)."""
    facts = release.section("kv_connector_keys").get(OFFLOADING)
    if not facts:
        return
    for path, config in connector_configs(spec.recipe):
        if config.get("kv_connector") == OFFLOADING:
            yield (path, _extra(config), *_spec(config, facts))


def _spec(config: dict, facts: dict) -> tuple[str, dict | None]:
    """(spec name, the release's facts of that spec or None when it does not register it)."""
    name = str(_extra(config).get("spec_name", facts.get("default_spec", {}).get("name", "")))
    return name, facts.get("specs", {}).get(name)


@fact_rule("offload-spec-unknown", "error",
           "an OffloadingConnector whose spec_name the pinned vLLM does not register (and no spec_module_path): "
           "the server exits at start-up",
           "use a spec the message lists, pin a vLLM release that has it, or give spec_module_path", "vllm",
           judged=_has_transfer_config)
def _spec_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM's OffloadingConnector builds the spec named by `spec_name` (default `CPUOffloadingSpec`) from the specs
    its release registers (vLLM 0.33.0 vllm/v1/kv_offload/factory.py:62-67: CPUOffloadingSpec and, from 0.22,
    TieringOffloadingSpec); a name it has not registered is loaded from `spec_module_path`, and with none the
    factory raises `Unsupported spec type` (factory.py:31-37) and the server does not start. vLLM 0.11-0.21 register
    only CPUOffloadingSpec (vLLM 0.11.2 vllm/v1/kv_offload/factory.py:54); 0.10 has no OffloadingConnector at all
    (kv-connector-unknown says so)."""
    for path, extra, name, offload_spec in _offloading_configs(spec, release):
        if offload_spec is None and not extra.get("spec_module_path"):
            specs = release.section("kv_connector_keys")[OFFLOADING].get("specs", {})
            registered = ", ".join(f"{spec_name} ({release.cite(entry['where'])})"
                                   for spec_name, entry in specs.items())
            yield (path,
                   f"spec_name {name!r} is not a spec {release.label()} registers (it registers {registered}): "
                   f"the OffloadingConnector raises \"Unsupported spec type\" at start-up{_spec_first_with(name)}")


@fact_rule("offload-key-missing", "error",
           "an OffloadingConnector spec without a key the pinned vLLM requires of it (cpu_bytes_to_use, or "
           "num_cpu_blocks before 0.14): the server exits at start-up",
           "add the key the message names to kv_connector_extra_config", "vllm", judged=_has_transfer_config)
def _key_missing(spec, release: factdb.Release) -> Iterator[Hit]:
    """A spec reads some keys with no default and raises when they are absent: the CPU spec's size, `num_cpu_blocks`
    up to vLLM 0.13 (vLLM 0.11.2 vllm/v1/kv_offload/cpu.py:24-28) and `cpu_bytes_to_use` from 0.14 (vLLM 0.33.0
    vllm/v1/kv_offload/cpu/spec.py:100-104, also for TieringOffloadingSpec, its subclass). A launch written for
    one release and run on the other fails at start-up with `... must be specified in kv_connector_extra_config`."""
    for path, extra, name, offload_spec in _offloading_configs(spec, release):
        for key, entry in (offload_spec or {}).get("keys", {}).items():
            if entry.get("required") and key not in extra:
                yield (path,
                       f"{release.label()}'s {name} requires {key} in kv_connector_extra_config "
                       f"({release.cite(entry['where'])}): the server exits at start-up without it"
                       f"{_given_instead(extra)}")


@fact_rule("offload-key-unknown", "warning",
           "a kv_connector_extra_config key the offload connector (and its spec) of the pinned vLLM never reads: "
           "ignored",
           "remove the key, or use the key the message names", "vllm", judged=_has_transfer_config)
def _key_unknown(spec, release: factdb.Release) -> Iterator[Hit]:
    """vLLM's offload connectors read their settings from `kv_connector_extra_config` by name and ignore any other
    key: a key from another release (the CPU spec's `num_cpu_blocks`, vLLM 0.11.2 vllm/v1/kv_offload/cpu.py:24,
    became `cpu_bytes_to_use`, vLLM 0.33.0 vllm/v1/kv_offload/cpu/spec.py:100) or a misspelling changes nothing.
    Judged for the OffloadingConnector (its own keys, vLLM 0.33.0
    vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py:122-211, and its spec's), the
    SimpleCPUOffloadConnector (simple_cpu_offload_connector.py:98-146) and the MultiConnector (`connectors`,
    multi_connector.py:147); a spec loaded from spec_module_path is not judged."""
    section = release.section("kv_connector_keys")
    for path, config in connector_configs(spec.recipe):
        connector = str(config.get("kv_connector"))
        facts = section.get(connector)
        extra = _extra(config)
        if not facts or not extra:
            continue
        known = dict(facts.get("keys", {}))
        label = str(connector)
        if connector == OFFLOADING:
            name, offload_spec = _spec(config, facts)
            if offload_spec is None:
                continue  # an unknown spec (offload-spec-unknown) or one loaded from spec_module_path
            known.update(offload_spec.get("keys", {}))
            label = f"{connector} with {name}"
        for key in extra:
            if key not in known:
                yield (path,
                       f"{release.label()}'s {label} never reads kv_connector_extra_config key {key!r}: "
                       f"ignored{_key_hint(key, known, connector, release)}")


def _key_hint(key: str, known: dict, connector: str, release: factdb.Release) -> str:
    """Where the key was read before, or the near miss among the keys this release reads."""
    last = _last_with(connector, key, release.version)
    if last:
        return f" (read up to {last})"
    import difflib  # here: validate's start-up imports only what every run needs

    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else f" (it reads {', '.join(sorted(known))})"


def _given_instead(extra: dict) -> str:
    others = [key for key in extra if key not in ("spec_name", "spec_module_path")]
    return f" (given instead: {', '.join(others)})" if others else ""


def _connector_keys(facts: dict) -> dict:
    keys = dict(facts.get("keys", {}))
    for spec in facts.get("specs", {}).values():
        keys.update(spec.get("keys", {}))
    return keys


def _last_with(connector: str, key: str, before: str) -> str:
    """`vLLM X, where`: the newest release before BEFORE whose CONNECTOR (or one of its specs) reads KEY."""
    for version, facts in reversed(factdb.history("vllm", "kv_connector_keys", connector)):
        entry = _connector_keys(facts).get(key)
        if entry and version_key(version) < version_key(before):
            return f"vLLM {version}, {entry['where']}"
    return ""


def _spec_first_with(name: str) -> str:
    for version, facts in factdb.history("vllm", "kv_connector_keys", OFFLOADING):
        if name in facts.get("specs", {}):
            return f"; vLLM {version} registers it"
    return ""
