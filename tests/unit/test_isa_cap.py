"""STACKCTL_CPU_ISA_CAP: a shipped CPU recipe loaded under the cap runs as on an AVX2-only CPU, everywhere its
environment goes (the rendered stack.env, the dtype decision's view of the CPU, validate's rules)."""

import pytest
from helpers import REPO

from stackctl.bundle import stackspec
from stackctl.errors import StackctlError
from stackctl.host.isa import CpuIsa
from stackctl.recipe import load_recipe

AMX_HOST = CpuIsa("x86_64", ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"), "test CPU")


def test_a_cpu_recipe_under_the_avx2_cap_computes_as_an_avx2_host(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    recipe = load_recipe(REPO / "recipes" / "cpu-lmcache.toml")
    environment = stackspec.environment(recipe)
    assert environment["ONEDNN_MAX_CPU_ISA"] == "AVX2" and environment["ATEN_CPU_CAPABILITY"] == "avx2"
    seen = AMX_HOST.for_environment(environment)
    assert seen.features == ("avx2",) and "ONEDNN_MAX_CPU_ISA=AVX2" in seen.capped_by


def test_without_the_cap_the_recipe_is_as_written(monkeypatch):
    environment = stackspec.environment(load_recipe(REPO / "recipes" / "cpu-lmcache.toml"))
    assert "ONEDNN_MAX_CPU_ISA" not in environment and "ATEN_CPU_CAPABILITY" not in environment


def test_a_gpu_recipe_is_left_alone(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    recipe = load_recipe(REPO / "recipes" / "atom-lmcache-cpu.toml")
    assert "ONEDNN_MAX_CPU_ISA" not in stackspec.environment(recipe)


def test_an_unknown_cap_is_one_line_naming_the_variable_and_the_fix(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx3")
    with pytest.raises(StackctlError) as raised:
        load_recipe(REPO / "recipes" / "cpu-lmcache.toml")
    assert str(raised.value) == ("STACKCTL_CPU_ISA_CAP=avx3: not a CPU cap stackctl knows (fix: one of avx2, or "
                                 "unset it)")


def test_validate_finds_a_forced_bf16_under_the_cap(cli, monkeypatch, tmp_path):
    text = (REPO / "recipes" / "cpu-lmcache.toml").read_text().replace('dtype = "auto"', 'dtype = "bfloat16"', 1)
    forced = tmp_path / "bf16.toml"
    forced.write_text(text)
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    result = cli("validate", str(forced))
    assert result.returncode == 1 and "error[cpu-dtype-emulated]" in result.stdout + result.stderr
