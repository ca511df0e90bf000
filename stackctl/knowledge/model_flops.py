"""The compute a prefill costs, from a model's config.json: what "recompute at N% of this host's matmul peak" is
measured against.

Per token, a dense decoder layer multiplies by its weights once (2 FLOPs per weight: q, k, v, o projections and the
gated MLP's three matrices) and attends to every earlier token (QK^T and the weighted sum of V: 4 x heads x head_dim
FLOPs per earlier token). A prefill computes logits for its last token only, so the LM head counts once. Norms,
RoPE and activations are left out: under 1% of a layer's FLOPs at these sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrefillCost:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def weight_flops_per_token(self) -> int:
        """2 x the weights a token is multiplied by in all layers."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * q_out + 2 * self.hidden * kv_out + q_out * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return 2 * self.layers * (attention + mlp)

    def flops(self, start: int, end: int) -> float:
        """FLOPs to compute tokens start..end-1 of a sequence whose first `start` tokens are cached."""
        count = max(0, end - start)
        if count == 0:
            return 0.0
        attended = (start + end + 1) * count / 2  # each token attends to itself and every earlier token
        attention = 4.0 * self.layers * self.heads * self.head_dim * attended
        return count * self.weight_flops_per_token + attention + 2.0 * self.hidden * self.vocab


def prefill_cost(config: Mapping[str, Any]) -> PrefillCost:
    """From a Llama-shaped config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, head_dim, vocab_size); ValueError naming a missing field."""
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config

    def field(name: str, default: int | None = None) -> int:
        value = text.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"config.json: {name} missing or not a positive integer ({value!r})")
        return value

    hidden, heads = field("hidden_size"), field("num_attention_heads")
    return PrefillCost(layers=field("num_hidden_layers"), hidden=hidden, heads=heads,
                       kv_heads=field("num_key_value_heads", heads), head_dim=field("head_dim", hidden // heads),
                       intermediate=field("intermediate_size"), vocab=field("vocab_size"))


def prefill_rate(cost: PrefillCost, prompt_tokens: int, cached_tokens: int, ttft_s: float,
                 peak_gflops: float | None) -> dict:
    """What a cold TTFT implies: tokens recomputed per second, the GFLOP/s they took, and that as a share of the
    host's matmul peak (None when the peak is unknown). TTFT also holds the scheduling, so the share is a lower bound
    of the kernels' own. A rate above the peak is physically impossible: the peak was measured low (its probe shared
    the CPUs) or the time is wrong. It is reported as a failed measurement (`error`), never as a share."""
    recomputed = max(0, prompt_tokens - cached_tokens)
    gflops = cost.flops(cached_tokens, prompt_tokens) / ttft_s / 1e9 if ttft_s > 0 else None
    share = gflops / peak_gflops if gflops is not None and peak_gflops else None
    error = None
    if share is not None and share > 1.0:
        error = (f"{gflops:,.1f} GFLOP/s is above this host's matmul peak of {peak_gflops:,.1f} GFLOP/s, which no "
                 "prefill can be: the peak was measured while other work shared the CPUs, or the time is wrong")
        share = None
    return {"tokens_recomputed": recomputed,
            "tokens_per_s": recomputed / ttft_s if ttft_s > 0 else None,
            "gflops": gflops, "share_of_peak": share, "error": error}


def rate_text(rate: dict, dtype: str | None) -> str:
    """e.g. "1,990 tokens recomputed at 3,010 tok/s, 850 GFLOP/s = 61% of this host's bfloat16 matmul peak"."""
    if rate["tokens_per_s"] is None:
        return "no prefill rate (TTFT 0)"
    text = f"{rate['tokens_recomputed']:,} tokens recomputed at {rate['tokens_per_s']:,.0f} tok/s"
    if rate.get("error"):
        return f"{text}; measurement failed: {rate['error']}"
    if rate["gflops"] is not None:
        text += f", {rate['gflops']:,.1f} GFLOP/s"
    if rate["share_of_peak"] is not None:
        text += f" = {rate['share_of_peak']:.0%} of this host's {dtype or ''} matmul peak".replace("  ", " ")
    return text
