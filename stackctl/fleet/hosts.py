"""Which hosts a fleet command reaches, in which batches, and what each host gets."""

from __future__ import annotations

import os
import re
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.fleet.ansible import RECIPE_VAR


# -- the inventory: its hosts in Ansible's order, and which recipe each host gets -----------------------------------
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


# -- what each host gets: recipe file, recipe hash, stack name, tuning --------------------------------------------
def tuning_for(recipe) -> dict:
    """The host tuning a recipe asks for, as the role's stackctl_host_tuning (absent keys: leave alone)."""
    tuning: dict = {"numa_balancing": 1 if recipe.host.numa_balancing else 0}
    if recipe.host.governor:
        tuning["governor"] = recipe.host.governor
    if recipe.host.isolcpus not in ("auto", "off"):
        tuning["isolcpus"] = recipe.host.isolcpus
    return tuning


def host_plan(recipe_path: str, spec) -> dict:
    """What one host gets: the recipe file (controller path), its hash (as the stack spec derives it), the stack
    name, the tuning."""
    return {"recipe": str(recipe_path), "recipe_hash": spec.recipe_hash, "stack": spec.name,
            "tuning": tuning_for(spec.recipe)}


# -- `--batch` and `--max-fail`, and the batches Ansible's `serial` makes -------------------------------------------
def parse_batch(text: str | None) -> int | str | None:
    """`--batch`: "2" -> 2 hosts per batch, "50%" -> "50%" of the hosts, None -> all hosts at once."""
    if text is None or str(text).strip() == "":
        return None
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)(%?)", value)
    if not match or int(match.group(1)) == 0 or (match.group(2) and int(match.group(1)) > 100):
        raise StackctlError(f"--batch: {value!r} is not a host count (> 0) or a percentage (1%-100%) "
                            "(fix: e.g. --batch 2 or --batch 25%)")
    return f"{int(match.group(1))}%" if match.group(2) else int(match.group(1))


def parse_percent(text: str | int, option: str = "--max-fail") -> int:
    """A percentage 0-100 written "10", "10%" (Ansible's max_fail_percentage)."""
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)%?", value)
    if not match or int(match.group(1)) > 100:
        raise StackctlError(f"{option}: {value!r} is not a percentage 0-100 (fix: e.g. {option} 0 or {option} 25%)")
    return int(match.group(1))


def batches(hosts: list[str], batch: int | str | None) -> list[list[str]]:
    """The batches Ansible's `serial` makes of `hosts` (same rounding: a percentage rounds down, at least 1)."""
    if not hosts:
        return []
    if batch is None:
        size = len(hosts)
    elif isinstance(batch, str) and batch.endswith("%"):
        size = max(1, int(len(hosts) * int(batch[:-1]) / 100))
    else:
        size = int(batch)
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]
