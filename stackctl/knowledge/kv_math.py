"""KV-cache bytes per token, from the config.json fields of a model.

Standard attention (MHA/GQA) caches a key and a value vector per KV head per layer:
    bytes/token = 2 x num_hidden_layers x num_key_value_heads x head_dim x dtype_bytes
MLA (DeepSeek-V2/V3, Kimi K2: config has kv_lora_rank) caches one compressed latent plus the rope key per layer:
    bytes/token = num_hidden_layers x (kv_lora_rank + qk_rope_head_dim) x dtype_bytes        (no factor 2)

Popular calculators get two things wrong, and this module must not: head_dim comes from config.json when it is
there (MiniMax-M2: 128, while hidden_size/num_attention_heads = 64), and GB (10^9) is not GiB (2^30).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stackctl.errors import StackctlError

GB = 10**9
MiB = 2**20
GiB = 2**30

DEFAULT_MODEL_DTYPE = "bfloat16"  # what a config without torch_dtype/dtype is assumed to hold

# Element size of a model dtype as config.json spells it (torch_dtype in transformers 4.x, dtype in 5.x).
MODEL_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
}

# vLLM --kv-cache-dtype values (vllm/config/cache.py CacheDType; "float16"/"half" and "int8" exist in some
# releases only). "auto" follows the model dtype, see kv_dtype_bytes().
KV_CACHE_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
}

# Multimodal configs keep the language model's fields in a nested table.
NESTED_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")

# Alternative spellings of the fields that matter, first match wins (Falcon, GPT-2 style, ChatGLM).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head")
_KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")

HEAD_DIM_FROM_CONFIG = "config.json head_dim"
HEAD_DIM_FROM_HIDDEN = "hidden_size / num_attention_heads"


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of a model: all the KV arithmetic needs."""

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    dtype: str = DEFAULT_MODEL_DTYPE
    head_dim_source: str = HEAD_DIM_FROM_CONFIG
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def mla_latent_dim(self) -> int | None:
        """kv_lora_rank + qk_rope_head_dim: what an MLA model caches per layer and token (None for other models)."""
        if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
            return None
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def attention(self) -> str:
        """'mla', 'mha' (one KV head per query head) or 'gqa'."""
        if self.is_mla:
            return "mla"
        return "mha" if self.num_key_value_heads == self.num_attention_heads else "gqa"


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The mapping that holds the language model's fields (nested for multimodal models)."""
    if _first(config, _LAYER_KEYS) is not None:
        return config
    for key in NESTED_TEXT_CONFIG_KEYS:
        nested = config.get(key)
        if isinstance(nested, Mapping) and _first(nested, _LAYER_KEYS) is not None:
            return nested
    return config


def _positive_int(value: Any, what: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StackctlError(f"{name}: config field {what} must be a positive integer, got {value!r}")
    return value


def model_dtype_from_config(config: Mapping[str, Any]) -> str:
    """The dtype config.json declares (torch_dtype or dtype, outer config first); bfloat16 when absent."""
    inner = _text_config(config)
    for source in (config, inner):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str) and value:
                return value.replace("torch.", "").lower()
    return DEFAULT_MODEL_DTYPE


def shape_from_config(config: Mapping[str, Any], name: str = "model") -> ModelShape:
    """Read a ModelShape from a parsed config.json (or the same fields from the built-in table)."""
    text = _text_config(config)
    layers = _positive_int(_first(text, _LAYER_KEYS), "num_hidden_layers", name)
    heads = _positive_int(_first(text, _HEAD_KEYS), "num_attention_heads", name)
    kv_heads_raw = _first(text, _KV_HEAD_KEYS)
    # No num_key_value_heads means classic multi-head attention: one KV head per query head.
    kv_heads = heads if kv_heads_raw is None else _positive_int(kv_heads_raw, "num_key_value_heads", name)
    notes = []

    head_dim_raw = text.get("head_dim")
    if head_dim_raw is not None:
        head_dim = _positive_int(head_dim_raw, "head_dim", name)
        head_dim_source = HEAD_DIM_FROM_CONFIG
    else:
        hidden = _positive_int(_first(text, _HIDDEN_KEYS), "hidden_size", name)
        # MLA never uses head_dim for the cache size, so an uneven split does not matter there.
        if hidden % heads and text.get("kv_lora_rank") is None:
            raise StackctlError(
                f"{name}: config.json has no head_dim and hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}"
            )
        head_dim = hidden // heads
        head_dim_source = HEAD_DIM_FROM_HIDDEN

    kv_lora_rank = text.get("kv_lora_rank")
    qk_rope_head_dim = None
    if kv_lora_rank is not None:
        kv_lora_rank = _positive_int(kv_lora_rank, "kv_lora_rank", name)
        qk_rope_head_dim = _positive_int(text.get("qk_rope_head_dim"), "qk_rope_head_dim", name)

    sliding_window = text.get("sliding_window")
    if not sliding_window or text.get("use_sliding_window") is False:
        sliding_window = None  # Qwen2/3 write a window but switch it off with use_sliding_window=false
    else:
        layer_types = text.get("layer_types") or []
        sliding_layers = sum(1 for t in layer_types if t == "sliding_attention") if layer_types else layers
        # Not modelled: vLLM gives sliding layers only `window` tokens of cache, so real use is lower.
        notes.append(
            f"{sliding_layers} of {layers} layers use a {sliding_window}-token sliding window; figures count "
            f"every layer at full context, an upper bound"
        )

    return ModelShape(
        name=name,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        dtype=model_dtype_from_config(config),
        head_dim_source=head_dim_source,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        sliding_window=sliding_window,
        notes=tuple(notes),
    )


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str = DEFAULT_MODEL_DTYPE, serve_dtype: str = "auto") -> int:
    """Bytes per cached element for a vLLM --kv-cache-dtype value.

    "auto" follows the dtype the model is served in: serve_dtype (vLLM --dtype) when set, else the model dtype.
    With --dtype auto vLLM serves a float32 checkpoint in the platform's 16-bit dtype
    (vllm/config/model.py _resolve_auto_dtype), so float32 then counts 2 bytes.
    """
    key = (kv_cache_dtype or "auto").strip().lower()
    if key == "auto":
        serve_key = (serve_dtype or "auto").strip().lower()
        explicit = serve_key != "auto"
        dtype_key = serve_key if explicit else (model_dtype or DEFAULT_MODEL_DTYPE).strip().lower()
        dtype_key = dtype_key.replace("torch.", "")
        if dtype_key not in MODEL_DTYPE_BYTES:
            raise StackctlError(f"dtype {dtype_key!r} is not one stackctl knows how to size")
        size = MODEL_DTYPE_BYTES[dtype_key]
        return size if explicit else min(size, 2)
    if key not in KV_CACHE_DTYPE_BYTES:
        known = ", ".join(["auto", *sorted(KV_CACHE_DTYPE_BYTES)])
        raise StackctlError(f"kv_cache_dtype {kv_cache_dtype!r} is not modelled by stackctl (known: {known})")
    return KV_CACHE_DTYPE_BYTES[key]


def kv_heads_per_gpu(shape: ModelShape, tensor_parallel: int) -> int:
    """KV heads each GPU holds under tensor parallelism (vLLM's split; MLA holds the full latent everywhere)."""
    if tensor_parallel < 1:
        raise StackctlError(f"tensor_parallel must be >= 1, got {tensor_parallel}")
    if shape.is_mla:
        return 1  # one latent per layer, replicated on every GPU
    kv = shape.num_key_value_heads
    if tensor_parallel >= kv:
        # vLLM replicates: each GPU holds one head, which needs TP to be a multiple of the head count.
        if tensor_parallel % kv:
            raise StackctlError(
                f"{shape.name}: tensor_parallel {tensor_parallel} is not a multiple of its {kv} KV heads "
                f"(vLLM refuses to start)"
            )
        return 1
    if kv % tensor_parallel:
        raise StackctlError(
            f"{shape.name}: its {kv} KV heads do not split evenly over tensor_parallel {tensor_parallel} "
            f"(vLLM refuses to start)"
        )
    return kv // tensor_parallel


def _per_head_bytes(shape: ModelShape, dtype_bytes: int) -> int:
    """Bytes per token for one KV head (or the MLA latent) across all layers."""
    latent = shape.mla_latent_dim
    if latent is not None:
        return shape.num_hidden_layers * latent * dtype_bytes
    return 2 * shape.num_hidden_layers * shape.head_dim * dtype_bytes


def bytes_per_token(shape: ModelShape, dtype_bytes: int) -> int:
    """Model-wide unique KV bytes per token (what one full copy of the cache costs)."""
    heads = 1 if shape.is_mla else shape.num_key_value_heads
    return heads * _per_head_bytes(shape, dtype_bytes)


def bytes_per_token_per_gpu(shape: ModelShape, dtype_bytes: int, tensor_parallel: int = 1) -> int:
    """KV bytes per token that each GPU of a tensor-parallel group holds."""
    return kv_heads_per_gpu(shape, tensor_parallel) * _per_head_bytes(shape, dtype_bytes)


@dataclass(frozen=True)
class KVFootprint:
    """Bytes per token for one model, KV dtype and tensor-parallel size."""

    model: str
    attention: str
    kv_cache_dtype: str
    dtype_bytes: int
    tensor_parallel: int
    kv_heads_per_gpu: int
    total: int  # model-wide unique bytes/token
    per_gpu: int  # bytes/token on each GPU
    replicated: bool  # True when GPUs hold copies (MLA latent, or TP > KV heads)

    @property
    def across_gpus(self) -> int:
        """Bytes/token summed over the TP group: what a token costs in HBM (>= total when replicated)."""
        return self.per_gpu * self.tensor_parallel


def kv_footprint(
    shape: ModelShape, kv_cache_dtype: str = "auto", tensor_parallel: int = 1, serve_dtype: str = "auto"
) -> KVFootprint:
    """Everything about a token's KV size for this serving setup (serve_dtype is vLLM --dtype)."""
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, shape.dtype, serve_dtype)
    heads_per_gpu = kv_heads_per_gpu(shape, tensor_parallel)
    total = bytes_per_token(shape, dtype_bytes)
    per_gpu = bytes_per_token_per_gpu(shape, dtype_bytes, tensor_parallel)
    return KVFootprint(
        model=shape.name,
        attention=shape.attention,
        kv_cache_dtype=kv_cache_dtype,
        dtype_bytes=dtype_bytes,
        tensor_parallel=tensor_parallel,
        kv_heads_per_gpu=heads_per_gpu,
        total=total,
        per_gpu=per_gpu,
        replicated=per_gpu * tensor_parallel > total,
    )
