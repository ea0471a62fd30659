"""Tiny sequence-classification reward models (Qwen2 architecture, one label) built here, with a
tokenizer and chat template of their own that differ from the tiny policy's.

Run: ``python -m trainer make-tiny-reward-model OUT [--preset smoke|demo] [--seed 0]``

The folder loads with ``AutoTokenizer.from_pretrained`` / ``AutoModelForSequenceClassification
.from_pretrained`` (config.json with ``Qwen2ForSequenceClassification`` and ``num_labels=1``,
model.safetensors, the tokenizer files with the chat template), which is what a run's
``reward_model.model.path`` and the catalog's reward-model check need. The weights are random: the
demo's reward model is trained from this one (trainer.models.demo_rm).

Tokenizer: the tiny byte-level BPE (trainer.models.tiny) trained to a smaller target vocabulary, so
the same text gets other ids than under the policy's tokenizer. Chat template (``RM_CHAT_TEMPLATE``):
plain-text turns, ``### {role}\\n{content}\\n``, an assistant's tool calls as
``[call {name} {arguments as JSON}]`` lines and tool replies as ``### tool\\n{content}\\n``, then a
closing ``### end\\n`` so the last token (where the score is read) is the same for every conversation.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer.models.tiny import ENDOFTEXT, PRESETS, _hf_tokenizer, train_tokenizer

RM_VOCAB_SIZE = 600  # below the policy's ~880 merges: other merges, so other ids for the same text

RM_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{{- '### ' + message['role'] + '\\n' + content + '\\n' -}}"
    "{%- for call in (message['tool_calls'] or []) -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{- '[call ' + fn['name'] + ' ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- ']\\n' -}}"
    "{%- endfor -%}"
    "{%- endfor -%}"
    "{{- '### end\\n' -}}"
)


def make_tiny_reward_model(out_dir: str | Path, *, preset: str = "smoke", seed: int = 0) -> Path:
    """Write a tiny random-init Qwen2ForSequenceClassification (num_labels=1) and its own tokenizer
    to ``out_dir``; returns the path. Deterministic for a (preset, seed)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed: {sorted(PRESETS)}")
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    p = PRESETS[preset]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(RM_VOCAB_SIZE, seed=seed)
    hf_tok = _hf_tokenizer(tok)
    hf_tok.chat_template = RM_CHAT_TEMPLATE
    hf_tok.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    pad = tok.token_to_id(ENDOFTEXT)
    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers, num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads, max_position_embeddings=p.max_position_embeddings,
        rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=pad, eos_token_id=pad, pad_token_id=pad,
        num_labels=1, torch_dtype="float32",
        **({"initializer_range": p.initializer_range} if p.initializer_range is not None else {}),
    )
    config.architectures = ["Qwen2ForSequenceClassification"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForSequenceClassification(config)
    model.to(torch.float32).save_pretrained(out, safe_serialization=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer make-tiny-reward-model",
                                 description="Build a tiny sequence-classification reward model locally.")
    ap.add_argument("out", help="output folder (HF format)")
    ap.add_argument("--preset", default="smoke", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = make_tiny_reward_model(args.out, preset=args.preset, seed=args.seed)
    print(f"wrote {out} (preset={args.preset}, seed={args.seed})")
    return 0
