"""The bundle runs as rendered: `stackctl render`, then `stackctl build`, then the bundle's compose.yaml run on the
real engine to a healthy server that answers a completion. The image compose.yaml names must be the one `stackctl
build` made (they once disagreed: compose named a hash of the build inputs, build tagged one that also covered the
base image's id).

With no `docker compose` on the machine, the service is run as its exact `docker run` equivalent, translated key by
key from the parsed YAML; a key the translation does not know fails the test, so compose.yaml cannot grow a setting
this test silently drops.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import run_cli
from stacks import variant

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PORT = 8031  # no shipped recipe or other test uses it
NAME = "cpu-compose"


def docker_run_args(service: dict, bundle: Path) -> list[str]:
    """`docker run` arguments doing what `docker compose up` does with this service (relative volume sources are
    relative to the compose file's folder, as compose reads them)."""
    args = ["docker", "run", "--detach"]
    simple = {"container_name": "--name", "network_mode": "--network", "ipc": "--ipc", "shm_size": "--shm-size",
              "restart": "--restart"}
    repeated = {"devices": "--device", "group_add": "--group-add", "cap_add": "--cap-add",
                "security_opt": "--security-opt"}
    for key, value in service.items():
        if key in simple:
            args += [simple[key], str(value)]
        elif key in repeated:
            for item in value:
                args += [repeated[key], str(item)]
        elif key == "environment":
            for name, setting in value.items():
                args += ["--env", f"{name}={setting}"]
        elif key == "env_file":
            for env_file in [value] if isinstance(value, str) else value:
                args += ["--env-file", str(bundle / env_file)]
        elif key == "volumes":
            for volume in value:
                source, rest = volume.split(":", 1)
                if source.startswith("."):
                    source = str((bundle / source).resolve())
                args += ["--volume", f"{source}:{rest}"]
        elif key not in ("image", "command"):
            raise AssertionError(f"compose.yaml service key {key!r}: not translated to docker run (add it here)")
    args.append(service["image"])
    command = service.get("command")
    return args + ([command] if isinstance(command, str) else list(command or []))


def test_the_rendered_compose_file_runs_the_image_stackctl_build_made(smoke_image, docker_engine, stack_env, tmp_path):
    from stackctl.httpclient import post_json
    from stackctl.engine.health import wait_for_health

    recipe = variant(tmp_path, NAME, {'name = "cpu-smoke"': f'name = "{NAME}"', "port = 8000": f"port = {PORT}"})
    bundle = tmp_path / "bundle"
    rendered = run_cli("render", str(recipe), "-o", str(bundle), env=stack_env)
    assert rendered.returncode == 0, rendered.stderr
    built = run_cli("build", str(recipe), env=stack_env, timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    tag = built.stdout.strip().splitlines()[-1]

    services = yaml.safe_load((bundle / "compose.yaml").read_text())["services"]
    assert list(services) == [NAME]
    service = services[NAME]
    assert service["image"] == tag  # the image the bundle names is the one build made
    assert subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0

    container = service["container_name"]
    subprocess.run(["docker", "rm", "--force", container], capture_output=True)  # left by a killed run
    try:
        started = subprocess.run(docker_run_args(service, bundle), capture_output=True, text=True)
        assert started.returncode == 0, started.stderr
        # stackctl's own wait: /health polled until 200, the log's tail shown if the server exits or never answers
        wait_for_health(NAME, f"http://127.0.0.1:{PORT}/health", docker_engine.containers.get(container), 600, print)
        answer = post_json(f"http://127.0.0.1:{PORT}/v1/completions",
                           {"model": "tiny", "prompt": "w1 w2 w3 w4", "max_tokens": 4, "temperature": 0})
        assert answer["usage"]["completion_tokens"] == 4 and answer["choices"][0]["text"]
    finally:
        subprocess.run(["docker", "rm", "--force", container], capture_output=True)
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)  # the tag; cpu-smoke's layers stay
