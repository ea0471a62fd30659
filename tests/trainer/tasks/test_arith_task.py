"""The arithmetic demo task: split, RL rows, warm-start conversations, the CLI."""
from __future__ import annotations

import json

import pytest

from trainer.tasks import arith


def test_answers_and_question_text():
    assert arith.answer(37, 48, "*") == 1776
    assert arith.answer(28, 90, "-") == -62
    assert arith.answer(10, 99, "+") == 109
    assert arith.question(37, 48, "*") == "What is 37 * 48?"
    with pytest.raises(ValueError):
        arith.answer(1, 2, "/")


def test_held_out_split_is_about_ten_percent_and_disjoint():
    train, test = arith.problems("train"), arith.problems("test")
    assert len(train) + len(test) == 90 * 90 * 3
    assert 0.08 < len(test) / (len(train) + len(test)) < 0.12
    train_pairs = {(a, b) for a, b, _ in train}
    test_pairs = {(a, b) for a, b, _ in test}
    assert not train_pairs & test_pairs
    assert arith.problems("test") == test  # fixed, seed independent
    with pytest.raises(ValueError):
        arith.problems("val")


def test_rl_rows_verl_format():
    rows = arith.make_rl_rows("test", 20, seed=5)
    assert len(rows) == 20
    r = rows[0]
    assert set(r) == {"prompt", "data_source", "reward_model", "extra_info"}
    assert r["data_source"] == "arith"
    assert [m["role"] for m in r["prompt"]] == ["system", "user"]
    assert r["prompt"][0]["content"] == arith.SYSTEM_PROMPT
    q = r["prompt"][1]["content"]
    a, op, b = q[len("What is "):-1].split(" ")
    assert r["reward_model"]["ground_truth"] == str(arith.answer(int(a), int(b), op))
    assert r["extra_info"]["tools"] == ["calculator"]
    assert all(arith.is_held_out(*map(int, x["prompt"][1]["content"][8:-1].split(" ")[::2]))
               for x in rows)
    assert arith.make_rl_rows("test", 20, seed=5) == rows
    assert arith.make_rl_rows("test", 20, seed=6) != rows
    with pytest.raises(ValueError, match="only"):
        arith.make_rl_rows("test", 10**6)


def test_sft_conversations_mix_and_content():
    rows = arith.make_sft_conversations(2000, seed=0, tool_fraction=0.4)
    tool = [r for r in rows if len(r["messages"]) == 5]
    direct = [r for r in rows if len(r["messages"]) == 3]
    assert len(tool) + len(direct) == 2000
    assert 0.36 < len(tool) / 2000 < 0.44
    for r in tool[:50]:
        m = r["messages"]
        a, op, b = m[1]["content"][8:-1].split(" ")
        value = arith.answer(int(a), int(b), op)
        assert m[2]["tool_calls"][0]["function"] == {
            "name": "calculator", "arguments": {"expression": f"{a}{op}{b}"}}
        assert m[3] == {"role": "tool", "name": "calculator", "content": str(value)}
        assert m[4] == {"role": "assistant", "content": f"#### {value}"}
        assert not arith.is_held_out(int(a), int(b))
    right = 0
    for r in direct:
        a, op, b = r["messages"][1]["content"][8:-1].split(" ")
        right += r["messages"][2]["content"] == f"#### {arith.answer(int(a), int(b), op)}"
    assert 0.15 < right / len(direct) < 0.35  # direct answers are mostly wrong
    assert all(r["tools"] == [arith.CALCULATOR_SCHEMA] for r in rows)


def test_make_demo_data_cli(tmp_path):
    assert arith.main([str(tmp_path), "--train", "30", "--test", "10", "--sft", "12"]) == 0
    lines = {n: (tmp_path / n).read_text().splitlines() for n in
             ["train.jsonl", "test.jsonl", "sft.jsonl"]}
    assert [len(v) for v in lines.values()] == [30, 10, 12]
    assert json.loads(lines["test.jsonl"][0])["extra_info"]["split"] == "test"
    assert "messages" in json.loads(lines["sft.jsonl"][0])
