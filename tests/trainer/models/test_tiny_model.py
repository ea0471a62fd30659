"""Tiny model + tokenizer: deterministic build, ids that survive save/load, the exact chat template."""
from __future__ import annotations

import json

import pytest
import torch

from trainer.models.tiny import PRESETS, main, make_tiny_model
from trainer.tasks import arith

torch.set_num_threads(1)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "smoke", preset="smoke", seed=0)


@pytest.fixture(scope="module")
def tok(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


TEXTS = [
    "What is 37 * 48?  Then 1234567890 and -69.",
    '<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": '
    '{"expression": "37*48"}}\n</tool_call><|im_end|>\n',
    "<|im_start|>user\n<tool_response>\n1776\n</tool_response><|im_end|>\n<|endoftext|>",
    "naïve café — ünïcode ✓ 😀 $12.50",
    "  spaces\t\ttabs\r\nline\n\n\nend ",
]


def test_special_tokens_are_single_fixed_ids(tok):
    assert tok.convert_tokens_to_ids(SPECIALS) == list(range(7))
    for i, t in enumerate(SPECIALS):
        assert tok.encode(t, add_special_tokens=False) == [i]
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    assert tok.pad_token_id == 0
    assert 800 <= len(tok) <= 4096


@pytest.mark.parametrize("text", TEXTS)
def test_ids_identical_to_trained_tokenizer_and_decode_round_trips(model_dir, tok, text):
    import tokenizers

    raw = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == raw.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids) == text


def test_ids_survive_a_second_save_load(tmp_path, tok):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        assert again.encode(text, add_special_tokens=False) == tok.encode(text,
                                                                         add_special_tokens=False)
    assert again.chat_template == tok.chat_template


def test_digits_are_one_token_each(tok):
    ids = tok.encode("1234567890", add_special_tokens=False)
    assert len(ids) == 10
    assert [tok.decode([i]) for i in ids] == list("1234567890")
    assert tok.convert_ids_to_tokens(tok.encode(" 42", add_special_tokens=False))[-2:] == ["4", "2"]


def _conversation():
    return arith.prompt_messages(37, 48, "*") + [
        arith.tool_call_message(37, 48, "*"),
        {"role": "tool", "content": "1776"},
        {"role": "assistant", "content": "#### 1776"},
    ]


def test_chat_template_with_tools_exact_text(tok):
    schema = json.dumps(arith.CALCULATOR_SCHEMA, ensure_ascii=False)
    text = tok.apply_chat_template(_conversation(), tools=[arith.CALCULATOR_SCHEMA], tokenize=False)
    assert text == (
        "<|im_start|>system\n" + arith.SYSTEM_PROMPT + "\n\n# Tools\n\nYou may call these functions:\n"
        "<tools>\n" + schema + "\n</tools>\n\nTo call one, write:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWhat is 37 * 48?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": "
        "{\"expression\": \"37*48\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n1776\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n#### 1776<|im_end|>\n"
    )


def test_generation_prompt_and_no_default_system(tok):
    msgs = [{"role": "user", "content": "Hi"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    two_tools = [arith.CALCULATOR_SCHEMA, {"type": "function", "function": {"name": "noop"}}]
    text = tok.apply_chat_template(msgs, tools=two_tools, tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert ("<tools>\n" + json.dumps(arith.CALCULATOR_SCHEMA, ensure_ascii=False)
            + '\n{"type": "function", "function": {"name": "noop"}}\n</tools>') in text


def test_tool_calls_content_string_arguments_and_consecutive_tool_messages(tok):
    msgs = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
            {"type": "function", "function": {"name": "b", "arguments": {"y": "z"}}},
        ]},
        {"role": "tool", "content": "one"},
        {"role": "tool", "content": "two"},
        {"role": "assistant", "content": "done"},
    ]
    assert tok.apply_chat_template(msgs, tokenize=False) == (
        "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
        "{\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": \"z\"}}"
        "\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\ndone<|im_end|>\n"
    )


def test_generation_prompt_render_is_a_prefix_of_the_full_render(tok):
    msgs = _conversation()
    full = tok.apply_chat_template(msgs, tools=[arith.CALCULATOR_SCHEMA], tokenize=False)
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            head = tok.apply_chat_template(msgs[:i], tools=[arith.CALCULATOR_SCHEMA],
                                           tokenize=False, add_generation_prompt=True)
            assert full.startswith(head)


def test_model_config_generation_config_and_forward(model_dir, tok):
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    p = PRESETS["smoke"]
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size) == ("qwen2", 2, p.hidden_size)
    assert cfg.tie_word_embeddings and cfg.vocab_size == len(tok)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert next(model.parameters()).dtype == torch.float32
    assert (model_dir / "model.safetensors").exists()
    gen = GenerationConfig.from_pretrained(model_dir)
    assert gen.eos_token_id == [2, 0] and gen.pad_token_id == 0
    ids = torch.tensor([tok.encode("What is 1 + 2?", add_special_tokens=False)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()


def test_build_is_deterministic_and_seed_dependent(tmp_path, model_dir):
    again = make_tiny_model(tmp_path / "again", preset="smoke", seed=0)
    for name in ["model.safetensors", "tokenizer.json", "config.json", "generation_config.json"]:
        assert (again / name).read_bytes() == (model_dir / name).read_bytes(), name
    other = make_tiny_model(tmp_path / "other", preset="smoke", seed=1)
    assert (other / "model.safetensors").read_bytes() != (model_dir / "model.safetensors").read_bytes()


def test_cli_demo_preset_size(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    assert main([str(tmp_path / "demo"), "--preset", "demo", "--seed", "3"]) == 0
    assert "preset=demo" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "demo")
    n = sum(p.numel() for p in model.parameters())
    assert 0.8e6 <= n <= 3e6
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 128
    # Regression: HF's default init (std 0.02, tuned for widths in the thousands) kept the demo
    # model's attention near uniform and it could not learn to copy operands (see Preset docs).
    assert model.config.initializer_range == pytest.approx(0.08)
    w = model.model.layers[0].self_attn.q_proj.weight
    assert 0.07 < float(w.detach().std()) < 0.09


def test_unknown_preset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown preset"):
        make_tiny_model(tmp_path, preset="huge")
