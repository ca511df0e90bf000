"""The one catalog of rule and check ids (stackctl/ids.py): both registries register into it, an id names one rule
or one check, and the skip-id rule knows every id without importing doctor's checks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stackctl import ids


def test_an_id_names_one_rule_or_one_check_never_both(monkeypatch):
    monkeypatch.setattr(ids, "REGISTERED", {})
    ids.register("same-id", ids.RULE)
    ids.register("same-id", ids.RULE)  # a module imported twice registers twice: still one rule
    with pytest.raises(ValueError, match="is a rule id already"):
        ids.register("same-id", ids.CHECK)


def test_both_registries_register_into_the_catalog_and_it_knows_every_id():
    from stackctl.doctor.all_checks import load_all
    from stackctl.rules.ruleset import RULES

    checks = load_all()
    assert {i for i, kind in ids.REGISTERED.items() if kind == ids.RULE} == set(RULES)
    assert {i for i, kind in ids.REGISTERED.items() if kind == ids.CHECK} == set(checks)
    assert ids.known_ids() == set(RULES) | set(checks)


def test_skip_ids_are_judged_without_importing_doctor():
    """`validate` checks checks.skip against every id, doctor's included, without paying for importing them, and
    reads their ids from sources.toml's table headers without parsing its sources (a TOML parse of the whole file
    took a tenth of `validate`'s run)."""
    script = ("import sys; from stackctl.rules.ruleset import run_rules; from stackctl.rules.guard_rules import "
              "unknown_skip_ids; print(unknown_skip_ids(['host.gpus', 'lmcache-hash-seed', 'host.gpu'])); "
              "print(sorted(m for m in sys.modules if m.startswith('stackctl.doctor'))); "
              "from stackctl.knowledge import sources; print(sources.table.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    judged, doctor_modules, sources_parsed = out.splitlines()
    assert judged == "[\"'host.gpu' is not a rule or check id (did you mean `host.gpus`?)\"]"
    assert doctor_modules == "[]"
    assert sources_parsed == "0"
