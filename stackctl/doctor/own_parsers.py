"""image.parsers: the stack's serve arguments and lmcache.yaml read by the image's own vLLM and LMCache, in one
container run of the stack's image (probes/parsers/parse_config.py, mounted read-only, so the image is not rebuilt
for it)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from stackctl.doctor.registry import Unavailable
from stackctl.engine import docker_adapter as dk
from stackctl.resources import shipped

DRIVER = "/opt/stackctl/doctor/parse_config.py"
SPEC_DIR = "/opt/stackctl/doctor/parsers"
TIMEOUT_S = 300
# Names the stack a parser run is for (not the stack label: `status`, `down` and `up` never take it for the stack).
PARSERS_LABEL = "dev.stackctl.parsers-of"


def server_arguments(spec) -> list[str]:
    """What serve.sh gives vLLM after the program name: the model, then the flags (the stack spec's serve_args,
    which render writes serve.sh from)."""
    return [spec.recipe.model.path, *spec.serve_args]


def run(ctx) -> dict:
    """{"vllm": {...}, "lmcache": {...}} as the probe reports it (see probes/parsers/parse_config.py), kept per image
    and inputs: importing vLLM in a container takes seconds, and the same image reads the same inputs the same way."""
    arguments = server_arguments(ctx.spec)
    lmcache_yaml = ctx.bundle_files().get("lmcache.yaml")
    environment = dict(ctx.spec.environment)
    driver = _driver().read_bytes()
    return ctx.kept("image-parsers", key_parts(arguments, lmcache_yaml, environment, driver),
                    lambda: _ask_image(ctx, arguments, lmcache_yaml, environment))


def key_parts(arguments: list[str], lmcache_yaml: bytes | None, environment: dict, driver: bytes) -> list:
    """What the parsers' answer depends on besides the image: the arguments, lmcache.yaml, the environment the
    packages read, and the probe script itself (mounted from stackctl, not part of the image)."""
    return [arguments, None if lmcache_yaml is None else _digest(lmcache_yaml), environment, _digest(driver)]


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _driver() -> Path:
    return shipped("probes") / "parsers" / "parse_config.py"


def _ask_image(ctx, arguments: list[str], lmcache_yaml: bytes | None, environment: dict) -> dict:
    """One container run of the stack's image: the probe script reads the arguments and lmcache.yaml."""
    engine = ctx.engine()
    with tempfile.TemporaryDirectory(prefix="stackctl-parsers-") as spec_dir:
        Path(spec_dir, "args.json").write_text(json.dumps(arguments))
        command = ["python", DRIVER, "--args-json", f"{SPEC_DIR}/args.json"]
        if lmcache_yaml is not None:
            Path(spec_dir, "lmcache.yaml").write_bytes(lmcache_yaml)
            command += ["--lmcache-config", f"{SPEC_DIR}/lmcache.yaml"]
        volumes = {spec_dir: {"bind": SPEC_DIR, "mode": "ro"}, str(_driver()): {"bind": DRIVER, "mode": "ro"}}
        output = dk.run_to_end(engine, ctx.image_tag, command, environment=environment, volumes=volumes,
                               timeout=TIMEOUT_S, labels={PARSERS_LABEL: ctx.recipe.stack.name})
    line = next((text for text in reversed(output.splitlines()) if text.startswith("{")), None)
    if line is None:
        raise Unavailable(f"the parser probe printed no result: {output[-300:]!r}")
    return json.loads(line)
