"""Checkpoint evaluation: mean@k / pass@k / maj@k against hand-computed values, and two checkpoints of a
2-step cpu_smoke run evaluated end to end with the trainer's own rollout and the run's reward."""
from __future__ import annotations

import json
import math

import pytest

from trainer import checkpoint as ckpt
from trainer.eval_metrics import (
    answer_of,
    checkpoint_figures,
    maj_at_k,
    mean_at_k,
    pass_at_k,
    prompt_figures,
)


def test_pass_at_k_hand_computed():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # k=1 is the share of correct samples
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # n=10, c=1, k=5: 1 - C(9,5)/C(10,5) = 1 - 126/252
    assert pass_at_k(10, 1, 5) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k: every draw of 2 holds a correct one
    assert pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(100, 7, 10) == pytest.approx(1 - math.comb(93, 10) / math.comb(100, 10))
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_mean_and_maj_at_k_hand_computed():
    assert mean_at_k([1.0, 0.0, 0.5, 0.5]) == pytest.approx(0.5)
    # majority answer "42" (2 of 3 samples), correct -> 1
    assert maj_at_k(["42", "41", "42"], [1.0, 0.0, 1.0]) == 1.0
    # majority answer is the wrong one though one sample is right -> 0
    assert maj_at_k(["7", "7", "8"], [0.0, 0.0, 1.0]) == 0.0
    # tie: the answer seen first wins
    assert maj_at_k(["8", "7"], [1.0, 0.0]) == 1.0
    assert maj_at_k(["7", "8"], [0.0, 1.0]) == 0.0
    assert answer_of("so 3 + 4 = 7\nThe answer is 1,234.") == "1234"
    assert answer_of("no digits here\n  yes  \n") == "yes"
    fig = prompt_figures(["= 5", "= 6", "= 5", "= 5"], [1.0, 0.1, 1.0, 1.0], k=2)
    assert (fig.n, fig.correct) == (4, 3)
    assert fig.mean_at_k == pytest.approx(3.1 / 4)
    assert fig.pass_at_k == 1.0 and fig.maj_at_k == 1.0
    low = prompt_figures(["1", "2"], [0.0, 1.0], k=1)
    figs = checkpoint_figures([fig, low])
    assert figs["pass_at_k"] == pytest.approx((1.0 + 0.5) / 2)
    assert figs["maj_at_k"] == pytest.approx(0.5)  # tie 1 vs 2: "1" first, wrong
    assert figs["mean_at_k"] == pytest.approx((3.1 / 4 + 0.5) / 2)


def test_two_checkpoints_end_to_end(tmp_path, tiny_model_dir, demo_data_dir):
    from trainer.config import apply_overrides
    from trainer.evaluate import evaluate_checkpoints
    from trainer.recipes import get_recipe
    from trainer.run import run

    out = tmp_path / "out"
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(demo_data_dir / "train.jsonl"), "actor_rollout_ref.model.path": str(tiny_model_dir),
        "trainer.default_local_dir": str(out), "trainer.logger": ["jsonl"], "trainer.save_freq": 1,
        "reward.name": "arith"})
    assert run(cfg) == 0
    steps = sorted(int(m.group(1)) for p in out.iterdir() if (m := ckpt.STEP_DIR.match(p.name)))
    assert len(steps) >= 2
    pick = steps[:2]
    rows = [json.loads(line) for line in (demo_data_dir / "test.jsonl").read_text().splitlines()[:3]]
    res = evaluate_checkpoints(cfg.to_dict(), [(s, ckpt.step_dir(out, s)) for s in pick], rows, k=3,
                               temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=16, seed=1)
    assert [c["step"] for c in res["checkpoints"]] == pick
    for c in res["checkpoints"]:
        assert c["samples"] == 3 * 3
        for key in ("mean_at_k", "pass_at_k", "maj_at_k"):
            assert 0.0 <= c[key] <= 1.0
    assert len(res["prompts"]) == 3
    for p in res["prompts"]:
        assert set(p["cells"]) == {str(s) for s in pick}
        assert all(cell["n"] == 3 for cell in p["cells"].values())
    # the checkpoint figure is the mean of its prompts' figures
    first = str(pick[0])
    mean = sum(p["cells"][first]["mean_at_k"] for p in res["prompts"]) / 3
    assert res["checkpoints"][0]["mean_at_k"] == pytest.approx(mean)
