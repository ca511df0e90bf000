"""Which hosts prove which shared KV tier, for fleet doctor (controller side, pure): hosts whose recipes name the same
fs tier path, or the same S3 bucket at the same endpoint, make a group, and each host's plan names its groups
(`assign_marker_groups`). The marker itself is put, read and deleted on the hosts by fleet/marker.py."""

from __future__ import annotations

from stackctl.knowledge.kinds import kinds_where
from stackctl.storage.registry import storage_of, storage_of_kind


def marker_kinds() -> tuple[str, ...]:
    """The shared tiers a marker can prove (fs, s3 by name): remote kinds whose storage has a marker store. Another
    remote kind is not proven shared until its storage has one, rather than taken for another storage."""
    return tuple(sorted(kinds_where(lambda kind: kind.remote and storage_of_kind(kind).marker_store_class is not None)))


def marker_tier(recipe, kind: str):
    """The recipe's tier of this kind that the marker goes to (the first one, as doctor's tier checks take), or
    None."""
    tiers = recipe.tiers_of(kind) if recipe.cache.enabled else []
    return tiers[0] if tiers else None


def group_key(tier) -> str:
    """Hosts with the same key are meant to share one store: the fs path, or the S3 bucket + endpoint host:port."""
    return storage_of(tier).group_key(tier)


def tier_label(tier) -> str:
    """The tier as messages name it: "fs tier /shared/kv", "s3 tier bucket kv at rgw.example.com:443"."""
    return storage_of(tier).label(tier)


def assign_marker_groups(plans: dict, specs: dict) -> None:
    """Add to the plan of each host that shares an fs or S3 tier with another host `shared_tiers`: {kind: {"tier":
    label, "hosts": the group, in inventory order}} (`specs`, each host's stack spec, is in inventory order; the label
    is the first host's).
    The playbook picks each group's writer at marker time: the first of `hosts` still in the play."""
    groups: dict[str, dict] = {}
    keys: dict[tuple[str, str], str] = {}
    for host, spec in specs.items():
        for kind in marker_kinds():
            tier = marker_tier(spec.recipe, kind)
            if tier is not None:
                keys[host, kind] = key = group_key(tier)
                groups.setdefault(key, {"tier": tier_label(tier), "hosts": []})["hosts"].append(host)
    for (host, kind), key in keys.items():
        if len(groups[key]["hosts"]) > 1:
            plans[host].setdefault("shared_tiers", {})[kind] = groups[key]
