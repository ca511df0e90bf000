"""numpy references for LMCache's KV transfer kernels, written from what the layouts mean, not from the kernels.

A layer of vLLM's paged KV cache is, logically, kv[k_or_v, block, offset_in_block, head, dim]; a token's slot is
block * block_size + offset_in_block (-1: no slot, nothing moves). Each EngineKVFormat stores that in one physical
order (LMCache's csrc/engine_kv_format.h names them); MLA keeps one latent row per slot, with no K/V axis and no heads.
LMCache's side holds the gathered tokens: [k_or_v, layer, token, heads*dim] for the multi-layer transfer, and
[token, k_or_v, heads*dim] or [k_or_v, token, heads*dim] for the single-layer one.
"""

import numpy as np

# EngineKVFormat value -> (name, axes of the logical [2, NB, BS, NH, HS] in physical order)
FORMATS = {
    1: ("NHD flash-attention [2, NB, BS, NH, HS]", (0, 1, 2, 3, 4)),
    2: ("NHD flash-infer [NB, 2, BS, NH, HS]", (1, 0, 2, 3, 4)),
    6: ("HND flash-attention [2, NB, NH, BS, HS]", (0, 1, 3, 2, 4)),
    7: ("HND flash-infer [NB, 2, NH, BS, HS]", (1, 0, 3, 2, 4)),
    3: ("MLA [NB, BS, HS]", None),
}
MLA = 3


def to_physical(logical: np.ndarray, fmt: int) -> np.ndarray:
    """One layer as the engine stores it; MLA's logical array is [1, NB, BS, 1, HS]."""
    if fmt == MLA:
        return np.ascontiguousarray(logical[0, :, :, 0, :])
    return np.ascontiguousarray(logical.transpose(FORMATS[fmt][1]))


def from_physical(physical: np.ndarray, fmt: int) -> np.ndarray:
    if fmt == MLA:
        return physical[None, :, :, None, :]
    return physical.transpose(np.argsort(FORMATS[fmt][1]))


def gather(logical: np.ndarray, slots: np.ndarray, before: np.ndarray) -> np.ndarray:
    """[k_or_v, token, heads*dim]: each token's rows read from its slot; a token without one keeps `before`."""
    out = before.copy()
    block_size = logical.shape[2]
    for token, slot in enumerate(slots):
        if slot >= 0:
            out[:, token] = logical[:, slot // block_size, slot % block_size].reshape(logical.shape[0], -1)
    return out


def scatter(logical: np.ndarray, slots: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The layer after writing each token's rows ([k_or_v, token, heads*dim]) into its slot; others unchanged."""
    out = logical.copy()
    block_size = logical.shape[2]
    for token, slot in enumerate(slots):
        if slot >= 0:
            out[:, slot // block_size, slot % block_size] = rows[:, token].reshape(out.shape[0], *out.shape[3:])
    return out


def rerope(key: np.ndarray, old_pos: np.ndarray, new_pos: np.ndarray, cos_sin: np.ndarray, rot_dim: int,
           neox: bool, rounded=lambda a: a) -> np.ndarray:
    """Keys [token, head, head_size] (float32 values) rotated back from old_pos and on to new_pos by RoPE's formula,
    each product and sum rounded to the element type by `rounded` (float32 arithmetic rounds by itself; c10's Half
    and BFloat16 compute in float and round to nearest even). cos_sin[p] = [cos(p*f_i)..., sin(p*f_i)...] for the
    rot_dim/2 frequencies f_i. NeoX pairs dim i with i + rot_dim/2, GPT-J pairs 2i with 2i+1; dims past rot_dim are
    left alone."""
    half = rot_dim // 2
    x_idx = np.arange(half) if neox else 2 * np.arange(half)
    y_idx = x_idx + half if neox else x_idx + 1
    out = key.copy()
    for token in range(key.shape[0]):
        oc, os_ = cos_sin[old_pos[token], :half], cos_sin[old_pos[token], half:]
        nc, ns = cos_sin[new_pos[token], :half], cos_sin[new_pos[token], half:]
        x, y = key[token][:, x_idx], key[token][:, y_idx]
        x_back = rounded(rounded(x * oc) + rounded(y * os_))  # rotate by -old
        y_back = rounded(rounded(y * oc) - rounded(x * os_))
        out[token][:, x_idx] = rounded(rounded(x_back * nc) - rounded(y_back * ns))  # rotate by +new
        out[token][:, y_idx] = rounded(rounded(y_back * nc) + rounded(x_back * ns))
    return out


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounded to nearest even (as c10::BFloat16 converts)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# element type -> (C++ type, to storage, storage to float32 values)
ELEMENTS = {
    "float": ("float", lambda v: v.astype(np.float32), lambda s: s),
    "fp16": ("c10::Half", lambda v: v.astype(np.float16), lambda s: s.astype(np.float32)),
    "bf16": ("c10::BFloat16", bf16_bits, bf16_values),
}


def rounded_to(element: str):
    to_storage, to_values = ELEMENTS[element][1:]
    return lambda a: to_values(to_storage(a))


def rope_cache(max_pos: int, rot_dim: int, base: float = 10000.0) -> np.ndarray:
    """vLLM's cos_sin_cache: [max_pos, rot_dim] float32, cos then sin of p * base^(-2i/rot_dim)."""
    freqs = base ** (-np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)
    angles = np.outer(np.arange(max_pos, dtype=np.float64), freqs)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def compare(got: np.ndarray, want: np.ndarray) -> dict:
    """Bit for bit: the elements whose bytes differ, and the first of them."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    bits = f"u{got.dtype.itemsize}"
    differ = np.flatnonzero(got.view(bits).ravel() != want.view(bits).ravel())
    result = {"elements": int(got.size), "mismatches": int(differ.size)}
    if differ.size:
        first = int(differ[0])
        result["first_mismatch"] = {"index": list(map(int, np.unravel_index(first, got.shape))),
                                    "got": got.ravel()[first].item(), "want": want.ravel()[first].item()}
    return result
