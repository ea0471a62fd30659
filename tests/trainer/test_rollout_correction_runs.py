"""Rollout correction through the actor and the trainer (algorithm.rollout_correction).

The actor (ActorWorker.update_policy on the tiny model): the batch's importance weights multiply the
policy loss (the loss equals the hand-computed one, the gradient that of advantages A*w), and bypass
mode's REINFORCE computes its weights from the current policy against the rollout. Then 2 GRPO steps
per mode through the command line (`python -m trainer run --recipe cpu_smoke`, in-process through
trainer.cli.main): rollout_is=token, sequence weights with rejection, bypass mode; each reports verl's
rollout_corr/* metrics and the samples' token views carry the rollout's log-probs."""
from __future__ import annotations

import json
import math

import pytest
import torch

from trainer.cli import main
from trainer.config.rollout_correction import RolloutCorrectionConfig
from trainer.workers.actor import ActorWorker
from trainer.workers.experience import make_batch

from tests.trainer.actor_probe import actor_cfg, update_grads


def batch6():
    g = torch.Generator().manual_seed(1)
    prompts = []
    for n in (5, 9, 3):
        p = torch.randint(10, 200, (n,), generator=g).tolist()
        prompts += [p, p]
    lens = [6, 2, 8, 4, 3, 7]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens]
    masks = [[1] * n for n in lens]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]  # a tool reply inside a multi-turn response
    b = make_batch(prompts, responses, masks, uids=["a", "a", "b", "b", "c", "c"])
    b.advantages = torch.randn(6, b.response_width, generator=g) * b.loss_mask
    return b, g


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       actor_cfg=actor_cfg(), trainable=True, total_steps=10)


def flat(grads):
    return torch.cat([g.flatten() for g in grads.values()])


def test_actor_multiplies_the_policy_loss_by_the_weights(worker):
    b, g = batch6()
    b.old_log_probs, _ = worker.compute_log_prob(b, with_entropy=False)  # ratio 1 in the update
    w = (0.2 + 2 * torch.rand(6, b.response_width, generator=g)) * b.loss_mask
    worker.cfg = actor_cfg(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=2, grad_clip=1e9)
    try:
        b.rollout_is_weights = w
        grads_w, m = update_grads(worker, b)
        by_hand = float((-b.advantages * w * b.loss_mask).sum() / b.loss_mask.sum())  # token-mean, r = 1
        assert abs(m["actor/pg_loss"][0] - by_hand) < 1e-5
        # w times the loss of a token is the loss with advantage A*w (w > 0): same gradient.
        b.rollout_is_weights, adv = None, b.advantages
        b.advantages = adv * w
        grads_scaled, _ = update_grads(worker, b)
        b.advantages = adv
        grads_plain, _ = update_grads(worker, b)
    finally:
        worker.cfg = actor_cfg()
    gw, gs = flat(grads_w), flat(grads_scaled)
    assert (gw - gs).norm() <= 1e-5 * gs.norm()
    assert (gw - flat(grads_plain)).norm() > 0.05 * gs.norm()  # the weights did change the gradient


def test_actor_bypass_reinforce_weights_the_current_policy_against_the_rollout(worker):
    b, g = batch6()
    logp, _ = worker.compute_log_prob(b, with_entropy=False)
    rollout = (logp + 0.3 * torch.randn(logp.shape, generator=g)) * b.loss_mask  # a drifted engine
    b.rollout_log_probs, b.old_log_probs = rollout, rollout.clone()  # the loop's bypass substitution
    worker.cfg = actor_cfg(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=3, grad_clip=1e9)
    worker.rollout_correction = RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce",
                                                        rollout_is="token", rollout_is_threshold=1.2)
    try:
        _, m = update_grads(worker, b)
    finally:
        worker.cfg, worker.rollout_correction = actor_cfg(), None
    w = torch.exp(logp - rollout).clamp(max=1.2) * b.loss_mask
    by_hand = float((-b.advantages * w * logp * b.loss_mask).sum() / b.loss_mask.sum())
    assert abs(m["actor/pg_loss"][0] - by_hand) < 1e-4 * max(1.0, abs(by_hand))
    # Metrics per micro-batch (two of three rows each), between the current policy and the rollout.
    assert len(m["rollout_corr/kl"]) == 2 and len(m["rollout_corr/rollout_is_mean"]) == 2
    assert 0 < m["rollout_corr/rollout_is_ratio_fraction_high"][0] + m["rollout_corr/rollout_is_ratio_fraction_high"][1]


def _run(tmp_path, tiny_model_dir, demo_data_dir, name, *overrides):
    out, reward = tmp_path / name, tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return (len(solution_str) % 7) / 7.0\n")
    rc = main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.save_freq=-1",
               f"custom_reward_function.path={reward}", "trainer.logger=[jsonl]",
               "actor_rollout_ref.actor.ppo_epochs=2", *overrides, "--output", str(out)])
    assert rc == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["data"]["state"] for e in events if e["type"] == "status"] == ["starting", "running", "succeeded"]
    steps = [e["data"] for e in events if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert [s["step"] for s in steps] == [1, 2]
    samples = [e["data"] for e in events if e["type"] == "sample" and not e["data"].get("validation")]
    return [s["metrics"] for s in steps], samples


MISMATCH = {"rollout_corr/" + k for k in ("kl", "k3_kl", "training_ppl", "rollout_ppl", "log_ppl_diff",
                                           "ppl_ratio", "chi2_token", "chi2_seq")}
IS_STATS = {"rollout_corr/rollout_is_" + k for k in ("mean", "std", "min", "max", "eff_sample_size",
                                                      "ratio_fraction_high", "ratio_fraction_low")}


def _finite(m, keys):
    return all(math.isfinite(m[k]) for k in keys)


def test_two_steps_with_token_importance_weights(tiny_model_dir, demo_data_dir, tmp_path):
    steps, samples = _run(tmp_path, tiny_model_dir, demo_data_dir, "tis", "algorithm.rollout_correction.rollout_is=token")
    for m in steps:
        assert MISMATCH | IS_STATS <= set(m) and _finite(m, MISMATCH | IS_STATS)
        assert m["timing_s/old_log_prob"] > 0  # decoupled: the actor recomputes the old log-probs
        # The hf engine runs on the actor's own module in fp32: the rollout and the actor agree.
        assert abs(m["rollout_corr/rollout_is_mean"] - 1.0) < 1e-3 and m["rollout_corr/rollout_is_max"] <= 2.0
        assert not any(k.startswith("rollout_corr/rollout_rs") for k in m)
    view = samples[0]["token_view"]
    rollout = view["rollout_logprobs"]
    assert len(rollout) == len(view["ids"])
    for lp, ro, mask in zip(view["logprobs"], rollout, view["loss_mask"]):
        assert (ro is None) == (mask == 0)
        if ro is not None:
            assert abs(ro - lp) < 1e-3


def test_two_steps_with_sequence_weights_and_rejection(tiny_model_dir, demo_data_dir, tmp_path):
    steps, _ = _run(tmp_path, tiny_model_dir, demo_data_dir, "seq", "algorithm.rollout_correction.rollout_is=sequence",
                    "algorithm.rollout_correction.rollout_rs=token_k1,seq_max_k3",
                    "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0,0.01")
    for m in steps:
        assert {"rollout_corr/rollout_rs_masked_fraction", "rollout_corr/rollout_rs_token_k1_masked_fraction",
                "rollout_corr/rollout_rs_seq_max_k3_seq_masked_fraction"} <= set(m)
        assert m["rollout_corr/rollout_rs_masked_fraction"] == 0.0  # nothing is that far off here


def test_two_steps_in_bypass_mode(tiny_model_dir, demo_data_dir, tmp_path):
    steps, samples = _run(tmp_path, tiny_model_dir, demo_data_dir, "bypass", "algorithm.rollout_correction.bypass_mode=true",
                          "algorithm.rollout_correction.loss_type=reinforce",
                          "algorithm.rollout_correction.rollout_is=token")
    for m in steps:
        assert m["timing_s/old_log_prob"] == 0.0  # no recompute: the rollout's log-probs are the old ones
        assert MISMATCH | IS_STATS <= set(m) and _finite(m, MISMATCH | IS_STATS)
        assert not any(k.startswith("training/rollout_probs_diff") for k in m)
    assert samples[0]["token_view"]["rollout_logprobs"] is None  # the actor's log-probs are the rollout's
