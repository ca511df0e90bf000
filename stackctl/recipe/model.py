"""The recipe: a typed description of one inference stack.

Each section is a class of Field declarations; each Field carries its documentation and its constraints so that the
loader, the JSON Schema (`stackctl schema`) and the recipe reference in the README are all generated from this one
place. Field kinds are spelled out explicitly (``kind=``) so the loader stays small and a newcomer can see the
accepted TOML type next to the field. (Plain classes rather than dataclasses: dataclasses imports `inspect`, which
alone costs more than the whole `stackctl validate` start-up budget.)
"""

from __future__ import annotations

from stackctl.knowledge.kinds import OFFLOAD_ENGINES, PLATFORMS, TIER_KIND_RECORDS, TIER_KINDS, tier_kind
from stackctl.knowledge.serving_engines import SERVING_ENGINES, engine_help

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any

REQUIRED = object()  # marks a field the recipe must set

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$"
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


class Field:
    """One recipe key: its default, documentation, TOML kind and constraints.

    kind: str | int | float | bool | str_list | int_list | str_map | table | section | tiers | numa |
    cpulist_or_mode. constraints: choices, minimum, maximum, exclusive_minimum, pattern, example.
    """

    def __init__(self, default, doc: str, kind: str, **constraints):
        self.name = ""  # set by Section.__init_subclass__
        self.required = default is REQUIRED
        self.default = None if self.required else default
        self.doc = doc
        self.kind = kind
        self.meta = constraints

    def make_default(self):
        """A fresh default value (sections are built, lists and dicts copied)."""
        if self.kind == "section":
            return self.default()
        if isinstance(self.default, (list, dict)):
            return type(self.default)(self.default)
        return self.default


def option(default, doc: str, kind: str, **constraints) -> Any:
    """Declare a recipe key (typed as Any so that each declaration's annotation names the value's type)."""
    return Field(default, doc, kind, **constraints)


class Section:
    """Base of every recipe section: instances hold values, the class holds the Field declarations."""

    _fields: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._fields = {}
        for name, value in vars(cls).items():
            if isinstance(value, Field):
                value.name = name
                cls._fields[name] = value

    def __init__(self, **values):
        for name, spec in self._fields.items():
            setattr(self, name, values[name] if name in values else spec.make_default())

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, name) == getattr(other, name) for name in self._fields)

    def __repr__(self):
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({body})"

    def to_dict(self) -> dict:
        """Plain data (sections and tiers as dicts), e.g. for hashing and for the import round trip."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


def _plain(value):
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class Stack(Section):
    name: str = option(REQUIRED, "Stack name: image tag, container name and fleet label.", "str",
                  pattern=NAME_PATTERN, example="minimax-m25-lmcache")
    platform: str = option("rocm", "Where it runs: AMD Instinct GPUs (rocm) or any x86 host (cpu).", "str",
                      choices=PLATFORMS)
    engine: str = option("vllm", engine_help(), "str", choices=SERVING_ENGINES)
    base_image: str | None = option(None, "Base image; default: the image AMD publishes for versions.rocm and the "
                        "engine, else the platform's and engine's default.", "str",
                        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$", example="rocm/atom-dev:vllm-latest")
    description: str = option("", "Free text shown by `stackctl status`.", "str")


class Versions(Section):
    vllm: str | None = option(None, "vLLM version the stack runs (the base image's, for ROCm images).", "str",
                  pattern=VERSION_PATTERN, example="0.27.1")
    lmcache: str | None = option(None, "LMCache version (PyPI sdist for source builds).", "str",
                     pattern=VERSION_PATTERN, example="0.5.6")
    lmcache_git: str | None = option(None, "Build LMCache from this git URL@ref instead of the sdist.", "str",
                         pattern=r"^(https|ssh|file)://[^\s'\"]+@[A-Za-z0-9._/-]+$",
                         example="https://github.com/LMCache/LMCache@v0.5.6")
    torch: str | None = option(None, "torch version installed in CPU images.", "str",
                   pattern=VERSION_PATTERN, example="2.13.0")
    gpu_arch: list[str] = option(["gfx942"], "GPU architectures the HIP build targets (PYTORCH_ROCM_ARCH).",
                      "str_list", pattern=r"^gfx[0-9a-f]{3,4}$")
    rocm: str | None = option(None, "ROCm release the stack is built with (6.x, 7.0-7.2, TheRock 7.12+, Core SDK "
                  "10.x): decides the install layout, the HIP runtime and the GPU targets it can build for; unset: "
                  "the base image decides.", "str", pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$", example="7.0")


class Model(Section):
    path: str = option(REQUIRED, "Model directory (host path, mounted read-only) or Hugging Face id.", "str")
    served_name: str | None = option(None, "Name clients use in requests; default: last path component.", "str")
    tensor_parallel: int = option(1, "Tensor-parallel size (GPUs per server).", "int", minimum=1, maximum=64)
    kv_cache_dtype: str = option("auto", "KV cache dtype (vLLM --kv-cache-dtype).", "str", choices=KV_CACHE_DTYPES)
    dtype: str = option("auto", "Weights/activation dtype (vLLM --dtype).", "str")
    max_model_len: int | None = option(None, "Maximum context length.", "int", minimum=1)
    trust_remote_code: bool = option(False, "Allow model code from the model directory.", "bool")
    tool_call_parser: str | None = option(None, "vLLM --tool-call-parser (enables auto tool choice).", "str")
    reasoning_parser: str | None = option(None, "vLLM --reasoning-parser.", "str")
    generate: str | None = option(None, "Create a small random model at image build time instead of mounting "
                      "one (smoke tests and benchmarks; no download): tiny-random-llama (2 layers, starts in seconds) or "
                      "bench-random-llama (~150M parameters: prefill dominates a 2,000-token request).", "str",
                      choices=("tiny-random-llama", "bench-random-llama"))


class Serve(Section):
    port: int = option(8000, "HTTP port of the OpenAI-compatible server.", "int", minimum=1, maximum=65535)
    host: str = option("127.0.0.1", "Address the server binds.", "str")
    gpu_memory_utilization: float = option(0.9, "Fraction of each GPU's memory vLLM may use.", "float",
                                    exclusive_minimum=0.0, maximum=1.0)
    max_num_batched_tokens: int | None = option(None, "vLLM --max-num-batched-tokens.", "int", minimum=1)
    max_num_seqs: int | None = option(None, "vLLM --max-num-seqs.", "int", minimum=1)
    block_size: int | None = option(None, "KV block size in tokens.", "int", minimum=1)
    async_scheduling: bool | None = option(
        None, "vLLM async scheduling: unset keeps vLLM's default (on where supported, as in vLLM 0.27.1 and 0.32), "
        "true/false pass --async-scheduling / --no-async-scheduling.", "bool")
    prefix_caching: bool = option(True, "vLLM automatic prefix caching (the HBM tier).", "bool")
    prefix_caching_hash_algo: str | None = option(None, "vLLM --prefix-caching-hash-algo.", "str",
                                      choices=HASH_ALGOS)
    cudagraph_mode: str | None = option(None, "compilation_config.cudagraph_mode.", "str",
                            choices=CUDAGRAPH_MODES)
    enforce_eager: bool = option(False, "vLLM --enforce-eager (disables CUDA/HIP graphs).", "bool")
    compilation_config: dict[str, Any] = option({}, "Extra compilation_config keys, merged with cudagraph_mode.",
                                "table")
    dev_endpoints: bool = option(False, "VLLM_SERVER_DEV_MODE=1: /reset_prefix_cache and /server_info, used by "
                           "`doctor` to prove hits come from LMCache.", "bool")
    env: dict[str, str] = option({}, "Environment of the server process (no secrets: see secret_env).", "str_map",
                 key_pattern=ENV_NAME_PATTERN)
    secret_env: dict[str, str] = option({}, "Container variable -> name of the host variable that holds the "
                        "secret; read at run time only.", "str_map", key_pattern=ENV_NAME_PATTERN,
                        pattern=ENV_NAME_PATTERN)
    extra_args: list[str] = option([], "Extra arguments appended to the server command line.", "str_list")


class Tier(Section):
    kind: str = option(REQUIRED, ", ".join(f"{k.name} ({k.summary})" for k in TIER_KIND_RECORDS) + ".", "str",
                       choices=TIER_KINDS)
    size_gb: float | None = option(None, "Capacity in GiB, all tensor-parallel ranks together (cpu, disk); free "
                                   "space the fs tier's path must have (fs).", "float", exclusive_minimum=0.0,
                                   maximum=1048576)
    path: str | None = option(None, "Directory on the host (disk, fs).", "str")
    url: str | None = option(None, "LMCache S3 URL: s3:// + the bucket's virtual-host endpoint, e.g. "
                 "s3://kv.s3.us-east-1.amazonaws.com or a Ceph RGW host:port (s3).", "str",
                 pattern=r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s]+$", example="s3://kvcache.rgw.example.com:7480")
    region: str | None = option(None, "S3 region; LMCache requires it, also for Ceph (s3).", "str")
    disable_tls: bool = option(False, "Plain HTTP to the S3 endpoint (lab Ceph clusters) (s3).", "bool")
    access_key_env: str | None = option(None, "Host variable holding the access key id (s3).", "str",
                            pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    secret_key_env: str | None = option(None, "Host variable holding the secret key (s3).", "str",
                            pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    credentials_file: str | None = option(None, "AWS-style credentials file on the host, mounted read-only (s3).",
                              "str")
    ca_file: str | None = option(None, "CA certificate (PEM) the S3 endpoint's certificate chains to, when it is not a public "
                     "CA (a site CA, a lab Ceph RGW); mounted read-only and trusted by the server and by doctor's tier checks "
                     "(s3).", "str")


# Which optional tier fields each kind accepts and requires: knowledge/kinds.py's records (allowed, required).


class Cache(Section):
    enabled: bool = option(False, "Offload KV beyond GPU HBM, through the engine cache.offload names.", "bool")
    offload: str = option("lmcache", "The offload engine: lmcache (LMCache in the server process, "
                          "LMCacheConnectorV1), lmcache-mp (LMCache's own server, `lmcache server`, reached through "
                          "LMCacheMPConnector), vllm-native (vLLM's OffloadingConnector: --kv-offloading-backend "
                          "native), vllm-simple (vLLM's SimpleCPUOffloadConnector). Each serves the tiers `stackctl "
                          "explain offload-engine-tier` lists.", "str", choices=OFFLOAD_ENGINES)
    server_port: int = option(5555, "lmcache-mp: the ZMQ port of the LMCache server (on 127.0.0.1 in the "
                              "container; LMCache's default 5555).", "int", minimum=1, maximum=65535)
    server_http_port: int = option(8080, "lmcache-mp: the LMCache server's HTTP port (/healthcheck, /status; "
                                   "LMCache's default 8080).", "int", minimum=1, maximum=65535)
    chunk_size: int = option(256, "LMCache chunk size in tokens. LMCache stores and finds whole chunks, so a hit "
                             "recomputes the prompt's last partial chunk: on vLLM-CPU keep it at the KV block size, "
                             "128 (rule lmcache-chunk-above-block).", "int", minimum=1)
    hash_seed: int | None = option(None, "PYTHONHASHSEED for every server process; required for cache hits "
                       "across processes, restarts and hosts.", "int", minimum=0, maximum=4294967295)
    save_decode_cache: bool = option(False, "Offload KV of decode steps too (causes long stalls).", "bool")
    use_layerwise: bool = option(False, "LMCache layer-wise transfer (requires PIECEWISE graphs).", "bool")
    async_loading: bool = option(False, "LMCache enable_async_loading.", "bool")
    cpu_connector: bool | None = option(None, "stackctl's LMCache connector for vLLM-CPU's KV cache (platform cpu "
                                        "only; unset: on). LMCache has none for the CPU device: off, it runs "
                                        "degraded and stores nothing.", "bool")
    extra: dict[str, Any] = option({}, "Extra LMCache config keys written to lmcache.yaml as given.", "table")
    multi_connector: list[dict[str, Any]] = option(
        [], "vLLM's MultiConnector, in order: the entry { kv_connector = \"NAME\" } naming the offload engine's own "
            "connector (LMCacheConnectorV1, LMCacheMPConnector or SimpleCPUOffloadConnector) stands for the one "
            "stackctl writes from [cache]; every other entry is a connector's --kv-transfer-config as vLLM reads it "
            "(e.g. NixlConnector for prefill/decode), passed as given. Empty: the engine's connector alone.",
        "table_list")
    tiers: list[Tier] = option([], "KV tiers below GPU HBM, fastest first.", "tiers")


class Host(Section):
    numa: str | int | list[int] = option("auto", "NUMA pinning: auto (the GPUs' nodes), off, a node, or nodes.",
                  "numa")
    isolcpus: str = option("auto", "Server CPUs: auto (isolated cores of the node if any), off, or a cpulist.",
                      "cpulist_or_mode")
    governor: str | None = option("performance", "Expected CPU frequency governor (null: do not check).", "str")
    numa_balancing: bool = option(False, "Expected kernel.numa_balancing (AMD guidance: off).", "bool")
    gpus: list[int] | None = option(None, "GPU indices the server uses; default the first tensor_parallel.",
                  "int_list")
    shm_size: str = option("16g", "Shared memory size of the container.", "str", pattern=r"^[0-9]+[bkmg]?$")


class Build(Section):
    wheelhouse: str | None = option(None, "Local folder of wheels pip may install from (air-gapped sites).",
                        "str")
    ca_bundle: str | None = option(None, "CA bundle for pip inside the build (proxies with TLS inspection).",
                       "str")
    pip_index: str | None = option(None, "pip index URL used inside the build (no credentials: they would stay in the "
                       "image; use a netrc or a proxy).", "str", example="https://pypi.internal.example/simple")
    lmcache_from: str | None = option(None, "source (the sdist: built for HIP on rocm, without native extensions on "
                                      "cpu) or wheel (PyPI, a CUDA build); default: source.", "str",
                                      choices=("source", "wheel"))
    purge_cuda_packages: bool = option(True, "Remove CUDA-only Python packages from the image.", "bool")


class Checks(Section):
    skip: list[str] = option([], "Rule and check ids to skip.", "str_list")
    hit_test_tokens: int = option(1024, "Prompt length of the doctor hit test.", "int", minimum=64)
    startup_timeout_s: int = option(900, "How long `up` waits for /health.", "int", minimum=1)


class Recipe(Section):
    stack: Stack = option(Stack, "The stack.", "section")
    versions: Versions = option(Versions, "Version pins.", "section")
    model: Model = option(Model, "The model.", "section")
    serve: Serve = option(Serve, "Server flags.", "section")
    cache: Cache = option(Cache, "KV-cache tiers (LMCache).", "section")
    host: Host = option(Host, "Host pinning and tuning.", "section")
    build: Build = option(Build, "Image build options.", "section")
    checks: Checks = option(Checks, "Settings of the rules and doctor checks (what to skip, how long to wait).", "section")
    def __init__(self, **values):
        super().__init__(**values)
        # Where the recipe came from; filled by the loader, not part of the TOML.
        self.source = "<recipe>"
        self.positions: dict = {}

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.path.rstrip("/").rsplit("/", 1)[-1]

    def tiers_of(self, kind: str) -> list:
        """The tiers of one kind (a misspelt kind is an error, not an empty list)."""
        name = tier_kind(kind).name
        return [tier for tier in self.cache.tiers if tier.kind == name]


def recipe_fields(cls) -> list:
    """The Field declarations of a section class, in the order they are written."""
    return list(cls._fields.values())


SECTION_TYPES = {spec.name: spec.default for spec in recipe_fields(Recipe)}
