"""The inventory: its hosts in Ansible's order, and which recipe each host gets."""

from __future__ import annotations

import os
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.fleet.playbook_names import RECIPE_VAR


def inventory_hosts(listing: dict) -> list[str]:
    """Hosts of an `ansible-inventory --list` document, in inventory order (groups depth first, no duplicates)."""
    hosts: list[str] = []
    seen_groups: set = set()

    def walk(group: str) -> None:
        if group in seen_groups:
            return
        seen_groups.add(group)
        entry = listing.get(group) or {}
        for host in entry.get("hosts", []):
            if host not in hosts:
                hosts.append(host)
        for child in entry.get("children", []):
            walk(child)

    walk("all")
    for host in (listing.get("_meta") or {}).get("hostvars", {}):
        if host not in hosts:
            hosts.append(host)
    return hosts


def host_recipe_names(hosts: list[str], hostvars: dict, default: str | None) -> dict[str, str]:
    """Each host's recipe: its `stackctl_recipe` inventory variable, else the command's RECIPE."""
    names = {}
    missing = []
    for host in hosts:
        name = (hostvars.get(host) or {}).get(RECIPE_VAR) or default
        if not name:
            missing.append(host)
        else:
            names[host] = str(name)
    if missing:
        raise StackctlError(f"no recipe for host(s) {', '.join(missing)} (fix: pass RECIPE, or set {RECIPE_VAR} "
                            "for them in the inventory)")
    return names


def resolve_inventory_path(name: str, inventory: str) -> str:
    """A recipe path written in an inventory is relative to the inventory's directory; other names (absolute paths,
    shipped recipe names, paths relative to the working directory) are kept as given."""
    if os.path.isabs(name):
        return name
    base = Path(inventory)
    candidate = (base if base.is_dir() else base.parent) / name
    return str(candidate.resolve()) if candidate.exists() else name
