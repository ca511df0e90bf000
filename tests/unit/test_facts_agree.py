"""The hand-written version tables (stackctl/knowledge/compat.toml) and the facts generated from the packages
(stackctl/knowledge/facts/, scripts/extract-facts.py) never disagree: for every release with facts, a range in
compat.toml holds exactly where the package has (or lacks) the key, variable or flag."""

import pytest

from stackctl.bundle import keys
from stackctl.knowledge import compat, facts


def _releases(package):
    return facts.versions(package)


@pytest.mark.parametrize("entry", compat.table()["pass_config_keys"], ids=lambda e: e["key"])
def test_pass_config_ranges_match_the_packages(entry):
    for version in _releases("vllm"):
        present = entry["key"] in facts.load("vllm", version)["pass_config"]
        assert present == compat.in_range(version, entry.get("since"), entry.get("until")), version


@pytest.mark.parametrize("entry", compat.table()["compilation_keys"], ids=lambda e: e["key"])
def test_removed_compilation_keys_match_the_packages(entry):
    for version in _releases("vllm"):
        data = facts.load("vllm", version)["compilation_config"]
        assert (entry["key"] in data) == compat.in_range(version, until=entry["until"]), version
        if entry["key"] not in data:
            assert entry["replacement"] in data, version  # where the rule fires, the key it names exists


@pytest.mark.parametrize("entry", compat.table()["removed_env"], ids=lambda e: e["name"])
def test_removed_env_vars_match_the_packages(entry):
    for version in _releases("vllm"):
        known = entry["name"] in facts.load("vllm", version)["env"]
        assert known == (not compat.in_range(version, since=entry["since"])), version


def test_the_default_releases_have_facts():
    defaults = compat.table()["defaults"]
    for key in ("atom_vllm", "cpu_vllm"):
        assert defaults[key] in _releases("vllm"), key
    assert defaults["lmcache"] in _releases("lmcache")


def test_the_flags_stackctl_writes_exist_in_every_supported_release():
    """Every flag serve_args can write (keys.SERVE_FLAG_KEYS) is accepted by every release from 0.19 on."""
    from stackctl.knowledge.serve_flags import flag_table

    for version in _releases("vllm"):
        if compat.parse_version(version) < compat.parse_version("0.19.0"):
            continue
        table = flag_table(facts.release("vllm", version))
        missing = [flag for flag in keys.SERVE_FLAG_KEYS if flag not in table]
        assert missing == [], version


def test_the_lmcache_keys_stackctl_writes_exist_in_every_release():

    for version in _releases("lmcache"):
        config = facts.load("lmcache", version)["config"]
        assert [k for k in keys.LMCACHE_KEYS if k not in config] == [], version


def test_every_facts_file_names_its_release_and_cites_file_lines():
    import re

    for package in ("vllm", "lmcache"):
        for version in _releases(package):
            data = facts.load(package, version)
            assert data["package"] == package and data["version"] == version and data["read_from"]
            sections = ("flags", "compilation_config", "pass_config") if package == "vllm" else ("config",)
            for section in sections:
                for name, entry in data[section].items():
                    assert re.fullmatch(rf"{package}/\S+\.py:\d+", entry["at"]), (version, section, name)
