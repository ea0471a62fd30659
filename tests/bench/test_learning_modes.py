"""bench/learning.py's comparison of algorithms (policy-loss modes, DAPO, PPO+GAE, LoRA): each mode's settings
are a valid config with the intended keys (and no warning), and the curve / step figures and the docs
table come out of hand-made events."""
from __future__ import annotations

import json

import pytest

from bench.learning import MODES, curve_summary, read_steps, render_modes
from trainer.config import apply_overrides
from trainer.config.checks import config_warnings, validate
from trainer.recipes import get_recipe


@pytest.mark.parametrize("name", sorted(MODES))
def test_each_mode_is_a_valid_config_without_warnings(name):
    mode = MODES[name]
    cfg = validate(apply_overrides(get_recipe(mode.recipe), list(mode.overrides)), require_paths=False)
    assert config_warnings(cfg) == []
    actor = cfg.actor_rollout_ref.actor
    expected = {"grpo": ("vanilla", None, None, "token-mean"), "dapo": ("vanilla", 0.2, 0.28, "token-mean"),
                "gspo": ("gspo", 3e-4, 4e-4, "seq-mean-token-mean"), "cispo": ("cispo", 1.0, 0.2, "token-mean"),
                "gae": ("vanilla", None, None, "token-mean"), "lora": ("vanilla", None, None, "token-mean"),
                "interaction": ("vanilla", None, None, "token-mean")}[name]
    assert (actor.policy_loss.loss_mode, actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == expected
    assert cfg.algorithm.filter_groups.enable == (name == "dapo")
    assert (cfg.algorithm.adv_estimator == "gae") == (name == "gae")
    if name == "gae":
        assert (cfg.algorithm.gamma, cfg.algorithm.lam, cfg.critic.optim.lr) == (1.0, 1.0, 1e-3)
    model = cfg.actor_rollout_ref.model
    # LoRA: an adapter of rank 32 (alpha 2 x rank) on every linear layer, at a higher lr than the recipe's
    # full fine-tuning one (1e-3 against 3e-4); the others train every weight at the recipe's lr.
    assert (model.lora_rank, model.lora_alpha, model.target_modules) == (
        (32, 64, "all-linear") if name == "lora" else (0, 16, "all-linear"))
    # Only the interaction mode talks back (the gsm8k interaction, inside the recipe's multi-turn rollout).
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    assert multi_turn.enable and multi_turn.interaction == ("gsm8k" if name == "interaction" else None)
    recipe_lr = get_recipe(mode.recipe).actor_rollout_ref.actor.optim.lr
    assert actor.optim.lr == (1e-3 if name == "lora" else recipe_lr) and recipe_lr == 3e-4


def _metrics(step, **m):
    return {"type": "metrics", "time": 100.0 + step, "data": {"step": step, "metrics": m}}


def test_curve_and_step_figures(tmp_path):
    events = [_metrics(0, **{"val-core/arith/reward/mean@1": 0.25}),
              _metrics(1, **{"timing_s/step": 2.0, "critic/score/mean": 0.5}),
              _metrics(2, **{"timing_s/step": 4.0, "train/num_gen_batches": 3, "critic/score/mean": 0.6,
                             "val-core/arith/reward/mean@1": 0.81}),
              _metrics(3, **{"timing_s/step": 3.0, "train/num_gen_batches": 2, "val-core/arith/reward/mean@1": 0.79})]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert read_steps(path) == {"steps": 3, "s_per_step": 3.0, "gen_batches_per_step": 2.0}
    from bench.learning import read_curve

    curve, _ = read_curve(path)
    assert [(p["step"], p["seconds"], p["reward"]) for p in curve] == [(0, 0.0, 0.25), (2, 2.0, 0.81), (3, 3.0, 0.79)]
    s = curve_summary(curve)
    assert s["first"] == {"step": 2, "seconds": 2.0} and s["best"] == 0.81
    assert s["last3"] == pytest.approx((0.25 + 0.81 + 0.79) / 3)
    assert curve_summary(curve[:1])["first"] is None

    res = {"command": "c", "machine": "m", "torch": "t", "threads": 1, "modes": ["grpo", "cispo"], "steps": 3,
           "test_freq": 1, "val": 8, "overrides": [], "warm_text": "w", "warm_eval": {"reward": 0.3},
           "runs": {m: {"wall_s": 10.0, "curve": curve if m == "grpo" else curve[:2], "steps": read_steps(path),
                        "summary": curve_summary(curve if m == "grpo" else curve[:2])} for m in ("grpo", "cispo")}}
    text = render_modes(res, "learning_modes")
    assert text.startswith("<!-- bench:learning_modes:begin -->") and text.endswith("<!-- bench:learning_modes:end -->\n")
    assert "| step | GRPO | CISPO |" in text and "| 3 | 0.790 |  |" in text
    assert "| GRPO | 10 | 3 | 3.00 | 2.00 | step 2, 2.0 s | 0.810 | 0.617 |" in text
    assert "per trained batch, lr 3e-4)" in text

    # A LoRA run's own lr is named next to the others'.
    res = {**res, "modes": ["grpo", "lora"], "runs": {"grpo": res["runs"]["grpo"], "lora": res["runs"]["cispo"]}}
    text = render_modes(res, "learning_lora")
    assert "per trained batch, lr GRPO 3e-4, LoRA 1e-3)" in text and "| step | GRPO | LoRA |" in text
    assert "- LoRA: recipe demo_tool_arith with a LoRA adapter (peft): lora_rank 32, lora_alpha 64" in text
