"""trainer.data: file formats, row shapes, templating with tools, overlong policy, loader state."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainer.data import DataError, PromptLoader, build_prompt_dataset, load_prompt_dataset, read_rows
from trainer.data.loader import all_items
from trainer.types import prompt_hash

CALC = {"type": "function", "function": {"name": "calculator", "description": "calc",
                                          "parameters": {"type": "object", "properties": {
                                              "expression": {"type": "string"}}, "required": ["expression"]}}}


def data_cfg(**kw):
    base = dict(prompt_key="prompt", reward_fn_key="data_source", max_prompt_length=512,
                filter_overlong_prompts=True, truncation="error")
    base.update(kw)
    return SimpleNamespace(**base)


def verl_rows(n=6):
    return [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"What is {i} + {i}?"}],
             "data_source": "arith", "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"index": i, "tools_kwargs": {"calculator": {"create_kwargs": {"x": i}}}}}
            for i in range(n)]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def write_jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_parquet_and_datasets_folder_read_the_same_rows(tmp_path):
    import datasets

    rows = verl_rows()
    jl = write_jsonl(tmp_path / "d.jsonl", rows)
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "folder"))
    for src in (jl, tmp_path / "d.parquet", tmp_path / "folder"):
        got = read_rows(str(src))
        assert [r["reward_model"]["ground_truth"] for r in got] == [str(2 * i) for i in range(6)], src
        assert got[3]["prompt"][1]["content"] == "What is 3 + 3?"
    both = read_rows([str(jl), str(tmp_path / "d.parquet")])
    assert len(both) == 12
    with pytest.raises(DataError, match="not found"):
        read_rows(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataError, match="unsupported"):
        (tmp_path / "x.csv").write_text("a\n1\n")
        read_rows(str(tmp_path / "x.csv"))


def test_verl_row_templated_with_tools_and_fields(tok):
    ds = build_prompt_dataset(verl_rows(2), tokenizer=tok, data_cfg=data_cfg(), default_tools=[CALC])
    r = ds.records[1]
    assert r.data_source == "arith" and r.ground_truth == "2" and r.index == 1
    assert r.tools_kwargs == {"calculator": {"create_kwargs": {"x": 1}}}
    text = tok.decode(r.prompt_ids)
    assert "<tools>" in text and '"calculator"' in text
    assert text.endswith("<|im_start|>assistant\n")
    # Exactly the chat template's ids, not a re-encoding of something else.
    expected = tok(tok.apply_chat_template(r.messages, tools=[CALC], add_generation_prompt=True, tokenize=False),
                   add_special_tokens=False)["input_ids"]
    assert r.prompt_ids == expected


def test_plain_messages_form_prompt_is_up_to_last_user(tok):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                          {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}],
             "ground_truth": "4", "data_source": "arith"}]
    ds = build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg())
    rec = ds.records[0]
    assert [m["content"] for m in rec.messages] == ["hi", "hello", "2+2?"]
    assert rec.ground_truth == "4" and rec.tools == []
    assert "#### 4" not in tok.decode(rec.prompt_ids)
    with pytest.raises(DataError, match="no user message"):
        build_prompt_dataset([{"messages": [{"role": "system", "content": "x"}]}], tokenizer=tok, data_cfg=data_cfg())
    with pytest.raises(DataError, match="needs a 'prompt'"):
        build_prompt_dataset([{"text": "x"}], tokenizer=tok, data_cfg=data_cfg())


def test_row_tools_resolved_by_name(tok):
    rows = verl_rows(1)
    rows[0]["extra_info"]["tools"] = ["calculator"]
    seen = []
    ds = build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(),
                              resolve_tool=lambda name: seen.append(name) or CALC)
    assert seen == ["calculator"] and ds.records[0].tools == [CALC]


def test_overlong_filtered_and_counted_or_truncated(tok):
    rows = verl_rows(4)
    rows[2]["prompt"][1]["content"] = "long " * 400
    lengths = [len(r.prompt_ids) for r in build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(max_prompt_length=4096)).records]
    limit = max(lengths[0], lengths[1], lengths[3]) + 2
    ds = build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(max_prompt_length=limit))
    assert ds.num_filtered_overlong == 1 and [r.index for r in ds.records] == [0, 1, 3]
    with pytest.raises(DataError, match="max_prompt_length"):
        build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(max_prompt_length=limit, filter_overlong_prompts=False))
    full = build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(max_prompt_length=4096)).records[2].prompt_ids
    for side, want in (("left", full[-limit:]), ("right", full[:limit]),
                       ("middle", full[: limit // 2] + full[len(full) - (limit - limit // 2):])):
        ds = build_prompt_dataset(rows, tokenizer=tok, data_cfg=data_cfg(max_prompt_length=limit,
                                                                          filter_overlong_prompts=False, truncation=side))
        assert ds.num_truncated == 1 and ds.records[2].prompt_ids == want


def test_a_prompt_keeps_its_stable_key_across_epochs_and_a_resume(tok, tmp_path):
    """The uid is new at every draw (GRPO groups by it); the split, dataset row and hash of the rendered
    prompt are the same each epoch, after a resume and whatever the shuffle put it next to."""
    ds = load_prompt_dataset(str(write_jsonl(tmp_path / "d.jsonl", verl_rows(6))), tokenizer=tok, data_cfg=data_cfg())
    loader = PromptLoader(ds, batch_size=2, shuffle=True, seed=3)
    draws = [(e, p) for e, items in (loader.next_batch() for _ in range(6)) for p in items]
    resumed = PromptLoader(ds, batch_size=2, shuffle=True, seed=3)
    resumed.load_state_dict({**loader.state_dict(), "epoch": 1, "position": 0})
    draws += [(1, p) for _ in range(3) for p in resumed.next_batch()[1]]
    by_row: dict[int, list] = {}
    for epoch, p in draws:
        by_row.setdefault(p.index, []).append((epoch, p))
    assert sorted(by_row) == list(range(6))
    keys = set()
    for row, seen in by_row.items():
        assert [e for e, _ in seen].count(0) == 1 and [e for e, _ in seen].count(1) == 2
        assert len({p.uid for _, p in seen}) == 3  # a fresh uid per draw
        key = {(p.split, p.index, prompt_hash(p.prompt_ids)) for _, p in seen}
        assert key == {("train", row, prompt_hash(ds.records[row].prompt_ids))}
        keys |= key
    assert len({k[2] for k in keys}) == 6  # six texts, six hashes
    val = all_items(ds, split="val")
    assert [(p.split, p.index) for p in val] == [("val", i) for i in range(6)]
    assert [prompt_hash(p.prompt_ids) for p in val] == [k[2] for k in sorted(keys, key=lambda k: k[1])]


def test_loader_shuffles_per_epoch_and_resumes_at_epoch_boundary(tok, tmp_path):
    ds = load_prompt_dataset(str(write_jsonl(tmp_path / "d.jsonl", verl_rows(6))), tokenizer=tok, data_cfg=data_cfg())
    a = PromptLoader(ds, batch_size=2, shuffle=True, seed=3)
    seq = [(e, [p.index for p in items]) for e, items in (a.next_batch() for _ in range(6))]
    assert [e for e, _ in seq] == [0, 0, 0, 1, 1, 1]
    ep0 = sorted(i for _, idx in seq[:3] for i in idx)
    assert ep0 == list(range(6))  # each epoch is a permutation
    assert [i for _, idx in seq[:3] for i in idx] != [i for _, idx in seq[3:] for i in idx]
    # uids are fresh per step
    _, x = PromptLoader(ds, batch_size=2, seed=3).next_batch()
    _, y = PromptLoader(ds, batch_size=2, seed=3).next_batch()
    assert [p.index for p in x] == [p.index for p in y] and x[0].uid != y[0].uid
    # Save exactly at the end of epoch 0, resume: the next batch is epoch 1's first (never 0 steps).
    b = PromptLoader(ds, batch_size=2, shuffle=True, seed=3)
    for _ in range(3):
        b.next_batch()
    state = b.state_dict()
    assert state["position"] == 3 and state["epoch"] == 0
    c = PromptLoader(ds, batch_size=2, shuffle=True, seed=3)
    c.load_state_dict(state)
    rest = [(e, [p.index for p in items]) for e, items in (c.next_batch() for _ in range(3))]
    assert rest == seq[3:]
    with pytest.raises(ValueError, match="data changed"):
        PromptLoader(build_prompt_dataset(verl_rows(4), tokenizer=tok, data_cfg=data_cfg()), batch_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"fewer than one batch of 7 \(data.train_batch_size\)"):
        PromptLoader(ds, batch_size=7)
    with pytest.raises(ValueError, match=r"fewer than one batch of 7 \(data.gen_batch_size\)"):  # dynamic sampling's draw
        PromptLoader(ds, batch_size=7, batch_key="data.gen_batch_size")
