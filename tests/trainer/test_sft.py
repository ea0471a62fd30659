"""SFT warm start: the assistant-only mask (exact), batching, schedule, and that the loss goes down."""
from __future__ import annotations

import json
import random

import pytest
import torch

from trainer import sft
from trainer.models.tiny import make_tiny_model
from trainer.tasks import arith

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("sft") / "smoke", preset="smoke", seed=0)


@pytest.fixture(scope="module")
def tok(smoke_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smoke_dir)


def _tool_conversation():
    return arith.prompt_messages(37, 48, "*") + [
        arith.tool_call_message(37, 48, "*"),
        {"role": "tool", "content": "1776"},
        {"role": "assistant", "content": "#### 1776"},
    ]


def _runs(ids, mask, value):
    """Contiguous runs of ids where mask == value."""
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m == value:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def test_mask_is_exactly_the_assistant_tokens(tok):
    ex = sft.build_example(tok, _tool_conversation(), [arith.CALCULATOR_SCHEMA])
    assert len(ex.input_ids) == len(ex.loss_mask)
    text = tok.apply_chat_template(_tool_conversation(), tools=[arith.CALCULATOR_SCHEMA],
                                   tokenize=False)
    assert ex.input_ids == tok.encode(text, add_special_tokens=False)
    on = _runs(ex.input_ids, ex.loss_mask, 1)
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "37*48"}}\n</tool_call>'
    assert [tok.decode(r) for r in on] == [call + "<|im_end|>", "#### 1776<|im_end|>"]
    # the trained runs are the tokenization of those segments on their own (no boundary merges)
    assert on[0] == tok.encode(call + "<|im_end|>", add_special_tokens=False)
    assert on[1] == tok.encode("#### 1776<|im_end|>", add_special_tokens=False)
    off = [tok.decode(r) for r in _runs(ex.input_ids, ex.loss_mask, 0)]
    assert off[0].startswith("<|im_start|>system\n" + arith.SYSTEM_PROMPT)
    assert off[0].endswith("<|im_start|>user\nWhat is 37 * 48?<|im_end|>\n<|im_start|>assistant\n")
    assert off[1] == ("\n<|im_start|>user\n<tool_response>\n1776\n</tool_response><|im_end|>\n"
                      "<|im_start|>assistant\n")
    assert off[2] == "\n"
    ids = dict(zip(["im_start", "im_end", "tc", "etc", "tr", "etr"], range(1, 7)))
    masked_specials = [i for i, m in zip(ex.input_ids, ex.loss_mask) if m and i < 7]
    assert masked_specials == [ids["tc"], ids["etc"], ids["im_end"], ids["im_end"]]
    assert sum(ex.loss_mask) == len(on[0]) + len(on[1])


def test_direct_answer_and_multi_turn_without_tools(tok):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}]
    ex = sft.build_example(tok, msgs)
    assert [tok.decode(r) for r in _runs(ex.input_ids, ex.loss_mask, 1)] == [
        "Hello!<|im_end|>", "#### 4<|im_end|>"]


def test_assistant_turn_is_tokenized_on_its_own_like_a_rollout(tok):
    # In the whole text, the "\n" ending the generation prompt and a leading "\n" of the content
    # merge into one token; a model never generates across that edge (its turn starts after the
    # generation prompt), so the example keeps the two apart, as a rollout's trajectory does.
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\nHello"}]
    ex = sft.build_example(tok, msgs)
    head = tok.encode(tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True),
                      add_special_tokens=False)
    turn = tok.encode("\nHello<|im_end|>", add_special_tokens=False)
    assert ex.input_ids == head + turn + tok.encode("\n", add_special_tokens=False)
    assert ex.loss_mask == [0] * len(head) + [1] * len(turn) + [0]
    whole = tok.encode(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)
    assert whole != ex.input_ids  # the merge the whole-text tokenization would make


def test_collate_shifts_labels_and_pads():
    a = sft.Example(input_ids=[5, 6, 7, 8], loss_mask=[0, 0, 1, 1])
    b = sft.Example(input_ids=[9, 10], loss_mask=[0, 1])
    ids, att, labels = sft.collate([a, b], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert att.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert labels.tolist() == [[-100, 7, 8, -100], [10, -100, -100, -100]]


def test_length_grouped_batches_cover_each_index_once_with_little_padding():
    rng = random.Random(0)
    lengths = [rng.choice([200, 240]) + rng.randrange(5) for _ in range(1000)]
    batches = sft.length_grouped_batches(lengths, 32, random.Random(1), window=50)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    pad = sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)
    assert pad / sum(lengths) < 0.03  # random batches would pad ~9%


def test_lr_schedule_warmup_then_cosine():
    assert sft.lr_factor(0.0, 0.1) == pytest.approx(0.0, abs=1e-6)
    assert sft.lr_factor(0.05, 0.1) == pytest.approx(0.5)
    assert sft.lr_factor(0.1, 0.1) == pytest.approx(1.0)
    assert sft.lr_factor(0.55, 0.1) == pytest.approx(0.5)
    assert sft.lr_factor(1.0, 0.1) == pytest.approx(0.0, abs=1e-12)


def test_loss_decreases_and_is_deterministic(smoke_dir, tmp_path):
    rows = arith.make_sft_conversations(96, seed=0)
    kw = dict(model_dir=smoke_dir, rows=rows, steps=24, batch_size=16, lr=3e-3, seed=0,
              threads=1, log=None)
    first = sft.sft_train(out=tmp_path / "out", **kw)
    assert first.steps == 24 and first.target_tokens > 0
    head, tail = sum(first.losses[:4]) / 4, sum(first.losses[-4:]) / 4
    assert tail < 0.7 * head, (head, tail)
    again = sft.sft_train(out=None, **kw)
    assert again.losses == first.losses

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    start = AutoModelForCausalLM.from_pretrained(smoke_dir)
    assert not torch.equal(tuned.model.embed_tokens.weight, start.model.embed_tokens.weight)
    assert AutoTokenizer.from_pretrained(tmp_path / "out").chat_template is not None


def test_cli_end_to_end(smoke_dir, tmp_path, capsys):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arith.make_sft_conversations(8, 1)))
    rc = sft.main(["--model", str(smoke_dir), "--data", str(data), "--out", str(tmp_path / "o"),
                   "--steps", "2", "--batch-size", "4", "--seed", "0"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "done: 2 steps" in out and "final loss" in out
    assert (tmp_path / "o" / "model.safetensors").exists()
    assert (tmp_path / "o" / "tokenizer.json").exists()


def test_rows_without_messages_are_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": []}\n')
    with pytest.raises(ValueError, match="no 'messages'"):
        sft.load_conversations(bad)


def test_shared_prefix_gives_the_same_loss_and_gradients(smoke_dir, tok):
    from transformers import AutoModelForCausalLM

    rows = arith.make_sft_conversations(12, seed=3)
    examples = [sft.build_example(tok, r["messages"], r["tools"]) for r in rows]
    p = sft.common_prefix_length(examples)
    assert p > 50  # system prompt + tool schema are shared
    assert all(e.loss_mask[p] == 0 for e in examples)
    model = AutoModelForCausalLM.from_pretrained(smoke_dir, dtype=torch.float64)
    grads = []
    for share in (0, 16):
        model.zero_grad()
        loss, computed = sft.batch_loss(model, examples, 0, share_prefix=share)
        loss.backward()
        grads.append((loss.item(), computed, [q.grad.clone() for q in model.parameters()]))
    (l0, c0, g0), (l1, c1, g1) = grads
    # float64, but RoPE tables are built in float32 by transformers: agreement ~1e-9, while a
    # detached or mispositioned prefix changes gradients at the 1e-3 level.
    assert l1 == pytest.approx(l0, rel=1e-8)
    assert c1 < c0 * 0.6
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-8)


def test_common_prefix_keeps_a_trained_token_out_of_the_prefix():
    a = sft.Example([1, 2, 3, 4], [0, 0, 1, 1])
    b = sft.Example([1, 2, 3, 5], [0, 0, 1, 1])
    assert sft.common_prefix_length([a, b]) == 1  # tokens 0..1 shared, but token 2 is a target
    c = sft.Example([1, 2, 9, 9], [0, 0, 0, 1])
    d = sft.Example([1, 2, 8, 8], [0, 0, 0, 1])
    assert sft.common_prefix_length([c, d]) == 2
    assert sft.common_prefix_length([c, sft.Example([7, 2], [0, 1])]) == 0


def _copy_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"messages": [{"role": "user", "content": f"repeat: {a} {b}"},
                                  {"role": "assistant", "content": f"{a} {b}"}]})
    return rows


def test_copy_task_is_learned_quickly_by_the_demo_preset(tmp_path):
    """Regression for the warm start that never learned to copy operands into the tool call.

    A pure copy task through the same sft path must be learned within ~150 steps. With HF's default
    init (std 0.02) the demo-width model stayed near chance on the copied digits after 300 steps;
    with the preset's 0.08 it copies every digit after ~200 steps (measured).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = make_tiny_model(tmp_path / "demo", preset="demo", seed=0)
    res = sft.sft_train(model_dir=base, rows=_copy_rows(4000, 0), out=tmp_path / "copy", steps=150,
                        batch_size=32, lr=3e-3, seed=0, threads=1, log=None)
    assert res.steps == 150
    tok = AutoTokenizer.from_pretrained(tmp_path / "copy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "copy").eval()
    exs = [sft.build_example(tok, r["messages"]) for r in _copy_rows(100, 123)]
    ids, att, labels = sft.collate(exs, tok.pad_token_id)
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=att).logits.argmax(-1)
    digits = torch.tensor(tok.convert_tokens_to_ids(list("0123456789")))
    on = (labels != sft.IGNORE) & torch.isin(labels, digits)
    acc = (pred[on] == labels[on]).float().mean().item()
    assert on.sum() == 400 and acc > 0.9, acc  # chance is 0.1
