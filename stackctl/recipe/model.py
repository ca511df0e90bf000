"""The recipe: a typed description of one inference stack.

Each section is a dataclass; each field carries its documentation and its constraints in ``metadata`` so that the
loader, the JSON Schema (`stackctl schema`) and the recipe reference in the README are all generated from this one
place. Field kinds are spelled out explicitly (``kind=``) rather than read back from annotations, so the loader
stays small and a newcomer can see the accepted TOML type next to the field.
"""

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Dict, List, Optional, Union

REQUIRED = object()  # marks a field the recipe must set

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
TIER_KINDS = ("cpu", "disk", "s3", "fs")


def option(default: Any, doc: str, kind: str, **constraints: Any) -> Any:
    """Declare a recipe field.

    kind: str | int | float | bool | str_list | str_map | table | section | tiers | int_or_auto | cpulist_or_mode |
    numa. constraints: choices, minimum, maximum, exclusive_minimum, pattern, example.
    """
    metadata = {"doc": doc, "kind": kind, **constraints}
    if default is REQUIRED:
        metadata["required"] = True
        return field(default=None, metadata=metadata)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    if isinstance(default, type):  # a section: build its defaults
        return field(default_factory=default, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class Stack:
    name: str = option(REQUIRED, "Stack name: image tag, container name and fleet label.", "str",
                       pattern=NAME_PATTERN, example="minimax-m25-lmcache")
    platform: str = option("rocm", "Where it runs: AMD Instinct GPUs (rocm) or any x86 host (cpu).", "str",
                           choices=("rocm", "cpu"))
    engine: str = option("vllm", "Serving engine: plain vLLM, or vLLM with AMD's ATOM platform plugin.", "str",
                         choices=("vllm", "atom-vllm"))
    base_image: Optional[str] = option(None, "Base image; default depends on platform and engine.", "str")
    description: str = option("", "Free text shown by `stackctl status`.", "str")


@dataclass
class Versions:
    vllm: Optional[str] = option(None, "vLLM version the stack runs (the base image's, for ROCm images).", "str",
                                 example="0.27.1")
    lmcache: Optional[str] = option(None, "LMCache version (PyPI sdist for source builds).", "str", example="0.5.6")
    lmcache_git: Optional[str] = option(None, "Build LMCache from this git URL@ref instead of the sdist.", "str",
                                        example="https://github.com/LMCache/LMCache@v0.5.6")
    torch: Optional[str] = option(None, "torch version installed in CPU images.", "str", example="2.13.0")
    gpu_arch: List[str] = option(["gfx942"], "GPU architectures the HIP build targets (PYTORCH_ROCM_ARCH).",
                                 "str_list", pattern=r"^gfx[0-9a-f]{3,4}$")


@dataclass
class Model:
    path: str = option(REQUIRED, "Model directory (host path, mounted read-only) or Hugging Face id.", "str")
    served_name: Optional[str] = option(None, "Name clients use in requests; default: last path component.", "str")
    tensor_parallel: int = option(1, "Tensor-parallel size (GPUs per server).", "int", minimum=1, maximum=64)
    kv_cache_dtype: str = option("auto", "KV cache dtype (vLLM --kv-cache-dtype).", "str", choices=KV_CACHE_DTYPES)
    dtype: str = option("auto", "Weights/activation dtype (vLLM --dtype).", "str")
    max_model_len: Optional[int] = option(None, "Maximum context length.", "int", minimum=1)
    trust_remote_code: bool = option(False, "Allow model code from the model directory.", "bool")
    tool_call_parser: Optional[str] = option(None, "vLLM --tool-call-parser (enables auto tool choice).", "str")
    reasoning_parser: Optional[str] = option(None, "vLLM --reasoning-parser.", "str")
    generate: Optional[str] = option(None, "Create a small random model at image build time instead of mounting "
                                     "one (smoke tests; no download).", "str", choices=("tiny-random-llama",))


@dataclass
class Serve:
    port: int = option(8000, "HTTP port of the OpenAI-compatible server.", "int", minimum=1, maximum=65535)
    host: str = option("127.0.0.1", "Address the server binds.", "str")
    gpu_memory_utilization: float = option(0.9, "Fraction of each GPU's memory vLLM may use.", "float",
                                           exclusive_minimum=0.0, maximum=1.0)
    max_num_batched_tokens: Optional[int] = option(None, "vLLM --max-num-batched-tokens.", "int", minimum=1)
    max_num_seqs: Optional[int] = option(None, "vLLM --max-num-seqs.", "int", minimum=1)
    block_size: Optional[int] = option(None, "KV block size in tokens.", "int", minimum=1)
    async_scheduling: bool = option(False, "vLLM --async-scheduling.", "bool")
    prefix_caching: bool = option(True, "vLLM automatic prefix caching (the HBM tier).", "bool")
    prefix_caching_hash_algo: Optional[str] = option(None, "vLLM --prefix-caching-hash-algo.", "str",
                                                     choices=HASH_ALGOS)
    cudagraph_mode: Optional[str] = option(None, "compilation_config.cudagraph_mode.", "str",
                                           choices=CUDAGRAPH_MODES)
    enforce_eager: bool = option(False, "vLLM --enforce-eager (disables CUDA/HIP graphs).", "bool")
    compilation_config: Dict[str, Any] = option({}, "Extra compilation_config keys, merged with cudagraph_mode.",
                                                "table")
    dev_endpoints: bool = option(False, "VLLM_SERVER_DEV_MODE=1: /reset_prefix_cache and /server_info, used by "
                                 "`doctor` to prove hits come from LMCache.", "bool")
    env: Dict[str, str] = option({}, "Environment of the server process (no secrets: see secret_env).", "str_map")
    secret_env: Dict[str, str] = option({}, "Container variable -> name of the host variable that holds the "
                                        "secret; read at run time only.", "str_map")
    extra_args: List[str] = option([], "Extra arguments appended to the server command line.", "str_list")


@dataclass
class Tier:
    kind: str = option(REQUIRED, "cpu (DRAM), disk (local NVMe), s3 (S3/Ceph RGW), fs (shared filesystem).",
                       "str", choices=TIER_KINDS)
    size_gb: Optional[float] = option(None, "Capacity in GiB (cpu, disk; optional for fs).", "float",
                                      exclusive_minimum=0.0)
    path: Optional[str] = option(None, "Directory on the host (disk, fs).", "str")
    url: Optional[str] = option(None, "LMCache S3 URL: s3:// + the bucket's virtual-host endpoint, e.g. "
                                "s3://kv.s3.us-east-1.amazonaws.com or a Ceph RGW host:port (s3).", "str",
                                pattern=r"^s3://[^/\s]+$", example="s3://kvcache.rgw.example.com:7480")
    region: Optional[str] = option(None, "S3 region; LMCache requires it, also for Ceph (s3).", "str")
    disable_tls: bool = option(False, "Plain HTTP to the S3 endpoint (lab Ceph clusters) (s3).", "bool")
    access_key_env: Optional[str] = option(None, "Host variable holding the access key id (s3).", "str",
                                           pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    secret_key_env: Optional[str] = option(None, "Host variable holding the secret key (s3).", "str",
                                           pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    credentials_file: Optional[str] = option(None, "AWS-style credentials file on the host, mounted read-only (s3).",
                                             "str")


# Which optional tier fields each kind accepts and requires.
TIER_FIELDS = {
    "cpu": {"allowed": {"size_gb"}, "required": {"size_gb"}},
    "disk": {"allowed": {"size_gb", "path"}, "required": {"size_gb", "path"}},
    "s3": {"allowed": {"url", "region", "disable_tls", "access_key_env", "secret_key_env", "credentials_file"},
           "required": {"url", "region"}},
    "fs": {"allowed": {"path", "size_gb"}, "required": {"path"}},
}


@dataclass
class Cache:
    enabled: bool = option(False, "Use LMCache (KV offload beyond GPU HBM) through LMCacheConnectorV1.", "bool")
    chunk_size: int = option(256, "LMCache chunk size in tokens.", "int", minimum=1)
    hash_seed: Optional[int] = option(None, "PYTHONHASHSEED for every server process; required for cache hits "
                                      "across processes, restarts and hosts.", "int", minimum=0, maximum=4294967295)
    save_decode_cache: bool = option(False, "Offload KV of decode steps too (causes long stalls).", "bool")
    use_layerwise: bool = option(False, "LMCache layer-wise transfer (requires PIECEWISE graphs).", "bool")
    async_loading: bool = option(False, "LMCache enable_async_loading.", "bool")
    extra: Dict[str, Any] = option({}, "Extra LMCache config keys written to lmcache.yaml as given.", "table")
    tiers: List[Tier] = option([], "KV tiers below GPU HBM, fastest first.", "tiers")


@dataclass
class Host:
    numa: Union[str, int, List[int]] = option("auto", "NUMA pinning: auto (the GPUs' nodes), off, a node, or nodes.",
                                              "numa")
    isolcpus: str = option("auto", "Server CPUs: auto (isolated cores of the node if any), off, or a cpulist.",
                           "cpulist_or_mode")
    governor: Optional[str] = option("performance", "Expected CPU frequency governor (null: do not check).", "str")
    numa_balancing: bool = option(False, "Expected kernel.numa_balancing (AMD guidance: off).", "bool")
    gpus: Optional[List[int]] = option(None, "GPU indices the server uses; default the first tensor_parallel.",
                                       "int_list")
    shm_size: str = option("16g", "Shared memory size of the container.", "str", pattern=r"^[0-9]+[bkmg]?$")


@dataclass
class Build:
    wheelhouse: Optional[str] = option(None, "Local folder of wheels pip may install from (air-gapped sites).",
                                       "str")
    ca_bundle: Optional[str] = option(None, "CA bundle for pip inside the build (proxies with TLS inspection).",
                                      "str")
    pip_index: Optional[str] = option(None, "pip index URL used inside the build.", "str")
    lmcache_from: Optional[str] = option(None, "source (build for HIP) or wheel (PyPI); default: source on rocm, "
                                         "wheel on cpu.", "str", choices=("source", "wheel"))
    purge_cuda_packages: bool = option(True, "Remove CUDA-only Python packages from the image.", "bool")


@dataclass
class Checks:
    skip: List[str] = option([], "Rule and check ids to skip.", "str_list")
    hit_test_tokens: int = option(1024, "Prompt length of the doctor hit test.", "int", minimum=64)
    startup_timeout_s: int = option(900, "How long `up` waits for /health.", "int", minimum=1)


@dataclass
class Recipe:
    stack: Stack = option(Stack, "The stack.", "section")
    versions: Versions = option(Versions, "Version pins.", "section")
    model: Model = option(Model, "The model.", "section")
    serve: Serve = option(Serve, "Server flags.", "section")
    cache: Cache = option(Cache, "KV-cache tiers (LMCache).", "section")
    host: Host = option(Host, "Host pinning and tuning.", "section")
    build: Build = option(Build, "Image build options.", "section")
    checks: Checks = option(Checks, "Preflight checks.", "section")
    # Where the recipe came from; filled by the loader, not part of the TOML.
    source: str = field(default="<recipe>", metadata={"internal": True})
    positions: Dict[Any, Any] = field(default_factory=dict, repr=False, compare=False, metadata={"internal": True})

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.path.rstrip("/").rsplit("/", 1)[-1]

    def tiers_of(self, kind: str) -> List[Tier]:
        return [tier for tier in self.cache.tiers if tier.kind == kind]


def recipe_fields(cls) -> list:
    """The user-facing fields of a section dataclass (loader-internal fields excluded)."""
    return [f for f in fields(cls) if not f.metadata.get("internal")]


SECTION_TYPES = {f.name: f.default_factory for f in recipe_fields(Recipe)}
__all__ = ["Recipe", "Stack", "Versions", "Model", "Serve", "Cache", "Tier", "Host", "Build", "Checks",
           "TIER_FIELDS", "SECTION_TYPES", "recipe_fields", "MISSING"]
