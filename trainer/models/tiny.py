"""Tiny Qwen2-architecture models with a locally trained tokenizer, built deterministically here.

Run: ``python -m trainer make-tiny-model OUT [--preset smoke|demo] [--seed 0]``

The folder it writes loads with ``AutoTokenizer.from_pretrained`` / ``AutoModelForCausalLM
.from_pretrained`` (config.json, model.safetensors, generation_config.json, tokenizer.json,
tokenizer_config.json with the chat template). Same preset and seed -> same bytes.

Tokenizer: byte-level BPE trained with `tokenizers` on the built-in corpus (trainer.models.corpus),
with Qwen2's own normalizer (NFC), pre-tokenizer (its split regex, digits one per token, then byte
level) and decoder. transformers 5 rebuilds that pipeline when it loads a ``Qwen2Tokenizer``; because
ours is identical, the ids survive save/load (tests/trainer/models check it). Special tokens are
single ids 0..6: ``<|endoftext|>`` (pad and eos of the tokenizer), ``<|im_start|>``, ``<|im_end|>``
(end of turn), ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>``.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from trainer.models.chat_template import CHAT_TEMPLATE
from trainer.models.corpus import SPECIAL_TOKENS, corpus_texts

# Qwen2's pre-tokenizer split pattern (the same string transformers' Qwen2Tokenizer uses).
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"


@dataclass(frozen=True)
class Preset:
    """Sizes of one tiny model. Parameters ~ vocab*hidden + layers*(4*h^2*(1+kv/heads)/2 + 3*h*ffn)."""

    # BPE target size (special tokens and the 256 byte symbols included). An upper bound: the
    # built-in corpus runs out of merges (min frequency 2) at about 880 tokens, so both presets
    # currently get the same ~880-token vocabulary; config.vocab_size is always len(tokenizer).
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int = 2048
    # Std of the normal init of every weight matrix. HF's default 0.02 suits widths in the
    # thousands (about 1/sqrt(hidden)); at width 128 it leaves query.key products so small that
    # attention stays uniform and the model cannot learn to copy tokens (operands into the tool
    # call) within minutes: measured, a pure copy task reached 42% digit accuracy in 300 SFT steps at
    # 0.02 and 100% in 200 steps at 0.08. None keeps transformers' default.
    initializer_range: float | None = None


PRESETS: dict[str, Preset] = {
    # Fast tests: ~0.2 M parameters.
    "smoke": Preset(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=256),
    # The learning demo: ~1 M parameters.
    # initializer_range ~ 1/sqrt(hidden_size): see Preset.initializer_range.
    "demo": Preset(vocab_size=2048, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=384, initializer_range=0.08),
}


def train_tokenizer(vocab_size: int, *, seed: int = 0):
    """Train the byte-level BPE on the built-in corpus; returns a `tokenizers.Tokenizer`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,  # ids 0..6 in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_texts(seed), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:  # the rest of the stack relies on these being single, fixed ids
            raise RuntimeError(f"special token {t} got id {tok.token_to_id(t)}, expected {i}")
    return tok


def _hf_tokenizer(tok):
    """Wrap a `tokenizers.Tokenizer` as a transformers tokenizer with the chat template."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_tiny_model(out_dir: str | Path, *, preset: str = "smoke", seed: int = 0) -> Path:
    """Write a tiny random-init Qwen2 causal LM and its tokenizer to ``out_dir``; returns the path.

    Deterministic: the same (preset, seed) writes the same token ids and the same weights.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed: {sorted(PRESETS)}")
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    p = PRESETS[preset]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = train_tokenizer(p.vocab_size, seed=seed)
    hf_tok = _hf_tokenizer(tok)
    hf_tok.save_pretrained(out)
    # Name the class Qwen2Tokenizer (what real Qwen2.5 checkpoints say): its rebuilt pipeline
    # equals ours, and downstream code that checks for Qwen2 behaves as with a real model.
    cfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")

    ids = {t: tok.token_to_id(t) for t in (ENDOFTEXT, IM_START, IM_END)}
    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads,
        max_position_embeddings=p.max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
        torch_dtype="float32",
        **({"initializer_range": p.initializer_range} if p.initializer_range is not None else {}),
    )
    # Seed a private generator state so building a model never disturbs the caller's RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[IM_END], ids[ENDOFTEXT]],
        pad_token_id=ids[ENDOFTEXT],
        bos_token_id=ids[ENDOFTEXT],
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    model.save_pretrained(out, safe_serialization=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer make-tiny-model",
                                 description="Build a tiny Qwen2-architecture model locally.")
    ap.add_argument("out", help="output folder (HF format)")
    ap.add_argument("--preset", default="smoke", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = make_tiny_model(args.out, preset=args.preset, seed=args.seed)
    n = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote {out} (preset={args.preset}, seed={args.seed}, {n / 1e6:.1f} MB)")
    return 0
