"""Train on a tiny model of each family (tests/fixtures/families.py) through the command line:
`python -m trainer run --recipe cpu_smoke` for 2 GRPO steps (multi-turn with the family's tool-call
parser; plain ChatML without tools) and `python -m trainer sft` for 2 steps. In-process through
trainer.cli.main (the same code as the command, without a fresh interpreter per run)."""
from __future__ import annotations

import json
import math

import pytest

from tests.fixtures import families as F
from trainer.cli import main

PARSER = {"qwen2.5": "qwen25", "qwen3": "qwen25", "llama3": "llama3"}


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {f: F.build(f, root / f, layers=1, hidden=32, heads=2, kv_heads=1) for f in F.FAMILIES}


def _events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("family", F.FAMILIES)
def test_grpo_two_steps(family, family_models, demo_data_dir, tmp_path):
    out = tmp_path / "out"
    tools = ([f"actor_rollout_ref.rollout.multi_turn.format={PARSER[family]}"] if family in PARSER
             else ["actor_rollout_ref.rollout.multi_turn.enable=false", "tools.names=[]"])
    rc = main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={family_models[family]}", "trainer.save_freq=-1",
               "trainer.logger=[jsonl]", *tools, "--output", str(out)])
    assert rc == 0
    ev = _events(out / "events.jsonl")
    assert [e["data"]["state"] for e in ev if e["type"] == "status"] == ["starting", "running", "succeeded"]
    steps = [e["data"] for e in ev if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(math.isfinite(m["metrics"]["actor/pg_loss"]) and m["metrics"]["response_length/mean"] > 0
               for m in steps)
    samples = [e["data"] for e in ev if e["type"] == "sample"]
    assert samples and all(sum(s["token_view"]["loss_mask"]) > 0 for s in samples)
    ids = F.special_ids(family)
    stops = {ids[t] for t in ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>")
             if t in ids}
    for s in samples:  # a turn that stopped ended on one of the family's stop tokens
        if s["finish_reason"] == "stop" and s["num_turns"] == 1:
            assert s["token_view"]["ids"][-1] in stops


@pytest.mark.parametrize("family", F.FAMILIES)
def test_sft_two_steps(family, family_models, demo_data_dir, tmp_path):
    data = tmp_path / "sft.jsonl"
    rows = [json.loads(line) for line in (demo_data_dir / "sft.jsonl").read_text().splitlines()][:8]
    if family == "chatml":  # no tools: the question and the answer
        rows = [{"messages": [r["messages"][0], r["messages"][1], r["messages"][-1]]} for r in rows]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "sft_out"
    assert main(["sft", "--model", str(family_models[family]), "--data", str(data), "--out", str(out),
                 "--steps", "2", "--batch-size", "4", "--threads", "1"]) == 0
    assert (out / "config.json").exists() and (out / "tokenizer_config.json").exists()
