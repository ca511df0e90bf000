"""build/drop_gpu_triton.py's decision against stand-in Triton packages: no Triton, or a Triton with a CPU backend,
is left alone. The removal itself runs in every CPU image build (the step fails the build when it cannot remove it
or vLLM reads Triton as on afterwards); that the built image has no Triton is tested on the cpu-smoke image
(tests/integration/test_stack.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

DROP = Path(__file__).resolve().parents[2] / "templates" / "files" / "drop_gpu_triton.py"


def _run(tmp_path: Path, backends: list[str] | None) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir()
    if backends is not None:
        (site / "triton" / "backends").mkdir(parents=True)
        (site / "triton" / "__init__.py").write_text("")
        (site / "triton" / "backends" / "__init__.py").write_text(f"backends = {dict.fromkeys(backends, None)!r}\n")
        (site / "triton-3.6.0.dist-info").mkdir()
        (site / "triton-3.6.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\n"
                                                                  "Version: 3.6.0\n")
    return subprocess.run([sys.executable, str(DROP)], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("backends", "said"), [
    (None, "stackctl: no Triton installed"),
    (["nvidia", "amd", "cpu"], "stackctl: triton 3.6.0 has a CPU backend: kept"),
])
def test_leaves_no_triton_and_a_triton_that_runs_on_the_cpu(tmp_path, backends, said):
    result = _run(tmp_path, backends)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == said
    if backends:
        assert (tmp_path / "site" / "triton").is_dir()


def test_a_gpu_only_triton_is_named_before_it_goes(tmp_path):
    """pip leaves the stand-in where it is (outside the interpreter's environment): the proof, in a new interpreter,
    finds Triton still importable and the step fails the build rather than go on."""
    result = _run(tmp_path, ["nvidia", "amd"])
    assert result.stdout.startswith("stackctl: removing triton 3.6.0: no CPU backend (vLLM on CPU turns it off)")
    assert result.returncode == 1 and result.stderr.strip().endswith(
        "stackctl: after removing triton: triton is still importable")
