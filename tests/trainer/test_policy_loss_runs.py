"""Each policy loss (actor.policy_loss.loss_mode) trains 2 GRPO steps through the command line:
`python -m trainer run --recipe cpu_smoke` on the tiny model, in-process through trainer.cli.main (the
same code as the command, without a fresh interpreter per run; under a second a run). The reward is a
test file giving responses of different lengths different scores, so the advantages (and the
gradients) are not zero on the untrained model; ppo_epochs=2 so the second epoch runs off-policy."""
from __future__ import annotations

import json
import math

import pytest

from trainer.cli import main

CLIP_METRICS = {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo", "gpg"])
def test_two_steps_per_policy_loss(loss_mode, tiny_model_dir, demo_data_dir, tmp_path):
    out, reward = tmp_path / "out", tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return (len(solution_str) % 7) / 7.0\n")
    rc = main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.save_freq=-1",
               f"custom_reward_function.path={reward}",
               "trainer.logger=[jsonl]", f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
               "actor_rollout_ref.actor.ppo_epochs=2", "--output", str(out)])
    assert rc == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["data"]["state"] for e in events if e["type"] == "status"] == ["starting", "running", "succeeded"]
    steps = [e["data"] for e in events if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        m = s["metrics"]
        assert math.isfinite(m["actor/pg_loss"]) and 0 < m["actor/grad_norm"] < math.inf
        if loss_mode == "gpg":  # verl's gpg reports no clip fraction or KL
            assert not CLIP_METRICS & set(m)
        else:
            assert CLIP_METRICS <= set(m) and all(math.isfinite(m[k]) for k in CLIP_METRICS)
        if loss_mode in ("gspo", "cispo"):  # neither has a dual clip
            assert m["actor/pg_clipfrac_lower"] == 0.0
