"""LMCache's Python fallback under both of its names (LMCache#3338), read from each release's source by
scripts/extract-facts.py: a stack on it is judged on the fallback whichever name its release uses."""

from __future__ import annotations

import pytest

from stackctl.doctor.lmcache_backend import FALLBACK_MODULES, classify_backend, fallback_module
from stackctl.doctor.server_checks import NATIVE_MISSING


@pytest.mark.parametrize("version, module", [
    ("0.4.1", "lmcache.non_cuda_equivalents"), ("0.4.5", "lmcache.non_cuda_equivalents"),
    ("0.4.6", "lmcache.python_ops_fallback"), ("0.5.2", "lmcache.python_ops_fallback"),
    ("0.5.3", "lmcache.v1.platform.torch_ops"), ("0.5.6", "lmcache.v1.platform.torch_ops"),
])
def test_each_release_names_the_fallback_it_ships(version, module):
    assert fallback_module(version) == module


def _probe(version: str, modules: list[dict]) -> dict:
    return {"lmcache": {"found": True, "version": version, "package_dir": "/site/lmcache", "native_modules": modules}}


@pytest.mark.parametrize("version, name", [("0.4.5", "non_cuda_equivalents"), ("0.4.7", "python_ops_fallback")])
def test_a_stack_on_the_fallback_is_a_fallback_under_either_name(version, name):
    verdict = classify_backend(_probe(version, []), None, ["gfx942"])
    assert verdict.kind == "fallback" and f"LMCache {version} runs lmcache.{name} instead" in verdict.evidence


def test_a_module_named_like_the_fallback_is_never_taken_for_the_native_one():
    """Asked for the fallback's names (as an unknown version asks for every candidate), a compiled file under that
    name is still not a native module."""
    from stackctl.doctor.lmcache_backend import _find_module

    modules = [{"module": name, "file": f"{name}.so", "elf": {"needed": ["libamdhip64.so.6"]}}
               for name in FALLBACK_MODULES]
    assert _find_module(modules, FALLBACK_MODULES) is None


def test_the_server_log_line_of_the_old_fallback_is_a_missing_native_module():
    line = "[2026-01-01 00:00:00] WARNING: Fallback to python backend lmcache.non_cuda_equivalents"
    assert any(marker in line for marker in NATIVE_MISSING)


@pytest.mark.parametrize("key, version, words", [
    ("cufile_buffer_size", "0.5.6", "LMCache 0.4.4 renamed it `gds_buffer_size`"),
    ("use_cufile", "0.4.4", "LMCache 0.4.4 renamed it `use_gds`"),
    ("gds_buffer_size", "0.4.3", "releases before 0.4.4 name it `cufile_buffer_size`"),
    ("use_gds", "0.4.1", "releases before 0.4.4 name it `use_cufile` (in extra_config)"),
])
def test_a_renamed_gds_key_is_told_by_the_release_it_is_used_with(key, version, words):
    from stackctl.knowledge.compat import lmcache_renamed_key

    assert words in lmcache_renamed_key(key, version)


@pytest.mark.parametrize("key, version", [("gds_buffer_size", "0.5.6"), ("cufile_buffer_size", "0.4.3"),
                                          ("gds_buffer_size", None), ("local_cpu", "0.5.6")])
def test_a_key_the_release_knows_by_that_name_is_not_renamed(key, version):
    from stackctl.knowledge.compat import lmcache_renamed_key

    assert lmcache_renamed_key(key, version) is None


def test_the_releases_carry_the_gds_keys_the_rename_table_says():
    from stackctl.knowledge import facts

    for version in ("0.4.1", "0.4.2", "0.4.3"):
        config = facts.release("lmcache", version).section("config")
        assert "cufile_buffer_size" in config and "gds_buffer_size" not in config and "use_gds" not in config
    for version in facts.versions("lmcache"):
        if version not in ("0.4.1", "0.4.2", "0.4.3"):
            config = facts.release("lmcache", version).section("config")
            assert {"gds_buffer_size", "use_gds"} <= set(config) and "cufile_buffer_size" not in config
