"""image.parsers: the stack's serve arguments and lmcache.yaml read by the image's own vLLM and LMCache, in one
container run of the stack's image (checks/parsers/parse_config.py, mounted read-only, so the image is not rebuilt
for it)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from stackctl.bundle import render as renderer
from stackctl.bundle import stackspec
from stackctl.doctor.registry import Unavailable
from stackctl.resources import shipped

DRIVER = "/opt/stackctl/doctor/parse_config.py"
SPEC_DIR = "/opt/stackctl/doctor/parsers"
TIMEOUT_S = 300


def server_arguments(recipe) -> list[str]:
    """What serve.sh gives vLLM after the program name: the model, then the flags (stackspec.serve_args, the same
    function render writes serve.sh from)."""
    return [recipe.model.path] + stackspec.serve_args(recipe)


def run(ctx) -> dict:
    """{"vllm": {...}, "lmcache": {...}} as the probe reports it (see checks/parsers/parse_config.py)."""
    from stackctl.engine import docker_adapter

    recipe = ctx.recipe
    engine = ctx.engine()
    if docker_adapter.find_image(engine, ctx.image_tag) is None:
        raise Unavailable(f"image {ctx.image_tag} not built (run `stackctl build {recipe.source}`)")
    files = renderer.render_files(recipe, guard=False)
    with tempfile.TemporaryDirectory(prefix="stackctl-parsers-") as spec_dir:
        Path(spec_dir, "args.json").write_text(json.dumps(server_arguments(recipe)))
        command = ["python", DRIVER, "--args-json", f"{SPEC_DIR}/args.json"]
        if "lmcache.yaml" in files:
            Path(spec_dir, "lmcache.yaml").write_bytes(files["lmcache.yaml"])
            command += ["--lmcache-config", f"{SPEC_DIR}/lmcache.yaml"]
        volumes = {spec_dir: {"bind": SPEC_DIR, "mode": "ro"},
                   str(shipped("checks") / "parsers" / "parse_config.py"): {"bind": DRIVER, "mode": "ro"}}
        container = engine.containers.run(ctx.image_tag, command, entrypoint="", detach=True, network_mode="host",
                                          environment=stackspec.environment(recipe), volumes=volumes)
        try:
            container.wait(timeout=TIMEOUT_S)
            output = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        finally:
            container.remove(force=True)
    line = next((text for text in reversed(output.splitlines()) if text.startswith("{")), None)
    if line is None:
        raise Unavailable(f"the parser probe printed no result: {output[-300:]!r}")
    return json.loads(line)
