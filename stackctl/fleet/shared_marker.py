"""Proof that a shared fs tier is shared: in fleet doctor, one host of each group with the same fs tier path writes a
marker file there, and every other host of the group must read it back (playbooks: stackctl_host doctor tasks)."""

from __future__ import annotations


def assign_marker_writers(plans: dict, recipes: dict) -> None:
    """Add to each host's plan its fs tier path (`shared_fs`) and the host that writes the group's marker (the
    first host, in inventory order, with the same path)."""
    writers: dict[str, str] = {}
    for host, recipe in recipes.items():
        tiers = recipe.tiers_of("fs") if recipe.cache.enabled else []
        if not tiers:
            continue
        path = tiers[0].path.rstrip("/") or "/"
        writers.setdefault(path, host)
        plans[host]["shared_fs"] = path
        plans[host]["shared_fs_writer"] = writers[path]
