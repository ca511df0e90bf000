"""build/warm_compile.py against stand-ins of vllm's logprob module and of the two torch names it uses: what it
calls, what it reports, and that a vLLM without the op leaves the build going. What it compiles in a real image, and
that a server then finds it, is tested on the cpu-smoke stack (tests/integration/test_stack.py)."""
import re
import subprocess
import sys
from pathlib import Path

WARM = Path(__file__).resolve().parents[2] / "templates" / "files" / "warm_compile.py"

STAND_IN_TORCH = {
    "torch/__init__.py": (
        "class Tensor:\n"
        "    def __init__(self, shape): self.shape = shape\n"
        "    def __getitem__(self, key): return Tensor((self.shape[0], 1))\n"
        "    def clone(self): return self\n"
        "def randn(*shape): return Tensor(shape)\n"),
    "torch/_dynamo/__init__.py": "",
    "torch/_dynamo/utils.py": "import collections\ncounters = collections.defaultdict(collections.Counter)\n",
}
# The op as inductor would account for it: the one-request graph found in the cache, the two-request graph compiled.
RECORDING_OP = (
    "from torch._dynamo.utils import counters\n"
    "def batched_count_greater_than(x, values):\n"
    "    assert values.shape == (x.shape[0], 1)\n"
    "    print('called', x.shape)\n"
    "    counters['inductor']['fxgraph_cache_hit' if x.shape[0] == 1 else 'fxgraph_cache_miss'] += 1\n")


def _run(tmp_path: Path, logprobs_module: str | None, *args: str) -> subprocess.CompletedProcess:
    """warm_compile.py with the stand-ins on sys.path (logprobs_module None: a vllm without that module)."""
    site = tmp_path / "site"
    files = dict(STAND_IN_TORCH)
    for folder in ("vllm", "vllm/v1", "vllm/v1/sample", "vllm/v1/sample/ops"):
        files[f"{folder}/__init__.py"] = ""
    if logprobs_module is not None:
        files["vllm/v1/sample/ops/logprobs.py"] = logprobs_module
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    return subprocess.run([sys.executable, str(WARM), *args], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin",
                               "TORCHINDUCTOR_CACHE_DIR": "/opt/stackctl/inductor-cache"})


def test_calls_the_op_for_one_request_then_two_and_reports_inductors_cache_account(tmp_path):
    result = _run(tmp_path, RECORDING_OP, "--vocab", "8", "--vocab", "32")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("called")] == \
        ["called (1, 8)", "called (2, 8)", "called (1, 32)", "called (2, 32)"]
    reports = [re.sub(r"in [0-9.]+ s", "in N s", line) for line in result.stdout.splitlines()
               if line.startswith("stackctl warm")]
    assert reports[:2] == [
        "stackctl warm: batched_count_greater_than for 1 x 8 logits in N s; inductor cache "
        "/opt/stackctl/inductor-cache: 1 hit(s), 0 miss(es)",
        "stackctl warm: batched_count_greater_than for 2 x 8 logits in N s; inductor cache "
        "/opt/stackctl/inductor-cache: 0 hit(s), 1 miss(es)"]
    assert len(reports) == 4


def test_without_a_vocabulary_it_takes_the_one_of_the_models_stackctl_generates(tmp_path):
    result = _run(tmp_path, RECORDING_OP)
    assert result.returncode == 0, result.stderr
    assert "called (1, 4096)" in result.stdout.splitlines()


def test_a_vllm_without_the_logprob_module_compiles_nothing_and_says_why(tmp_path):
    result = _run(tmp_path, None, "--vocab", "8")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("stackctl warm: nothing compiled: "
                                    "vllm.v1.sample.ops.logprobs.batched_count_greater_than is not in this vLLM")


def test_a_vllm_whose_module_lacks_the_op_compiles_nothing(tmp_path):
    result = _run(tmp_path, "def another_op(): pass\n", "--vocab", "8")
    assert result.returncode == 0, result.stderr
    assert "nothing compiled" in result.stdout and "has no attribute 'batched_count_greater_than'" in result.stdout


def test_an_op_that_fails_fails_the_build_step(tmp_path):
    """A compile error here is the error the server's first logprobs request would meet: the build stops on it."""
    result = _run(tmp_path, "def batched_count_greater_than(x, values):\n    raise RuntimeError('inductor failed')\n",
                  "--vocab", "8")
    assert result.returncode == 1 and "RuntimeError: inductor failed" in result.stderr
