"""KV bytes per token, the built-in model table and weights sizes.

The pinned figures are worked by hand in the comments; each also appears in KNOWLEDGE.md section 5.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stackctl.errors import StackctlError
from stackctl.knowledge import kv_math
from stackctl.knowledge.gpu_table import lookup_gpu
from stackctl.knowledge.kv_math import (
    GB,
    HEAD_DIM_FROM_CONFIG,
    HEAD_DIM_FROM_HIDDEN,
    MiB,
    bytes_per_token,
    kv_dtype_bytes,
    kv_footprint,
    shape_from_config,
)
from stackctl.knowledge.model_table import entries, lookup, resolve_shape
from stackctl.knowledge.weights import (
    SOURCE_HEADERS,
    SOURCE_INDEX,
    safetensors_data_bytes,
    weights_size,
)

MINIMAX_CONFIG = {
    "num_hidden_layers": 62,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 3072,
    "torch_dtype": "bfloat16",
}


# --- pinned figures -------------------------------------------------------------------------------------------


def test_minimax_m25_bf16_and_fp8():
    shape = lookup("MiniMaxAI/MiniMax-M2.5").shape()
    # 2 (K,V) x 62 layers x 8 KV heads x 128 head_dim x 2 bytes = 253,952 B/token
    assert bytes_per_token(shape, 2) == 2 * 62 * 8 * 128 * 2 == 253_952
    # 100k tokens: 25,395,200,000 B = 25.4 GB (decimal) in bf16, half that in fp8
    assert round(100_000 * kv_footprint(shape, "bfloat16").total / GB, 1) == 25.4
    assert round(100_000 * kv_footprint(shape, "fp8").total / GB, 1) == 12.7
    # "auto" follows the config's torch_dtype (bfloat16)
    assert kv_footprint(shape, "auto").total == 253_952


def test_minimax_hidden_over_heads_would_be_wrong():
    # The widely quoted "12 GB per 100k bf16" used hidden/heads = 3072/48 = 64: exactly half the real figure.
    config = dict(MINIMAX_CONFIG)
    del config["head_dim"]
    wrong = shape_from_config(config, "no-head-dim")
    assert wrong.head_dim == 64 and wrong.head_dim_source == HEAD_DIM_FROM_HIDDEN
    assert bytes_per_token(wrong, 2) * 2 == bytes_per_token(shape_from_config(MINIMAX_CONFIG), 2)


def test_qwen3_32b_is_256_kib_per_token_and_64_mib_per_chunk():
    shape = lookup("Qwen/Qwen3-32B").shape()
    # 2 x 64 layers x 8 KV heads x 128 x 2 bytes = 262,144 B = 256 KiB
    assert bytes_per_token(shape, 2) == 262_144 == 256 * 1024
    # one LMCache chunk of 256 tokens = 67,108,864 B = 64 MiB (the quoted "62.5 MiB" mixed GB and GiB)
    assert 256 * bytes_per_token(shape, 2) == 64 * MiB


def test_deepseek_v3_mla():
    shape = lookup("deepseek-ai/DeepSeek-V3").shape()
    assert shape.is_mla and shape.attention == "mla"
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, no factor 2 = 70,272 B/token
    assert kv_footprint(shape, "auto").total == 61 * 576 * 2 == 70_272
    assert kv_footprint(shape, "fp8").total == 35_136


def test_missing_head_dim_falls_back_to_hidden_over_heads():
    shape = lookup("meta-llama/Llama-3.1-8B-Instruct").shape()
    # config.json has no head_dim: 4096 / 32 = 128; 2 x 32 x 8 x 128 x 2 = 131,072 B/token
    assert shape.head_dim == 128 and shape.head_dim_source == HEAD_DIM_FROM_HIDDEN
    assert bytes_per_token(shape, 2) == 131_072


def test_null_head_dim_counts_as_absent():
    config = dict(MINIMAX_CONFIG, head_dim=None)
    assert shape_from_config(config).head_dim == 3072 // 48


def test_head_dim_present_wins():
    shape = shape_from_config(MINIMAX_CONFIG)
    assert shape.head_dim == 128 and shape.head_dim_source == HEAD_DIM_FROM_CONFIG


# --- config parsing -------------------------------------------------------------------------------------------


def test_absent_kv_heads_means_mha():
    shape = shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256})
    assert shape.num_key_value_heads == 4 and shape.attention == "mha"
    # 2 x 2 layers x 4 heads x 64 x 2 bytes
    assert bytes_per_token(shape, 2) == 2048


def test_nested_text_config_of_a_multimodal_model():
    config = {
        "torch_dtype": "bfloat16",
        "vision_config": {"num_attention_heads": 16, "hidden_size": 1152},
        "text_config": {
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "hidden_size": 5376,
        },
    }
    shape = shape_from_config(config, "mm")
    assert (shape.num_hidden_layers, shape.num_key_value_heads, shape.head_dim) == (48, 16, 128)
    assert shape.dtype == "bfloat16"


def test_dtype_field_of_transformers_5_and_default():
    assert shape_from_config(dict(MINIMAX_CONFIG, torch_dtype=None, dtype="float16")).dtype == "float16"
    config = dict(MINIMAX_CONFIG)
    del config["torch_dtype"]
    assert shape_from_config(config).dtype == "bfloat16"


def test_missing_layers_is_a_user_error():
    with pytest.raises(StackctlError, match="num_hidden_layers"):
        shape_from_config({"num_attention_heads": 8, "hidden_size": 64}, "broken")


def test_gpt_oss_sliding_window_is_noted_not_modelled():
    shape = lookup("openai/gpt-oss-120b").shape()
    assert shape.head_dim == 64  # 2880 / 64 would give 45
    assert shape.sliding_window == 128
    assert any("18 of 36 layers" in note for note in shape.notes)
    # full-context upper bound: 2 x 36 x 8 x 64 x 2 = 73,728 B/token
    assert bytes_per_token(shape, 2) == 73_728


def test_qwen_disabled_sliding_window_is_ignored():
    config = dict(MINIMAX_CONFIG, sliding_window=32768, use_sliding_window=False)
    shape = shape_from_config(config)
    assert shape.sliding_window is None and shape.notes == ()


# --- dtype mapping --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kv_cache_dtype, model_dtype, expected",
    [
        ("auto", "bfloat16", 2),
        ("auto", "float16", 2),
        ("auto", "float32", 2),  # vLLM downcasts float32 checkpoints unless --dtype float32
        ("bfloat16", "float32", 2),
        ("float16", "bfloat16", 2),
        ("half", "bfloat16", 2),
        ("fp8", "bfloat16", 1),
        ("FP8_E4M3", "bfloat16", 1),
        ("fp8_e5m2", "bfloat16", 1),
        ("fp8_inc", "bfloat16", 1),
    ],
)
def test_kv_cache_dtype_bytes(kv_cache_dtype, model_dtype, expected):
    assert kv_dtype_bytes(kv_cache_dtype, model_dtype) == expected


def test_explicit_serve_dtype_is_what_auto_follows():
    # vLLM --dtype float32 keeps a float32 cache; --dtype auto would have served it in 16 bits
    assert kv_dtype_bytes("auto", "float32", serve_dtype="float32") == 4
    assert kv_dtype_bytes("auto", "bfloat16", serve_dtype="float16") == 2
    assert kv_dtype_bytes("fp8", "bfloat16", serve_dtype="float32") == 1
    shape = lookup("Qwen/Qwen3-32B").shape()
    assert kv_footprint(shape, "auto", serve_dtype="float32").total == 2 * 262_144


def test_unknown_kv_cache_dtype_is_a_user_error():
    with pytest.raises(StackctlError, match="fp4"):
        kv_dtype_bytes("fp4")


# --- tensor parallel ------------------------------------------------------------------------------------------


def test_tp_splits_kv_heads():
    fp = kv_footprint(lookup("MiniMax-M2.5").shape(), "bfloat16", tensor_parallel=2)
    assert fp.kv_heads_per_gpu == 4
    assert fp.per_gpu == 253_952 // 2 and fp.across_gpus == fp.total and not fp.replicated


def test_tp_larger_than_kv_heads_replicates():
    shape = lookup("Qwen/Qwen3-235B-A22B").shape()  # 4 KV heads
    fp = kv_footprint(shape, "bfloat16", tensor_parallel=8)
    # each GPU holds one head: 2 x 94 x 128 x 2 = 48,128 B/token; the 8 GPUs together hold 2x the unique 192,512
    assert fp.kv_heads_per_gpu == 1 and fp.per_gpu == 48_128
    assert fp.total == 192_512 and fp.across_gpus == 2 * fp.total and fp.replicated


def test_mla_latent_is_replicated_on_every_gpu():
    fp = kv_footprint(lookup("deepseek-ai/DeepSeek-R1").shape(), "auto", tensor_parallel=8)
    assert fp.per_gpu == fp.total == 70_272 and fp.across_gpus == 8 * 70_272 and fp.replicated


def test_uneven_head_split_is_refused_like_vllm():
    with pytest.raises(StackctlError, match="tensor_parallel 3"):
        kv_footprint(lookup("MiniMax-M2.5").shape(), "auto", tensor_parallel=3)


# --- built-in table -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        "MiniMaxAI/MiniMax-M2.5",
        "minimaxai/minimax-m2.5",
        "/models/MiniMax-M2.5",
        "/models/MiniMax-M2.5/",
        "/root/.cache/huggingface/hub/models--MiniMaxAI--MiniMax-M2.5/snapshots/0123abcd",
    ],
)
def test_lookup_by_id_path_and_cache_dir(ref):
    assert lookup(ref).name == "MiniMaxAI/MiniMax-M2.5"


def test_lookup_of_aliases_and_unknown():
    assert lookup("deepseek-ai/DeepSeek-R1").name == "deepseek-ai/DeepSeek-V3"
    assert lookup("MiniMaxAI/MiniMax-M2").name == "MiniMaxAI/MiniMax-M2.5"
    assert lookup("/models/some-private-model") is None
    assert lookup("") is None


def test_every_table_entry_parses_and_names_its_weights_source():
    required = {
        "MiniMaxAI/MiniMax-M2.5",
        "MiniMaxAI/MiniMax-M2",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-235B-A22B",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-R1",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        "openai/gpt-oss-120b",
    }
    ids = {model_id for entry in entries() for model_id in entry.ids}
    assert required <= ids
    for entry in entries():
        shape = entry.shape()
        assert bytes_per_token(shape, 2) > 0
        if entry.weights_bytes is not None:
            assert entry.weights_source != "unknown"


def test_local_config_json_wins_over_the_table(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(MINIMAX_CONFIG, num_hidden_layers=2)))
    shape, source = resolve_shape("MiniMaxAI/MiniMax-M2.5", tmp_path)
    assert shape.num_hidden_layers == 2 and source.endswith("config.json")
    shape, source = resolve_shape("/models/MiniMax-M2.5", tmp_path / "absent")
    assert shape.num_hidden_layers == 62 and source.startswith("built-in table")
    assert resolve_shape("/models/unknown") is None


# --- GPU table ------------------------------------------------------------------------------------------------


def test_gpu_by_name_and_by_arch():
    mi300x = lookup_gpu("AMD Instinct MI300X")
    assert mi300x.exact and mi300x.spec.vram_bytes == 206_141_652_992  # 191.98 GiB as rocm-smi/KFD report it
    assert lookup_gpu("mi325x").spec.vram_bytes == 256 * 2**30
    assert lookup_gpu("MI355X").spec.vram_bytes == 288 * 2**30
    assert lookup_gpu("MI250X").spec.name == "MI250X"  # not MI250
    by_arch = lookup_gpu("gfx942")
    assert not by_arch.exact and by_arch.spec.name == "MI300X" and "MI325X" in by_arch.note
    assert lookup_gpu("gfx1100") is None and lookup_gpu("") is None
    # the name stackctl.host gives a GPU without a product name still carries its arch
    assert lookup_gpu("AMD GPU gfx950 (device 0x75a3)").spec.gfx == "gfx950"


# --- weights size ---------------------------------------------------------------------------------------------


def _save(path, tensors):
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file(
        {k: np.zeros(shape, dtype=dtype) for k, (shape, dtype) in tensors.items()}, str(path), metadata={"format": "pt"}
    )


def test_weights_from_safetensors_headers(tmp_path):
    _save(tmp_path / "model-00001-of-00002.safetensors", {"a": ((64, 32), "float16"), "b": ((10,), "float32")})
    _save(tmp_path / "model-00002-of-00002.safetensors", {"c": ((3, 5), "int8")})
    # 64*32*2 + 10*4 = 4,136 and 15*1 = 15
    assert safetensors_data_bytes(tmp_path / "model-00001-of-00002.safetensors") == 4_136
    size = weights_size(tmp_path)
    assert size.bytes == 4_151 and size.source == SOURCE_HEADERS


def test_weights_from_index_total_size(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16060522496}, "weight_map": {}})
    )
    size = weights_size(tmp_path)
    assert size.bytes == 16_060_522_496 and size.source == SOURCE_INDEX


def test_weights_absent_and_corrupt(tmp_path):
    assert weights_size(tmp_path) is None
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(StackctlError, match="implausible"):
        weights_size(tmp_path)


def test_module_constants_are_decimal_and_binary():
    assert kv_math.GB == 10**9 and kv_math.GiB == 2**30


@given(
    layers=st.integers(1, 128),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    head_dim=st.sampled_from([64, 80, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8, 16, 32]),
    dtype=st.sampled_from(["auto", "fp8", "bfloat16"]),
)
def test_tp_never_loses_bytes_and_only_duplicates_when_replicating(layers, kv_heads, head_dim, tp, dtype):
    config = {
        "num_hidden_layers": layers,
        "num_attention_heads": kv_heads * 4,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
    }
    fp = kv_footprint(shape_from_config(config, "prop"), dtype, tp)
    assert fp.total == 2 * layers * kv_heads * head_dim * fp.dtype_bytes
    assert fp.across_gpus >= fp.total
    assert fp.replicated == (tp > kv_heads)
    if tp <= kv_heads:
        assert fp.per_gpu * tp == fp.total


@pytest.mark.parametrize("content, problem", [
    (b"\x01\x02", "too short to be a safetensors file"),
    (struct.pack("<Q", 1 << 40), "is implausible; not a safetensors file"),
    (struct.pack("<Q", 100) + b"{}", "header truncated (2 of 100 bytes)"),
    (struct.pack("<Q", 3) + b"{x}", "header is not valid JSON"),
    (struct.pack("<Q", 2) + b"[]", "header is not a JSON object"),
])
def test_a_file_that_is_not_safetensors_is_refused_naming_why(tmp_path, content, problem):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(StackctlError) as error:
        safetensors_data_bytes(path)
    assert str(error.value).startswith(f"{path}: ") and problem in str(error.value)


def test_a_tensor_without_data_offsets_and_an_unreadable_file_are_refused(tmp_path):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2]}}).encode()
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(StackctlError, match="tensor 'w' has no valid data_offsets"):
        safetensors_data_bytes(bad)
    with pytest.raises(StackctlError, match="cannot read"):
        safetensors_data_bytes(tmp_path / "missing.safetensors")


def test_an_index_without_a_usable_total_falls_back_to_the_shards(tmp_path):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    index = tmp_path / "model.safetensors.index.json"
    for text in ('{"metadata": {"total_size": "many"}}', '{"weight_map": {}}', "[]"):
        index.write_text(text)
        size = weights_size(tmp_path)
        assert size is not None and size.bytes == 8 and size.source == SOURCE_HEADERS, text
    index.write_text("{not json")
    with pytest.raises(StackctlError, match="cannot read"):
        weights_size(tmp_path)
    assert weights_size(tmp_path / "empty-dir-that-is-missing") is None
