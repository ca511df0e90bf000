#!/usr/bin/env python3
"""Write a tiny random Llama model that vLLM can serve, without any hub access.

stackctl's CPU smoke stack serves this model: it is made at image build time so
`stackctl up recipes/cpu-smoke.toml` needs nothing but Docker.

Usage:
    make_tiny_model.py OUT_DIR [--preset NAME]
                                        write the model directory
    make_tiny_model.py --words N [--offset K]
                                        print a prompt of N words that the
                                        tokenizer turns into exactly N tokens

Presets (vLLM's CPU attention needs head_dim >= 64; vocab 4096, context 4096, bf16 weights):
- tiny-random-llama: 2 layers, hidden 256, 4 query heads, 2 KV heads, head_dim 64
  (KV cache: 2 x 2 layers x 2 KV heads x 64 x 2 bytes = 1024 bytes per token). Starts in
  seconds; its logits are almost flat (default init), so its greedy text is one
  repeated word.
- bench-random-llama: ~150M parameters, 12 layers, hidden 1024, 16 query heads, 8 KV
  heads, head_dim 64 (KV: 24 KiB per token). Big enough that prefill dominates a
  2,000-token request, so what a KV cache saves shows in TTFT. Initialised with
  std 0.1 instead of 0.02: the top token then leads by ~0.6 nats and depends on the
  context, so a greedy continuation changes when the KV it reads is wrong, and does
  not flip on bf16 rounding.

bf16 because vLLM 0.32 on x86 CPUs resolves dtype "auto" to bfloat16 anyway
(a float32 checkpoint is downcast at load), so bf16 files load without a cast,
are half the size, and match what production models ship.

The output is byte-for-byte reproducible for a given torch/transformers/
tokenizers version: fixed seed, fixed vocabulary, no timestamps.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Never reach for the hub: the smoke stack must build offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEED = 0
VOCAB_SIZE = 4096
MAX_LEN = 4096
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
# Words the chat template emits; each is one token.
CHAT_WORDS = ["system", "user", "assistant", ":"]
WORD_PREFIX = "w"
NUM_WORDS = VOCAB_SIZE - len(SPECIAL_TOKENS) - len(CHAT_WORDS)

# Roles and contents separated by spaces so every piece is one vocabulary word.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }} : {{ message['content'] }} "
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def prompt_words(count: int, offset: int = 0) -> str:
    """Return `count` space-separated vocabulary words; one token per word, no BOS added.

    `offset` picks where in the vocabulary the prompt starts, so tests can make
    prompts that share no prefix.
    """
    return " ".join(f"{WORD_PREFIX}{(offset + i) % NUM_WORDS}" for i in range(count))


def build_tokenizer():
    """A WordLevel tokenizer over synthetic words, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = SPECIAL_TOKENS + CHAT_WORDS + [f"{WORD_PREFIX}{i}" for i in range(NUM_WORDS)]
    vocab = {word: index for index, word in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder puts a space between tokens, also when streaming.
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=MAX_LEN,
        chat_template=CHAT_TEMPLATE,
    )


PRESETS = {
    "tiny-random-llama": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2},
    "bench-random-llama": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12,
                           "num_attention_heads": 16, "num_key_value_heads": 8, "initializer_range": 0.1},
}


def build_model(preset: str = "tiny-random-llama"):
    """A Llama of the preset's shape with seeded random weights, cast to bf16."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        head_dim=64,
        max_position_embeddings=MAX_LEN,
        **PRESETS[preset],
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=3)
    return model


def write_model(out_dir: Path, preset: str = "tiny-random-llama") -> None:
    """Write config, bf16 safetensors, tokenizer and generation config to out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    build_model(preset).save_pretrained(str(out_dir), safe_serialization=True)
    build_tokenizer().save_pretrained(str(out_dir))
    # safetensors writes 0600; the server may run as another user.
    for path in out_dir.iterdir():
        path.chmod(0o644)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, help="model directory to write")
    parser.add_argument("--words", type=int, metavar="N", help="print a prompt of exactly N tokens and exit")
    parser.add_argument("--offset", type=int, default=0, help="first vocabulary word of the --words prompt")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny-random-llama", help="model shape")
    args = parser.parse_args(argv)
    if args.words is not None:
        print(prompt_words(args.words, args.offset))
        return 0
    if args.out_dir is None:
        parser.error("OUT_DIR is required unless --words is given")
    write_model(args.out_dir, args.preset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
