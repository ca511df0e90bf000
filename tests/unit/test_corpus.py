"""Import + validate over the corpus of real-world launches and LMCache configs (tests/fixtures/corpus): every case
produces the findings a reader of the input expects, none it must not, and no secret of an input reaches the recipe
or the bundle. benchmarks/detection.py prints the same as recall / precision."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from helpers import FIXTURES, REPO

from stackctl.recipe.rules import RULES

_spec = importlib.util.spec_from_file_location("detection", REPO / "benchmarks" / "detection.py")
detection = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("detection", detection)  # dataclasses look their module up by name
_spec.loader.exec_module(detection)

CASES = sorted(p for p in (FIXTURES / "corpus").iterdir() if (p / "expected.toml").is_file())


def test_the_corpus_has_at_least_twenty_cases_each_with_its_source():
    assert len(CASES) >= 20
    for case in CASES:
        inputs = [p for p in case.iterdir() if p.suffix in (".sh", ".yaml", ".yml")]
        assert inputs, case.name
        for path in inputs:
            assert path.read_text().startswith("# Source: "), path


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_case_reports_what_the_input_holds(case):
    result = detection.run_case(case)
    assert result.error is None, result.error
    assert set(result.expected) | set(result.absent) <= set(RULES), "expected.toml names an unknown rule"
    assert not result.missed, f"not reported: {sorted(result.missed)}"
    assert not result.forbidden, f"reported but must not be: {sorted(result.forbidden)}"
    assert not result.unexpected, f"reported, not expected: {sorted(result.unexpected)}"
    assert result.leaks == []


def test_correct_published_launches_validate_without_errors():
    correct = [case for case in CASES
               if all(RULES[rule_id].severity != "error" for rule_id in detection.run_case(case).expected)]
    assert len(correct) >= 5
    for case in correct:
        result = detection.run_case(case)
        assert all(RULES[rule_id].severity != "error" for rule_id in result.reported), case.name


def test_benchmark_scores_meet_the_targets():
    recall, precision, leaks = detection.scores(detection.run_corpus())
    assert recall >= 0.95 and precision >= 0.95 and leaks == 0


def test_secret_detection_in_inputs_finds_key_named_and_shaped_values():
    text = 'aws_secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\nexport HF_TOKEN=hf_abcdefghijklmnopqrstuvwx\n'
    assert detection.secrets_in(text) >= {"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "hf_abcdefghijklmnopqrstuvwx"}
