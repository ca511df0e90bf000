"""Shared-tier consistency: hosts that write one remote KV tier must agree on everything that changes cache
keys, else they fill the tier with entries the others never hit."""

from __future__ import annotations

import json
from dataclasses import dataclass

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import kind_of
from stackctl.storage.registry import storage_of


def _revision(extra_args: list[str]) -> str | None:
    for index, arg in enumerate(extra_args):
        if arg == "--revision" and index + 1 < len(extra_args):
            return extra_args[index + 1]
        if arg.startswith("--revision="):
            return arg.split("=", 1)[1]
    return None


def cache_key_settings(spec) -> dict[str, object]:
    """Everything that changes the keys (or the stored format) of LMCache entries, by recipe key. LMCache 0.5.x keys
    are model@world_size@worker@chunk_hash@kv_dtype; the chunk hash chains from the hash seed with the hash
    algorithm over chunk_size-token chunks."""
    config = spec.lmcache_config or {}
    versions = spec.versions
    return {
        "model.path": spec.recipe.model.path,
        "model revision (serve.extra_args --revision)": _revision(list(spec.recipe.serve.extra_args)),
        "model.tensor_parallel": spec.recipe.model.tensor_parallel,
        "model.kv_cache_dtype": spec.recipe.model.kv_cache_dtype,
        "model.dtype": spec.recipe.model.dtype,
        "cache.chunk_size": spec.recipe.cache.chunk_size,
        "cache.hash_seed": spec.hash_seed,
        "cache.extra.pre_caching_hash_algorithm": config.get("pre_caching_hash_algorithm", "builtin"),
        "serve.prefix_caching_hash_algo": spec.recipe.serve.prefix_caching_hash_algo or "sha256",
        "versions.lmcache": versions.get("lmcache") or versions.get("lmcache_git"),
        "cache.extra.remote_serde": config.get("remote_serde"),
    }


def shared_tiers(spec) -> list[str]:
    """Names of the remote tiers a recipe writes to ("s3 s3://host:port", "fs /mnt/x"): the kind and its place, a
    directory or a URL; [] when LMCache is off."""
    if not spec.recipe.cache.enabled:
        return []
    names = []
    for tier in spec.recipe.cache.tiers:
        place = storage_of(tier).place(tier) if kind_of(tier).remote else ""
        if place:
            names.append(f"{tier.kind} {place}")
    return names


@dataclass
class TierMismatch:
    """Hosts sharing one remote tier that disagree on one cache-key setting."""

    tier: str
    key: str
    values: dict  # repr(value) -> [hosts]
    fix: str = ""  # when the generic fix (the same setting everywhere) is not the one to make

    def format(self) -> str:
        parts = "; ".join(f"{value} on {', '.join(hosts)}" for value, hosts in self.values.items())
        return (f"hosts sharing the {self.tier} tier disagree on {self.key}: {parts} "
                f"(fix: {self.fix or f'give every host that shares this tier the same {self.key}'})")

    def to_dict(self) -> dict:
        return {"tier": self.tier, "key": self.key, "values": self.values}


def hosts_by_shared_tier(host_specs: dict) -> dict[str, list[str]]:
    """Each remote tier two or more hosts write, with those hosts."""
    by_tier: dict[str, list[str]] = {}
    for host, spec in host_specs.items():
        for tier in shared_tiers(spec):
            by_tier.setdefault(tier, []).append(host)
    return {tier: hosts for tier, hosts in by_tier.items() if len(hosts) >= 2}


def find_tier_mismatches(host_specs: dict) -> list[TierMismatch]:
    """For each remote tier used by two or more hosts: every cache-key setting on which they differ."""
    mismatches = []
    for tier, hosts in hosts_by_shared_tier(host_specs).items():
        settings = {host: cache_key_settings(host_specs[host]) for host in hosts}
        for key in settings[hosts[0]]:
            mismatch = _disagreement(tier, key, {host: settings[host][key] for host in hosts})
            if mismatch is not None:
                mismatches.append(mismatch)
    return mismatches


def _disagreement(tier: str, key: str, by_host: dict, fix: str = "") -> TierMismatch | None:
    """The hosts grouped by their value of `key` (`by_host`: host -> value), when they hold more than one."""
    values: dict[str, list[str]] = {}
    for host, value in by_host.items():
        values.setdefault(json.dumps(value), []).append(host)
    return TierMismatch(tier, key, values, fix) if len(values) > 1 else None


def served_dtype_mismatches(host_specs: dict, served: dict[str, str | None]) -> tuple[list[TierMismatch],
                                                                                       list[str]]:
    """Hosts sharing a remote tier whose servers compute in different dtypes, from each host's live server (`served`:
    host -> dtype, None where it could not be read). LMCache's chunk keys carry the KV dtype, so each host writes
    entries the others never hit, and nothing errors. Identical recipes do not prevent it: with model.dtype = "auto"
    each CPU host serves its own native dtype (bf16 with AMX or AVX512-BF16, float32 on AVX2). Also returns, per
    tier, why the dtypes could not be compared (a host's dtype unknown)."""
    mismatches, unknown = [], []
    for tier, hosts in hosts_by_shared_tier(host_specs).items():
        missing = [host for host in hosts if not served.get(host)]
        if missing:
            unknown.append(f"the {tier} tier's served dtypes not compared: unknown on {', '.join(missing)} "
                           "(its server.dtype check did not read it)")
        mismatch = _disagreement(tier, "served dtype", {host: served[host] for host in hosts if served.get(host)},
                                 "set model.dtype to one dtype every one of these hosts runs natively, instead of "
                                 "\"auto\", and roll it out again")
        if mismatch is not None:
            mismatches.append(mismatch)
    return mismatches, unknown


def check_shared_tiers(host_specs: dict) -> None:
    """Refuse (one line) a fleet whose hosts share a remote tier but would write it under different keys."""
    mismatches = find_tier_mismatches(host_specs)
    if mismatches:
        more = f" (and {len(mismatches) - 1} more difference(s))" if len(mismatches) > 1 else ""
        raise StackctlError(mismatches[0].format() + more)
