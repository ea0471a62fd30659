"""The platform's demo model: built in a bounded number of steps in two SFT phases, loadable, evaluable."""
from __future__ import annotations

import json

import pytest
import torch

from trainer.models.demo import evaluate_sampled, make_demo_model, phase_steps
from trainer.tasks import arith

torch.set_num_threads(1)


def test_make_demo_model_two_phases_bounded_and_evaluable(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    seen = []
    out = make_demo_model(tmp_path / "demo", steps=5, seed=0, copy_check=4,
                          progress=lambda done, total: seen.append((done, total)))
    info = json.loads((out / "warm_start.json").read_text())
    # 3 tool-only steps leave no copy skill: the copy gate adds its two chunks (a quarter of the
    # tool-only steps each, at least one), checking after each, and the mix comes last.
    names = [p["name"] for p in info["phases"]]
    assert names == ["tool-only", "tool-only extra 1", "tool-only extra 2", "mix"]
    assert [p["tool_fraction"] for p in info["phases"]] == [1.0, 1.0, 1.0, 0.45]
    # The mix phase runs at a third of the tool-only rate: at 3e-3 it undid the copy skill on some CPUs.
    assert [p["lr"] for p in info["phases"]] == [3e-3, 1e-3, 1e-3, 1e-3] and info["mix_lr"] == 1e-3
    checks = [p.get("copy_check") for p in info["phases"]]
    assert all(c["prompts"] == 4 and c["weak"] and c["reward"] < 0.9 for c in checks[:3]) and checks[3] is None
    assert all(0.0 <= c["tool_use"] <= 1.0 for c in checks[:3])
    # The steps bound is honoured exactly (3 + 2 of 5, plus the gate's 1 + 1), far from the safety cap.
    assert [p["steps"] for p in info["phases"]] == [3, 1, 1, 2]
    assert info["steps_requested"] == 5 and info["steps"] == 7 and info["extra_steps"] == 2
    assert info["cap_hit"] is False and not any(p["cap_hit"] for p in info["phases"])
    # Progress counts every step; its total grows when the gate adds a chunk.
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 6), (5, 7), (6, 7), (7, 7)]
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.hidden_size == 128 and tok.chat_template is not None
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [2, 0]

    rows = arith.make_rl_rows("test", 6, seed=1)
    res = evaluate_sampled(out, rows, temperature=1.0, max_turns=2, tokens_per_turn=24)
    assert res.episodes == 6
    assert 0.0 <= res.reward <= 1.0 and 0.0 <= res.tool_use <= 1.0


def test_same_seed_and_steps_give_the_same_weights(tmp_path):
    """Bounded by steps (not seconds), the build is repeatable whatever the machine's load."""
    from safetensors.torch import load_file

    a = load_file(make_demo_model(tmp_path / "a", steps=3, seed=1, copy_check=0) / "model.safetensors")
    b = load_file(make_demo_model(tmp_path / "b", steps=3, seed=1, copy_check=0) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_safety_cap_stops_early_and_is_reported(tmp_path):
    out = make_demo_model(tmp_path / "capped", steps=400, max_seconds=1e-6, seed=0, copy_check=0)
    info = json.loads((out / "warm_start.json").read_text())
    assert info["cap_hit"] is True and info["steps"] < 400
    assert all(p["cap_hit"] for p in info["phases"])


def test_phase_split_and_bad_bounds(tmp_path):
    assert phase_steps(600) == (400, 200) and phase_steps(3) == (2, 1) and phase_steps(2) == (1, 1)
    with pytest.raises(ValueError, match="steps must be >= 2"):
        make_demo_model(tmp_path / "w", steps=1)
    with pytest.raises(ValueError, match="max_seconds"):
        make_demo_model(tmp_path / "x", max_seconds=0)
    with pytest.raises(ValueError, match="copy_phase"):
        make_demo_model(tmp_path / "y", copy_phase=1.0)


def test_a_passed_copy_check_adds_no_steps(tmp_path, monkeypatch):
    """When the check passes (here: a bar of 0, which any model clears) the build is the two phases."""
    from trainer.models import demo

    monkeypatch.setattr(demo, "COPY_CHECK_WEAK", 0.0)
    info = json.loads((make_demo_model(tmp_path / "ok", steps=4, seed=0, copy_check=2) / "warm_start.json").read_text())
    assert [p["name"] for p in info["phases"]] == ["tool-only", "mix"]
    assert info["phases"][0]["copy_check"]["weak"] is False and "copy_check" not in info["phases"][1]
    assert info["steps"] == info["steps_requested"] == 4 and info["extra_steps"] == 0
