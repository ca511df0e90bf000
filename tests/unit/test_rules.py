"""Every rule has a failing fixture that produces exactly that rule, and a passing fixture that is clean."""

import re

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.recipe import load_recipe
from stackctl.recipe.rules import RULES, run_rules

RULE_FIXTURES = FIXTURES / "rules"


def test_every_rule_has_both_fixtures_and_a_doc():
    for rule_id, rule in RULES.items():
        assert (RULE_FIXTURES / rule_id / "fail.toml").is_file(), rule_id
        assert (RULE_FIXTURES / rule_id / "pass.toml").is_file(), rule_id
        assert rule.severity in ("error", "warning", "info")
        assert len(rule.doc) > 80 and rule.fix and rule.summary
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule_id)
    assert {p.name for p in RULE_FIXTURES.iterdir()} == set(RULES)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_failing_fixture_produces_exactly_its_rule(rule_id):
    path = RULE_FIXTURES / rule_id / "fail.toml"
    findings = run_rules(load_recipe(path))
    assert [f.rule_id for f in findings] == [rule_id]
    finding = findings[0]
    assert finding.file == str(path) and finding.line > 1
    # The line the finding points at is part of what the rule talks about.
    line_text = path.read_text().splitlines()[finding.line - 1]
    assert line_text.strip(), f"{rule_id} points at an empty line"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_passing_fixture_is_clean(rule_id):
    assert run_rules(load_recipe(RULE_FIXTURES / rule_id / "pass.toml")) == []


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.toml")))
def test_shipped_recipes_are_clean(recipe):
    assert run_rules(load_recipe(RECIPES / recipe)) == []


def test_skip_list_silences_a_rule():
    path = RULE_FIXTURES / "save-decode-cache" / "fail.toml"
    assert run_rules(load_recipe(path), skip=["save-decode-cache"]) == []
