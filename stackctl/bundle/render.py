"""Render a recipe into a deployment bundle: Dockerfile, serve.sh, lmcache.yaml, stack.env, compose.yaml,
manifest.json, plus the build context (build helpers, probes).

Rendering is pure and deterministic (same recipe, same bytes); writing the bundle is atomic: a failed render
leaves no partial directory behind, and an existing bundle is replaced only once the new one is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

from stackctl import layout
from stackctl import __version__
from stackctl.errors import StackctlError
from stackctl.host.dtype import DTYPE_ENV
from stackctl.host.isa import ONEDNN_LEVELS, onednn_levels_with
from stackctl.knowledge import compat
from stackctl.recipe.model import Recipe
from stackctl.resources import shipped

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Mapping, Sequence

    from stackctl.bundle.stackspec import StackSpec

MANIFEST = "manifest.json"
# Files of the bundle that go into the image build; everything else is runtime (mounted or passed as env).
BUILD_INPUTS = ("Dockerfile", "build", "probes", "wheelhouse", "ca", "connector")
DOCKERIGNORE = "serve.sh\nlmcache.yaml\nstack.env\ncompose.yaml\nmanifest.json\n"


def render_files(spec: StackSpec, guard: bool = True) -> dict[str, bytes]:
    """All bundle files of a stack spec as {relative path: content}. Pure: no I/O beyond reading stackctl's own
    templates. guard=False skips the secret and mount checks, for callers that only hash the build inputs and write
    nothing."""
    if guard:
        refuse_secrets(spec.recipe)
        refuse_unsafe_mounts(spec)
        refuse_unresolved(spec.recipe)
    env = _jinja_env()
    context = _template_context(spec)
    dockerfile = spec.platform.dockerfile
    files: dict[str, bytes] = {
        "Dockerfile": _tidy(env.get_template(dockerfile).render(context)).encode(),
        "wheelhouse/.keep": b"",
        "ca/.keep": b"",
        **_build_context_files(spec),
    }
    # Runtime files name the image, whose tag is the hash of the build inputs above.
    context["image"] = image_tag(spec, files)
    files.update({
        "serve.sh": env.get_template("serve.sh.j2").render(context).encode(),
        "compose.yaml": env.get_template("compose.yaml.j2").render(context).encode(),
        "stack.env": _env_file(spec.environment).encode(),
        ".dockerignore": DOCKERIGNORE.encode(),
    })
    if spec.lmcache_config is not None:
        files["lmcache.yaml"] = _yaml(spec.lmcache_config, spec.name).encode()
    files[MANIFEST] = _manifest(spec, files).encode()
    return files


def refuse_secrets(recipe: Recipe) -> None:
    """No bundle holds a secret, whatever rules were skipped or ignored: one line at the first one (masked)."""
    from stackctl.findings import key_path_text
    from stackctl.recipe.positions import lookup
    from stackctl.secrets import find_in_recipe

    hits = find_in_recipe(recipe)
    if hits:
        path, message = hits[0]
        line, col = lookup(recipe.positions, path)
        more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
        raise StackctlError(f"{recipe.source}:{line}:{col}: {key_path_text(path)}: {message}{more}; a bundle never "
                            "holds a secret (fix: name a host variable in serve.secret_env or the S3 tier's "
                            "access_key_env / secret_key_env; see `stackctl explain secret-in-recipe`)")


def refuse_unsafe_mounts(spec: StackSpec) -> None:
    """No bundle mounts / or a system directory into the container, whatever was skipped or ignored."""
    from stackctl.recipe.safety import host_path_problem

    for mount in spec.volumes:
        problem = host_path_problem(mount["host"], writable=mount["mode"] == "rw")
        if problem:
            raise StackctlError(f"{spec.source}: host path {mount['host']!r} {problem}; it is never mounted "
                                "(fix: see `stackctl explain host-path-unsafe`)")


def refuse_unresolved(recipe: Recipe) -> None:
    """No bundle passes a shell reference or placeholder to the server as text, whatever was skipped or ignored."""
    from stackctl.findings import key_path_text
    from stackctl.recipe.safety import unresolved_values

    for path, message in unresolved_values(recipe):
        raise StackctlError(f"{recipe.source}: {key_path_text(path)}: {message} (fix: write the value itself; see "
                            "`stackctl explain unresolved-value`)")


def image_tag(spec: StackSpec, files: Mapping[str, bytes]) -> str:
    """The one name of the stack's image, stackctl/NAME:HASH of the build inputs: what `stackctl build` tags, what
    `up` runs, what compose.yaml and manifest.json name, what doctor inspects. Known offline, so a rendered bundle
    names the image `build` makes. The base image's id is not in the tag: `build` records it in a label and builds
    again, under the same tag, when the engine's base image has changed since (lifecycle/build.py)."""
    return f"{spec.image_name}:{image_hash(files)}"


def image_hash(files: Mapping[str, bytes]) -> str:
    """Hash of what goes into the image: the Dockerfile and the build context, not runtime tuning."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name.split("/", 1)[0] in BUILD_INPUTS:
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:12]


def write_bundle(files: Mapping[str, bytes], out_dir: Path) -> Path:
    """Write the bundle atomically into out_dir (replacing an earlier stackctl bundle, never anything else). A
    directory that cannot be written is a one-line error, and leaves nothing behind."""
    try:
        return _write_bundle(files, Path(out_dir))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StackctlError(f"{out_dir}: cannot write the bundle there: {reason} (fix: choose a writable -o DIR "
                            "whose parents are directories)") from None


def _write_bundle(files: Mapping[str, bytes], out_dir: Path) -> Path:
    if out_dir.exists() and not out_dir.is_dir():
        raise StackctlError(f"{out_dir}: exists and is not a directory (fix: choose another -o DIR)")
    if out_dir.exists() and any(out_dir.iterdir()) and not _is_bundle(out_dir):
        raise StackctlError(f"{out_dir}: exists and is not a stackctl bundle (fix: choose an empty or new -o DIR)")
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts:
            raise ValueError(f"bundle file name {name!r} escapes the bundle")
    parent = next((p for p in out_dir.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise StackctlError(f"{out_dir}: {parent} is a file, not a directory (fix: choose another -o DIR)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        staging.chmod(0o755)
        for name, content in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            if name.endswith(".sh"):
                path.chmod(0o755)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            try:
                os.replace(out_dir, old / "bundle")
                try:
                    os.replace(staging, out_dir)
                except BaseException:
                    os.replace(old / "bundle", out_dir)  # put the previous bundle back
                    raise
            finally:
                shutil.rmtree(old, ignore_errors=True)  # no .old leftovers, whatever happened
        else:
            os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


def _is_bundle(directory: Path) -> bool:
    """A directory stackctl wrote: its manifest.json says so (a user's own manifest.json does not count)."""
    try:
        return "stackctl" in json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError, TypeError):
        return False


def render(spec: StackSpec, out_dir: Path) -> Path:
    return write_bundle(render_files(spec), out_dir)


# -- pieces --------------------------------------------------------------------------------------------------

def _jinja_env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(shipped("templates"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["sq"] = shlex.quote
    env.filters["dq"] = _dockerfile_quote
    env.filters["yq"] = _yaml_quote
    env.bytecode_cache = _compiled_templates(env)
    return env


def _compiled_templates(env):
    """Compiled templates kept in the user's cache directory (XDG_CACHE_HOME, else ~/.cache: stackctl/templates-KEY):
    compiling them was most of a render, which every doctor run does for the image tag. jinja2's bytecode cache keys
    a template by its name and checks its source's checksum; the compiled code also depends on jinja2's version and
    the lexer's settings, so those name the folder. A folder that cannot be made, or a kept file that does not load,
    only means compiling again (None: no cache)."""
    import jinja2

    settings = repr((jinja2.__version__, env.keep_trailing_newline, env.trim_blocks, env.lstrip_blocks,
                     env.block_start_string, env.variable_start_string, env.comment_start_string,
                     env.line_statement_prefix, env.line_comment_prefix, env.newline_sequence, env.optimized,
                     sorted(env.extensions)))
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = base / "stackctl" / f"templates-{hashlib.sha256(settings.encode()).hexdigest()[:16]}"
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None

    class KeptTemplates(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket):
            try:
                super().load_bytecode(bucket)
            except Exception:  # noqa: BLE001 - a damaged file (any unmarshal error) is compiled again
                bucket.reset()

        def dump_bytecode(self, bucket):
            try:
                super().dump_bytecode(bucket)
            except OSError:  # a full or read-only state dir: the next render compiles again
                pass

    return KeptTemplates(str(directory))


def _tidy(text: str) -> str:
    """Collapse the blank lines that optional template sections leave behind."""
    import re

    return re.sub(r"\n{3,}", "\n\n", text)


def _dockerfile_quote(value) -> str:
    """A double-quoted Dockerfile word: JSON escaping, and `$` escaped so Docker does not substitute it."""
    return json.dumps(str(value)).replace("$", "\\$")


def _yaml_quote(value) -> str:
    """A double-quoted YAML scalar for compose files: `$$` keeps compose from interpolating."""
    return json.dumps(str(value)).replace("$", "$$")


def _template_context(spec: StackSpec) -> dict:
    recipe = spec.recipe
    platform = spec.platform
    return {
        "recipe": recipe,
        "stackctl_version": __version__,
        "recipe_hash": spec.recipe_hash,
        "base_image": spec.base_image,
        "versions": dict(spec.versions),
        "lmcache_install": spec.lmcache_install,
        "lmcache_build_requirements": spec.lmcache_build_requirements,
        "purge": recipe.build.purge_cuda_packages,
        "verify_imports": ["vllm"] + (["lmcache"] if spec.lmcache_install else []),
        "keep_prefixes": list(platform.tolerated_packages),
        "app_dir": layout.APP_DIR,
        "run_dir": layout.RUN_DIR,
        "probes_dir": layout.PROBES_DIR,
        "venv": layout.VENV,
        "command": list(spec.server_command),
        "arg_lines": _flag_lines(spec.serve_args),
        "container": spec.container_name,
        "rocm": platform.has_gpus,  # the GPU devices, groups and capabilities in compose.yaml
        # The release's ROCM_PATH (knowledge/rocm.py; /opt/rocm unless versions.rocm names a TheRock build). Built
        # from a version that matched MAJOR.MINOR[.PATCH], so it needs no quoting.
        "rocm_path": spec.rocm_path,
        "secrets": dict(spec.secret_references),
        "volumes": [dict(mount) for mount in spec.volumes],
        "environment": dict(spec.environment),
        "s3_ca": layout.S3_CA_ENV in spec.environment,
        "s3_ca_bundle": layout.S3_CA_BUNDLE,
        "lmcache": spec.lmcache_in_image,
        "lmcache_yaml": spec.lmcache_in_server,
        "lmcache_server": None if spec.lmcache_server_command is None else list(spec.lmcache_server_command),
        "lmcache_server_health": spec.lmcache_server_url + "/healthcheck",
        "cpu_connector": spec.cpu_connector_shipped,
        "cpu_connector_package": layout.CPU_CONNECTOR_PACKAGE,
        "cpu_connector_env": layout.CPU_CONNECTOR_ENV,
        "host_dtype": spec.host_decides_dtype,
        "dtype_env": DTYPE_ENV,
        "onednn_levels": " ".join(ONEDNN_LEVELS),
        "bf16_onednn_levels": {flag: " ".join(onednn_levels_with(flag)) for flag in ("avx512_bf16", "amx_bf16")},
    }


def _flag_lines(args: Sequence[str]) -> list[list[str]]:
    """Group argv into one flag (with its value, if any) per line, for a readable serve.sh."""
    lines: list[list[str]] = []
    for arg in args:
        if lines and not arg.startswith("-") and len(lines[-1]) == 1 and lines[-1][0].startswith("--"):
            lines[-1].append(arg)
        else:
            lines.append([arg])
    return lines


def verbatim_sources() -> dict[str, Path]:
    """Bundle files copied unchanged from stackctl's own files: build helpers and probes. The same for every recipe,
    so the `COPY build/` layer, and every layer after it, stays shared in the build cache between stacks."""
    files_dir = shipped("templates") / "files"
    sources = {f"build/{name}": files_dir / name
               for name in ("pip.sh", "filter_requirements.py", "purge_cuda.py", "make_tiny_model.py")}
    sources.update({f"probes/{probe.name}": probe for probe in sorted(shipped("probes").glob("*.py"))})
    return sources


def connector_sources() -> dict[str, Path]:
    """stackctl's LMCache connector for vLLM-CPU, copied unchanged into the images that carry it
    (stackspec.cpu_connector_shipped): the package (its Python modules and the C source of its copy loop, which the
    image compiles) and the .pth that loads its import hook, both from the top-level connector/ folder."""
    files_dir = shipped("connector")
    package = layout.CPU_CONNECTOR_PACKAGE
    sources = {f"connector/{package}/{module.name}": module
               for module in sorted([*(files_dir / package).glob("*.py"), *(files_dir / package).glob("*.c")])}
    sources[f"connector/{package}.pth"] = files_dir / f"{package}.pth"
    return sources


def hip_sources() -> dict[str, Path]:
    """The HIP compile step's helper (build/hip_env.sh: ROCM_PATH from the base image's layout), copied only into
    the images of platforms with GPUs, so the other images' build context stays as it was."""
    return {"build/hip_env.sh": shipped("templates") / "files" / "hip_env.sh"}


def cpu_compute_sources() -> dict[str, Path]:
    """The helpers of the images of platforms whose CPU runs the model: the one that compiles at build time what vLLM
    compiles on a CPU server's first request (build/warm_compile.py), and the one that removes the GPU-only Triton
    vLLM turns off there (build/drop_gpu_triton.py)."""
    files_dir = shipped("templates") / "files"
    return {f"build/{name}": files_dir / name for name in ("warm_compile.py", "drop_gpu_triton.py")}


def copied_sources() -> dict[str, Path]:
    """Every bundle file that is a verbatim copy of one of stackctl's own files (golden bundles leave them out)."""
    return {**verbatim_sources(), **connector_sources(), **hip_sources(), **cpu_compute_sources()}


def _build_context_files(spec: StackSpec) -> dict[str, bytes]:
    sources = verbatim_sources()
    if spec.cpu_connector_shipped:
        sources.update(connector_sources())
    if spec.platform.has_gpus:
        sources.update(hip_sources())
    if spec.platform.cpu_computes:
        sources.update(cpu_compute_sources())
    files = {name: source.read_bytes() for name, source in sources.items()}
    files["build/cuda_only.json"] = (json.dumps(compat.table()["cuda_only"], indent=2, sort_keys=True) + "\n").encode()
    return files


def _env_file(env: Mapping[str, str]) -> str:
    header = "# Generated by stackctl: the server's non-secret environment (docker --env-file format).\n"
    return header + "".join(f"{key}={value}\n" for key, value in env.items())


def _yaml(config: dict, stack: str) -> str:
    """LMCache config as YAML. Values are written as JSON scalars/mappings, which YAML reads as the same values."""
    lines = [f"# Generated by stackctl from recipe \"{stack}\": LMCache configuration "
             f"(LMCACHE_CONFIG_FILE). Tier sizes are GiB per tensor-parallel rank."]
    for key, value in config.items():
        lines.append(f"{key}: {_yaml_value(value)}")
    return "\n".join(lines) + "\n"


def _yaml_value(value) -> str:
    """JSON text, except floats in exponent form get a decimal point: YAML 1.1 (PyYAML, which LMCache uses) reads
    `1e-05` as a string but `1.0e-05` as a number."""
    if isinstance(value, float):
        text = repr(value)
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if exponent and "." not in mantissa else text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_yaml_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    return json.dumps(value)


def _manifest(spec: StackSpec, files: dict[str, bytes]) -> str:
    recipe = spec.recipe
    manifest = {
        "stackctl": __version__,
        "stack": recipe.stack.name,
        "platform": recipe.stack.platform,
        "engine": recipe.stack.engine,
        "recipe_hash": spec.recipe_hash,
        "image_hash": image_hash(files),
        "image": image_tag(spec, files),
        "base_image": spec.base_image,
        "versions": dict(spec.versions),
        "files": {name: hashlib.sha256(content).hexdigest() for name, content in sorted(files.items())},
    }
    if spec.ignored_errors:
        manifest["ignored_errors"] = list(spec.ignored_errors)  # --ignore-errors: what the bundle was made despite
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
