"""serve.sh's own dtype decision (a bundle run without `stackctl up`, by `docker compose` or by hand): the rendered
bash function agrees with stackctl's decision from the CPU's flags (stackctl/host/isa.py) on every kind of CPU and
oneDNN cap, so an AVX2-only host serves float32 there too, not emulated bf16."""

import subprocess

import pytest
from helpers import REPO

from stackctl.bundle.render import render_files
from stackctl.host.isa import parse_cpuinfo
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

CPUS = {
    "avx2 only (AMD EPYC VM)": "flags\t\t: fpu sse4_2 avx avx2 fma\n",
    "avx-512 without bf16": "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n",
    "avx512_bf16 (Zen 4)": "flags\t\t: fpu avx2 avx512f avx512_bf16\n",
    "amx (Sapphire Rapids)": "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile\n",
    "arm64 with bf16": "Features\t: fp asimd asimdhp bf16 sve i8mm\n",
    "arm64 without bf16": "Features\t: fp asimd asimdhp\n",
}
CAPS = ["", "AVX2", "avx512_core", "AVX512_CORE_BF16", "AVX512_CORE_AMX", "NOT_A_LEVEL"]


@pytest.fixture(scope="module")
def native_bf16_function() -> str:
    serve = render_files(StackSpec(load_recipe(REPO / "recipes" / "cpu-smoke.toml")), guard=False)["serve.sh"].decode()
    start = serve.index("native_bf16() {")
    return serve[start:serve.index("\n}\n", start) + 3]


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("cap", CAPS)
def test_serve_sh_decides_as_stackctl_does_from_the_flags(native_bf16_function, tmp_path, cpu, cap):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\n{CPUS[cpu]}\n")
    function = native_bf16_function.replace("/proc/cpuinfo", str(cpuinfo))
    script = f"set -euo pipefail\n{function}\nif native_bf16; then echo bfloat16; else echo float32; fi\n"
    decided = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", **({"ONEDNN_MAX_CPU_ISA": cap} if cap else {})})
    assert decided.returncode == 0, decided.stderr
    expected = parse_cpuinfo(cpuinfo.read_text()).for_environment({"ONEDNN_MAX_CPU_ISA": cap}).native("bfloat16")
    assert decided.stdout.strip() == ("bfloat16" if expected else "float32"), (cpu, cap)
