"""The platform's demo model: built in bounded time in two SFT phases, loadable, and evaluable."""
from __future__ import annotations

import json

import pytest
import torch

from trainer.models.demo import evaluate_sampled, make_demo_model
from trainer.tasks import arith

torch.set_num_threads(1)


def test_make_demo_model_two_phases_bounded_and_evaluable(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = make_demo_model(tmp_path / "demo", warm_start_seconds=30.0, max_steps=3, seed=0)
    info = json.loads((out / "warm_start.json").read_text())
    assert [p["name"] for p in info["phases"]] == ["tool-only", "mix"]
    assert [p["tool_fraction"] for p in info["phases"]] == [1.0, 0.6]
    assert info["steps"] == 6 and info["seconds"] < 30.0
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.hidden_size == 128 and tok.chat_template is not None
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [2, 0]

    rows = arith.make_rl_rows("test", 6, seed=1)
    res = evaluate_sampled(out, rows, temperature=1.0, max_turns=2, tokens_per_turn=24)
    assert res.episodes == 6
    assert 0.0 <= res.reward <= 1.0 and 0.0 <= res.tool_use <= 1.0


def test_make_demo_model_refuses_bad_bounds(tmp_path):
    with pytest.raises(ValueError, match="warm_start_seconds"):
        make_demo_model(tmp_path / "x", warm_start_seconds=0)
    with pytest.raises(ValueError, match="copy_phase"):
        make_demo_model(tmp_path / "y", copy_phase=1.0)
