"""STACKCTL_CPU_ISA_CAP: a shipped CPU recipe derived under the cap runs as on an AVX2-only CPU, everywhere its
environment goes (the rendered stack.env, the dtype decision's view of the CPU, validate's rules). The cap is an
option of the stack spec, read where a command starts; the loader is pure and the loaded recipe never changes."""

import pytest
from helpers import REPO

from stackctl.bundle import stackspec
from stackctl.bundle.stackspec import StackSpec
from stackctl.errors import StackctlError
from stackctl.host.isa import CpuIsa
from stackctl.recipe import load_recipe

AMX_HOST = CpuIsa("x86_64", ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"), "test CPU")


def test_a_cpu_recipe_under_the_avx2_cap_computes_as_an_avx2_host(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    from stackctl.cli.common import load

    spec = load(str(REPO / "recipes" / "cpu-lmcache.toml"))  # as every command derives it
    assert spec.isa_cap == "avx2"
    environment = spec.environment
    assert environment["ONEDNN_MAX_CPU_ISA"] == "AVX2" and environment["ATEN_CPU_CAPABILITY"] == "avx2"
    seen = AMX_HOST.for_environment(environment)
    assert seen.features == ("avx2",) and "ONEDNN_MAX_CPU_ISA=AVX2" in seen.capped_by


def test_the_loader_is_pure_and_the_loaded_recipe_is_never_capped(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    loaded = load_recipe(REPO / "recipes" / "cpu-lmcache.toml")
    written = dict(loaded.serve.env)
    assert "ONEDNN_MAX_CPU_ISA" not in stackspec.environment(loaded)  # the variable alone changes nothing
    spec = StackSpec(loaded, isa_cap="avx2")
    assert spec.environment["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert loaded.serve.env == written and spec.recipe is not loaded  # the cap went on a copy


def test_without_the_cap_the_recipe_is_as_written(monkeypatch):
    monkeypatch.delenv("STACKCTL_CPU_ISA_CAP", raising=False)
    loaded = load_recipe(REPO / "recipes" / "cpu-lmcache.toml")
    spec = StackSpec(loaded)
    assert "ONEDNN_MAX_CPU_ISA" not in spec.environment and "ATEN_CPU_CAPABILITY" not in spec.environment
    assert spec.recipe is loaded


def test_a_gpu_recipe_is_left_alone(monkeypatch):
    spec = StackSpec(load_recipe(REPO / "recipes" / "atom-lmcache-cpu.toml"), isa_cap="avx2")
    assert "ONEDNN_MAX_CPU_ISA" not in spec.environment


def test_an_unknown_cap_is_one_line_naming_the_variable_and_the_fix(monkeypatch):
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx3")
    from stackctl.cli.common import load

    with pytest.raises(StackctlError) as raised:
        load(str(REPO / "recipes" / "cpu-lmcache.toml"))
    assert str(raised.value) == ("STACKCTL_CPU_ISA_CAP=avx3: not a CPU cap stackctl knows (fix: one of avx2, or "
                                 "unset it)")


def test_validate_finds_a_forced_bf16_under_the_cap(cli, monkeypatch, tmp_path):
    text = (REPO / "recipes" / "cpu-lmcache.toml").read_text().replace('dtype = "auto"', 'dtype = "bfloat16"', 1)
    forced = tmp_path / "bf16.toml"
    forced.write_text(text)
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    result = cli("validate", str(forced))
    assert result.returncode == 1 and "error[cpu-dtype-emulated]" in result.stdout + result.stderr
