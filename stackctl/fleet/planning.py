"""The fleet's plan, read from the inventory: its hosts in order and, per host, the recipe it gets (loaded and
checked) and what the playbooks are told about it.

An edge: the inventory is read by Ansible itself (ansible-runner's get_inventory, imported only here and only when
a fleet command runs) and the recipes from disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.fleet.hosts import (
    host_plan,
    host_recipe_names,
    inventory_hosts,
    resolve_inventory_path,
)


def read_inventory(inventory: str) -> tuple[list[str], dict]:
    """Hosts (inventory order) and their variables, as Ansible itself reads the inventory."""
    import ansible_runner

    out, err = ansible_runner.get_inventory(action="list", inventories=[str(Path(inventory).resolve())],
                                            response_format="json", quiet=True)
    if not isinstance(out, dict):
        detail = " ".join((err or str(out) or "").split())[-400:]
        raise StackctlError(f"{inventory}: ansible-inventory could not read it: {detail}")
    return inventory_hosts(out), (out.get("_meta") or {}).get("hostvars", {})


def plan_fleet(recipe: str | None, inventory: str, resolve: Callable[[str], str],
               warn: Callable[[str], None]) -> tuple[list[str], dict, dict]:
    """Hosts, each host's plan, each host's stack spec (derived once per recipe, with this shell's ISA cap, which
    the hosts' stackctl runs with too: fleet/ansible.py). Recipes with rule errors are refused here; warnings go
    to `warn`. `resolve` turns a recipe name (a path or a shipped recipe's name) into a path."""
    from stackctl.bundle.stackspec import StackSpec
    from stackctl.recipe import load_recipe
    from stackctl.recipe.isa_cap import shell_isa_cap
    from stackctl.rules.ruleset import run_rules

    hosts, hostvars = read_inventory(inventory)
    if not hosts:
        raise StackctlError(f"{inventory}: no hosts in the inventory")
    names = host_recipe_names(hosts, hostvars, recipe)
    loaded: dict[str, tuple] = {}
    plans, specs = {}, {}
    for host in hosts:
        name = names[host] if names[host] == recipe else resolve_inventory_path(names[host], inventory)
        if name not in loaded:
            path = Path(resolve(name)).resolve()
            parsed = StackSpec(load_recipe(str(path)), isa_cap=shell_isa_cap())
            findings = run_rules(parsed.recipe, spec=parsed)
            for finding in findings:
                if finding.severity == "warning":
                    warn(f"host {host}: {finding.format()}")
            errors = [f for f in findings if f.severity == "error"]
            if errors:
                raise StackctlError(f"host {host}: {errors[0].format()}"
                                    + (f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else ""))
            loaded[name] = (path, parsed)
        path, parsed = loaded[name]
        plans[host] = host_plan(str(path), parsed)
        specs[host] = parsed
    return hosts, plans, specs
