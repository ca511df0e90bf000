"""classify_backend: pure judgement over image-probe JSON (the probe itself is tested in tests/integration)."""

from __future__ import annotations

import pytest

from stackctl.doctor.lmcache_backend import (
    BackendVerdict,
    classify_backend,
    expected_modules,
)

CUDA_ELF = {
    "needed": ["libc10.so", "libtorch.so", "libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so", "libc.so.6"],
    "sections": [".text", ".nv_fatbin", ".nvFatBinSegment", ".dynamic"],
    "symbols": {"__cudaRegisterFatBinary": "referenced", "__hipRegisterFatBinary": "absent"},
    "hip_offload": None,
}


def hip_elf(targets=("gfx942",), complete=True, compressed=0) -> dict:
    return {
        "needed": ["libamdhip64.so.6", "libc.so.6"],
        "sections": [".text", ".hip_fatbin", ".hipFatBinSegment"],
        "symbols": {"__cudaRegisterFatBinary": "absent", "__hipRegisterFatBinary": "referenced"},
        "hip_offload": {"bundles": 1, "compressed_bundles": compressed, "targets": list(targets),
                        "targets_complete": complete},
    }


CPU_ELF = {"needed": ["libc10.so", "libc.so.6"], "sections": [".text"],
           "symbols": {"__cudaRegisterFatBinary": "absent", "__hipRegisterFatBinary": "absent"}, "hip_offload": None}


def probe(version: str | None, modules: dict) -> dict:
    """Image-probe JSON with an LMCache package holding `modules` (name -> ELF facts, or an error string)."""
    native = []
    for name, elf in modules.items():
        failed = isinstance(elf, str)
        native.append({"module": name, "file": f"{name}.cpython-311-x86_64-linux-gnu.so", "size": 1,
                       "elf": None if failed else elf, "error": elf if failed else None})
    return {"lmcache": {"found": True, "package_dir": "/site/lmcache", "version": version,
                        "native_modules": native}, "errors": []}


@pytest.mark.parametrize(
    ("version", "modules"),
    [
        ("0.5.6", ("cuda_ops",)),
        ("0.5.4", ("cuda_ops",)),
        ("0.5.3", ("c_ops",)),
        ("0.5.0", ("c_ops",)),
        ("0.5.7.dev3+g1234abc", ("cuda_ops",)),
        ("0.4.7", ("c_ops",)),
        ("0.3.9", ("c_ops",)),
        (None, ("cuda_ops", "c_ops")),
        ("dev-branch", ("cuda_ops", "c_ops")),  # a git ref, not a version
    ],
)
def test_expected_module_names_follow_the_version_table(version, modules):
    assert expected_modules(version) == modules


def test_pypi_style_cuda_build_is_cuda():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": CUDA_ELF, "lmcache_native": CPU_ELF}), None, ["gfx942"])
    assert verdict.kind == "cuda"
    assert verdict.module == "cuda_ops"
    assert "DT_NEEDED libcudart.so.13" in verdict.evidence
    assert "section .nv_fatbin" in verdict.evidence
    assert "symbol __cudaRegisterFatBinary (referenced)" in verdict.evidence
    assert verdict.missing_archs == []


def test_old_c_ops_cuda_build_is_cuda():
    elf = dict(CUDA_ELF, needed=["libcudart.so.12"], sections=[".text"], symbols={})
    verdict = classify_backend(probe("0.3.9", {"c_ops": elf}), None, [])
    assert (verdict.kind, verdict.module) == ("cuda", "c_ops")
    assert verdict.evidence[-1] == "DT_NEEDED libcudart.so.12"


def test_hip_build_with_all_archs():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": hip_elf(["gfx942", "gfx950"])}), None, ["gfx942"])
    assert verdict == BackendVerdict(
        kind="hip", module="cuda_ops", targets=["gfx942", "gfx950"], targets_known=True, missing_archs=[],
        evidence=["LMCache 0.5.6 loads lmcache.cuda_ops", "DT_NEEDED libamdhip64.so.6", "section .hip_fatbin",
                  "section .hipFatBinSegment", "symbol __hipRegisterFatBinary (referenced)",
                  "offload targets gfx942, gfx950"],
        extra_archs=["gfx950"], hip_runtime="libamdhip64.so.6", kernels_launched=14,
    )


def test_hip_build_missing_an_arch():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": hip_elf(["gfx90a:xnack-"])}), None, ["gfx942", "gfx90a"])
    assert verdict.kind == "hip"
    assert verdict.targets == ["gfx90a"]  # target features dropped
    assert verdict.missing_archs == ["gfx942"]


def test_compressed_bundles_leave_archs_unknown_not_missing():
    elf = hip_elf(targets=[], complete=False, compressed=2)
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": elf}), None, ["gfx942"])
    assert verdict.kind == "hip"
    assert verdict.targets_known is False
    assert verdict.missing_archs == []
    assert "2 compressed offload bundle(s): target list incomplete" in verdict.evidence


def test_hip_module_of_04x_is_c_ops():
    verdict = classify_backend(probe("0.4.7", {"c_ops": hip_elf(), "native_storage_ops": CPU_ELF}), None, ["gfx942"])
    assert (verdict.kind, verdict.module, verdict.targets) == ("hip", "c_ops", ["gfx942"])


def test_no_native_module_is_fallback():
    verdict = classify_backend(probe("0.5.6", {"lmcache_native": CPU_ELF, "lmcache_fs": CPU_ELF}), None, ["gfx942"])
    assert verdict.kind == "fallback"
    assert verdict.module is None
    assert "no cuda_ops*.so in /site/lmcache: torch baseline ops" in verdict.evidence


def test_module_of_the_wrong_generation_is_still_fallback():
    verdict = classify_backend(probe("0.5.6", {"c_ops": hip_elf()}), None, ["gfx942"])
    assert verdict.kind == "fallback"
    assert "found c_ops instead, which this version does not load" in verdict.evidence


def test_unknown_version_examines_whichever_module_exists():
    verdict = classify_backend(probe(None, {"c_ops": CUDA_ELF}), None, [])
    assert (verdict.kind, verdict.module) == ("cuda", "c_ops")
    assert verdict.evidence[0] == "LMCache version unknown loads lmcache.cuda_ops or lmcache.c_ops"


def test_explicit_version_wins_over_probe_version():
    verdict = classify_backend(probe("0.5.6", {"c_ops": CUDA_ELF}), "0.4.7", [])
    assert (verdict.kind, verdict.module) == ("cuda", "c_ops")


def test_unreadable_elf_is_unknown():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": "ElfError: not an ELF file"}), None, [])
    assert (verdict.kind, verdict.module) == ("unknown", "cuda_ops")
    assert "ELF unreadable (ElfError: not an ELF file)" in verdict.evidence[-1]


def test_module_without_gpu_markers_is_unknown():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": CPU_ELF}), None, [])
    assert verdict.kind == "unknown"
    assert verdict.evidence[-1] == "no CUDA or HIP markers"


def test_module_with_both_markers_is_unknown():
    elf = dict(CUDA_ELF, sections=CUDA_ELF["sections"] + [".hip_fatbin"])
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": elf}), None, [])
    assert verdict.kind == "unknown"
    assert verdict.evidence[-1] == "both CUDA and HIP markers"


def test_missing_lmcache_package_is_unknown():
    verdict = classify_backend({"lmcache": {"found": False, "native_modules": []}, "errors": []}, None, ["gfx942"])
    assert verdict.kind == "unknown"
    assert verdict.evidence == ["LMCache package not found in the image"]


def test_probe_without_lmcache_section_is_unknown():
    assert classify_backend({"lmcache": None, "errors": ["lmcache: boom"]}, None, []).kind == "unknown"


def test_hip_build_names_its_runtime_and_no_extra_targets_when_exact():
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": hip_elf(["gfx942", "gfx950:xnack-"])}), None,
                               ["gfx950", "gfx942"])
    assert (verdict.hip_runtime, verdict.extra_archs, verdict.missing_archs) == ("libamdhip64.so.6", [], [])


def test_hip_build_without_the_runtime_names_none():
    elf = dict(hip_elf(), needed=["libc.so.6"])
    verdict = classify_backend(probe("0.5.6", {"cuda_ops": elf}), None, ["gfx942"])
    assert verdict.kind == "hip" and verdict.hip_runtime is None  # still HIP by its section and symbol
