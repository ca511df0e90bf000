"""End to end on the real Docker engine: the CPU smoke stack built, served, checked and removed (a runtime change
replacing a container without a rebuild: test_pinning.py)."""

from __future__ import annotations

import json

import pytest
from helpers import RECIPES, run_cli
from stacks import Stack, variant

from stackctl.recipe import load_recipe

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_up_serves_a_real_completion(smoke_stack):
    from stackctl.httpclient import get_json, post_json

    models = get_json("http://127.0.0.1:8000/v1/models")
    assert [m["id"] for m in models["data"]] == ["tiny"]
    answer = post_json("http://127.0.0.1:8000/v1/completions",
                       {"model": "tiny", "prompt": "w1 w2 w3 w4", "max_tokens": 4, "temperature": 0})
    assert answer["usage"]["prompt_tokens"] >= 4 and answer["usage"]["completion_tokens"] == 4


def test_a_first_request_with_logprobs_finds_vllms_compile_in_the_image(smoke_stack, smoke_image, docker_engine):
    """vLLM compiles its logprob op with inductor on a server's first request with log-probabilities (16-25 s on 2
    cores); the image carries that compile (build/warm_compile.py). Inductor's own account, in a new process of the
    image: every graph found in the cache. The running server's: after such a request, it has written nothing into
    the image's inductor cache (docker diff lists what a container changed in its image)."""
    import subprocess

    from stackctl.httpclient import post_json

    warm = subprocess.run(["docker", "run", "--rm", "--network", "host", "--entrypoint", "python", smoke_image,
                           "/opt/stackctl/build/warm_compile.py"], capture_output=True, text=True, timeout=300)
    reports = [line for line in warm.stdout.splitlines() if line.startswith("stackctl warm")]
    assert warm.returncode == 0 and len(reports) == 2, warm.stdout + warm.stderr
    assert all(line.endswith(": 1 hit(s), 0 miss(es)") for line in reports), reports

    answer = post_json("http://127.0.0.1:8000/v1/completions",
                       {"model": "tiny", "prompt": "w1 w2 w3 w4", "max_tokens": 2, "temperature": 0, "logprobs": 5})
    assert len(answer["choices"][0]["logprobs"]["top_logprobs"]) == 2
    changed = docker_engine.containers.get("stackctl-cpu-smoke").diff() or []
    written = [change["Path"] for change in changed if "inductor" in change["Path"]]
    assert [path for path in written if path.endswith((".so", ".cpp", ".h.gch", ".pch"))] == [], written


def test_the_image_holds_no_gpu_only_triton_and_structured_answers_still_work(smoke_stack, smoke_image):
    """PyPI's Triton (a requirement of xgrammar) has no CPU backend and vLLM on CPU turns it off; the build removes
    it in the step that installed it (build/drop_gpu_triton.py). The image: no triton to import, and no layer that
    carries it. The server: a structured answer (xgrammar's token mask, which runs on the CPU without Triton) is one of
    the choices it was held to. (A choice outside the tiny model's words fails with or without Triton: the grammar
    then rejects every token.)"""
    import subprocess

    from stackctl.httpclient import post_json

    probe = subprocess.run(["docker", "run", "--rm", "--network", "host", "--entrypoint", "python", smoke_image, "-c",
                            "import importlib.util, xgrammar; print(importlib.util.find_spec('triton'))"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe.stdout + probe.stderr
    history = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.Size}} {{.CreatedBy}}", smoke_image],
                             capture_output=True, text=True, timeout=60).stdout
    [install] = [line for line in history.splitlines() if "drop_gpu_triton.py" in line]
    assert not install.startswith(("0B", "0 B")), install  # the removal is in the installing step, not a later one
    # The tiny model's words are w0, w1, ...: held to two of them, it answers one and stops there (a random model
    # left alone runs to max_tokens).
    answer = post_json("http://127.0.0.1:8000/v1/completions",
                       {"model": "tiny", "prompt": "w1 w2 w3 w4", "max_tokens": 4, "temperature": 0,
                        "structured_outputs": {"choice": ["w7", "w9"]}})
    [choice] = answer["choices"]
    assert choice["text"].strip() in ("w7", "w9") and choice["finish_reason"] == "stop", answer


def test_status_reports_healthy(smoke_stack):
    rows = json.loads(smoke_stack.cli("status", smoke_stack.recipe, "--format", "json").stdout)
    assert len(rows) == 1
    row = rows[0]
    assert row["state"] == "running" and row["health"] == "healthy"
    assert row["recipe_current"] is True and row["hash_seed"] == "0"
    assert row["image"].startswith("stackctl/cpu-smoke:")
    assert row["description"] == load_recipe(smoke_stack.recipe).stack.description != ""
    text = smoke_stack.cli("status", smoke_stack.recipe).stdout.splitlines()
    assert text[0].split()[-1] == "DESCRIPTION" and text[1].endswith(row["description"])


def test_second_up_is_a_no_op(smoke_stack, docker_engine):
    before = docker_engine.containers.get("stackctl-cpu-smoke")
    result = smoke_stack.up()
    assert "nothing to do" in result.stderr
    after = docker_engine.containers.get("stackctl-cpu-smoke")
    assert after.id == before.id and after.attrs["State"]["StartedAt"] == before.attrs["State"]["StartedAt"]


def test_build_reuses_the_image(smoke_stack):
    result = smoke_stack.cli("build", smoke_stack.recipe)
    assert result.returncode == 0
    assert "up to date" in result.stderr and "Step 1/" not in result.stderr


def test_logs_show_the_server(smoke_stack):
    result = smoke_stack.cli("logs", smoke_stack.recipe, "--tail", "0")
    assert result.returncode == 0 and "Initializing a V1 LLM engine" in result.stdout


def test_failed_start_exits_nonzero_with_log_and_leaves_nothing(docker_engine, stack_env, tmp_path):
    empty_model = tmp_path / "empty-model"
    empty_model.mkdir()
    recipe = variant(tmp_path, "broken", {
        'name = "cpu-smoke"': 'name = "cpu-smoke-broken"',
        'path = "/opt/stackctl/models/tiny-random-llama"': f'path = "{empty_model}"',
        'generate = "tiny-random-llama"\n': "",
        "port = 8000": "port = 8010",
    })
    result = Stack(recipe, stack_env).cli("up", str(recipe), timeout=1800)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "exited during start-up" in result.stderr
    assert "Traceback" in result.stderr or "Error" in result.stderr  # the relevant log excerpt is shown
    assert docker_engine.containers.list(all=True, filters={"name": "stackctl-cpu-smoke-broken"}) == []


def test_dry_run_prints_docker_arguments_only(docker_engine, stack_env):
    result = run_cli("up", str(RECIPES / "cpu-smoke.toml"), "--dry-run", env=stack_env)
    assert result.returncode == 0
    kwargs = json.loads(result.stdout)
    assert "pinning:" in result.stderr
    assert kwargs["network_mode"] == "host" and kwargs["environment"]["PYTHONHASHSEED"] == "0"
