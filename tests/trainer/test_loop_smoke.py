"""The GRPO loop end to end on the CPU: cpu_smoke for 2 steps (events, metrics, samples, checkpoints),
resume equivalence across an epoch boundary, and rewards/advantages on a multi-turn loss mask."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.config import apply_overrides
from trainer.recipes import get_recipe
from trainer.run import run

# A reward that varies between samples, so advantages and gradients are not all zero.
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str)), "chars": len(solution_str)}
'''

VERL_METRICS = ["critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean",
                "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min", "critic/returns/mean",
                "response_length/mean", "response_length/max", "response_length/min", "response_length/clip_ratio",
                "prompt_length/mean", "actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower",
                "actor/ppo_kl", "actor/kl_loss", "actor/kl_coef", "actor/entropy", "actor/grad_norm", "actor/lr",
                "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref", "timing_s/adv",
                "timing_s/update_actor", "timing_s/step", "timing_s/save_checkpoint", "timing_per_token_ms/gen",
                "perf/total_num_tokens", "perf/time_per_step", "perf/throughput", "perf/cpu_memory_used_gb",
                "num_turns/mean", "num_turns/max", "num_turns/min", "tool_call_counts/mean", "tool_call_counts/max",
                "tool_call_counts/min", "training/global_step", "training/epoch"]
# verl's _balance_batch reports these on every step with trainer.balance_batch (the default), one worker included
SEQLEN_METRICS = ["global_seqlen/min", "global_seqlen/max", "global_seqlen/minmax_diff", "global_seqlen/balanced_min",
                  "global_seqlen/balanced_max", "global_seqlen/mean"]


def smoke_cfg(tmp_path: Path, model: Path, train: Path, **over):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    ov = {"data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
          "trainer.default_local_dir": str(tmp_path / "out"), "custom_reward_function.path": str(reward),
          "trainer.logger": ["jsonl"], "report.memory_interval_s": 0.2}
    ov.update(over)
    return apply_overrides(get_recipe("cpu_smoke"), ov)


def events(out: Path):
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_cpu_smoke_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    cfg = smoke_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                    **{"data.val_files": str(demo_data_dir / "test.jsonl"), "trainer.val_before_train": True,
                       "trainer.test_freq": 2, "trainer.export_hf": True})
    assert run(cfg) == 0
    out = tmp_path / "out"
    ev = events(out)
    seqs = [e["seq"] for e in ev]
    assert seqs == list(range(1, len(ev) + 1))
    states = [e["data"]["state"] for e in ev if e["type"] == "status"]
    assert states == ["starting", "running", "succeeded"]
    said = [e["data"]["message"] for e in ev if e["type"] in ("log", "status")]
    assert "exported the final policy (huggingface/ in the run's folder)" in said
    # no server path (the run's folder, the model's): readers of the run read these messages
    assert not [m for m in said if str(tmp_path) in m or str(tiny_model_dir) in m]
    metrics = [e["data"] for e in ev if e["type"] == "metrics"]
    train = [m for m in metrics if "actor/pg_loss" in m["metrics"]]
    assert [m["step"] for m in train] == [1, 2]
    for m in train:
        missing = [k for k in VERL_METRICS + SEQLEN_METRICS if k not in m["metrics"]]
        assert not missing, missing
        # one worker: the whole step on it, balanced or not (verl's figures at world size 1)
        seqlen = {k: m["metrics"][k] for k in SEQLEN_METRICS}
        assert seqlen.pop("global_seqlen/minmax_diff") == 0
        assert set(seqlen.values()) == {m["metrics"]["perf/total_num_tokens"]}
    assert train[0]["metrics"]["actor/grad_norm"] > 0  # the custom reward gives real advantages
    assert any(k.startswith("val-core/arith/reward/mean@1") for k in metrics[0]["metrics"])  # before training
    assert any(k.startswith("val-core/arith/") for k in train[1]["metrics"])  # test_freq=2
    samples = [e["data"] for e in ev if e["type"] == "sample" and not e["data"].get("validation")]
    assert len(samples) == 8 and {s["step"] for s in samples} == {1, 2}
    for s in samples:
        tv = s["token_view"]
        assert len(tv["ids"]) == s["response_length"] == len(tv["loss_mask"]) == len(tv["advantages"])
        assert len(tv["ref_logprobs"]) == len(tv["ids"])
        assert all(a == 0 for a, m in zip(tv["advantages"], tv["loss_mask"]) if m == 0)
        # Numbers rounded to 6 decimals for the page (short on the wire), within 5e-7 of the step's own.
        numbers = [v for key in ("logprobs", "ref_logprobs", "advantages") for v in tv[key] if v is not None]
        assert numbers and all(round(v, 6) == v and len(repr(v)) <= 10 for v in numbers)
        assert all(abs(a - s["advantage"]) <= 5e-7 for a, m in zip(tv["advantages"], tv["loss_mask"]) if m == 1)
        assert "chars" in s["reward_extra"] and s["messages"][-1]["role"] in ("assistant", "tool", "user")
    val = [e["data"] for e in ev if e["type"] == "sample" and e["data"].get("validation")]
    assert val and {s["prompt_split"] for s in val} == {"val"} and {s["prompt_split"] for s in samples} == {"train"}
    # the validation pass before training and the one at step 2 report the same rows under the same keys
    by_step = {}
    for s in val:
        by_step.setdefault(s["step"], set()).add((s["prompt_index"], s["prompt_hash"]))
    assert len(by_step) == 2 and len(set(map(frozenset, by_step.values()))) == 1
    phases = {e["data"]["phase"] for e in ev if e["type"] == "memory"}
    assert {"rollout", "ref", "update", "sync"} <= phases
    assert all(e["data"]["rss"] > 0 for e in ev if e["type"] == "memory")
    ck = [e["data"] for e in ev if e["type"] == "checkpoint"]
    assert [c["step"] for c in ck] == [1, 2]
    marker = out / "latest_checkpointed_iteration.txt"
    assert marker.read_text() == "2"
    for step in (1, 2):
        d = out / f"global_step_{step}"
        assert (d / "actor" / ".metadata").exists() and (d / "actor" / "scheduler.pt").exists()  # DCP shards
        assert (d / "data.pt").exists() and (d / "extra_state.pt").exists()
        # the commit marker is written after everything in the step folder
        assert max(f.stat().st_mtime_ns for f in d.rglob("*") if f.is_file()) <= marker.stat().st_mtime_ns
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoTokenizer.from_pretrained(out / "huggingface")
    exported = AutoModelForCausalLM.from_pretrained(out / "huggingface")
    saved = ckpt.read_actor_model(out / "global_step_2")
    for n, p in exported.named_parameters():
        assert torch.allclose(p, saved[n]), n


def test_no_global_seqlen_metrics_without_balance_batch(tmp_path, tiny_model_dir, demo_data_dir):
    """verl reports global_seqlen/* from _balance_batch, which trainer.balance_batch=False skips."""
    cfg = smoke_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                    **{"trainer.balance_batch": False, "trainer.total_training_steps": 1, "trainer.save_freq": -1})
    assert run(cfg) == 0
    train = [e["data"]["metrics"] for e in events(tmp_path / "out") if e["type"] == "metrics"
             and "actor/pg_loss" in e["data"]["metrics"]]
    assert len(train) == 1 and not [k for k in train[0] if k.startswith("global_seqlen/")]


def test_resume_equals_uninterrupted_run_across_an_epoch_boundary(tmp_path, tiny_model_dir, demo_data_dir):
    # 4 prompts, batch 2: 2 steps per epoch, 2 epochs; the break after step 2 is an epoch boundary.
    rows = (demo_data_dir / "train.jsonl").read_text().splitlines()[:4]
    train = tmp_path / "train4.jsonl"
    train.write_text("\n".join(rows) + "\n")
    common = {"trainer.total_training_steps": None, "trainer.total_epochs": 2, "trainer.save_freq": -1}
    (tmp_path / "a").mkdir()
    a = smoke_cfg(tmp_path / "a", tiny_model_dir, train, **common)
    assert run(a) == 0
    (tmp_path / "b").mkdir()
    b_first = smoke_cfg(tmp_path / "b", tiny_model_dir, train, **{**common, "trainer.total_epochs": 1})
    assert run(b_first) == 0
    assert (tmp_path / "b" / "out" / "latest_checkpointed_iteration.txt").read_text() == "2"
    b_rest = smoke_cfg(tmp_path / "b", tiny_model_dir, train, **common)
    assert run(b_rest) == 0
    ea, eb = events(tmp_path / "a" / "out"), events(tmp_path / "b" / "out")
    assert [e["seq"] for e in eb] == list(range(1, len(eb) + 1))  # numbering continues after resume
    resumed = [e["data"]["message"] for e in eb if e["type"] == "log" and "resumed from" in e["data"]["message"]]
    # named by its step and folder name, not by its server path: readers of the run read its log events
    assert resumed == ["resumed from the checkpoint of step 2 (global_step_2 in the run's folder; epoch 0, "
                       "loader position 2/2)"]
    ma = {e["data"]["step"]: e["data"]["metrics"] for e in ea if e["type"] == "metrics"}
    mb = {e["data"]["step"]: e["data"]["metrics"] for e in eb if e["type"] == "metrics"}
    assert sorted(ma) == sorted(mb) == [1, 2, 3, 4]
    assert mb[3]["training/epoch"] == 1.0
    # Each prompt is drawn once per epoch under a fresh uid; its sample events carry the same stable
    # key (split, dataset row, hash of the rendered prompt) in both epochs, across the resume too.
    draws: dict[tuple, set] = {}
    for e in eb:
        d = e["data"]
        if e["type"] == "sample" and not d.get("validation"):
            draws.setdefault((d["prompt_split"], d["prompt_index"], d["prompt_hash"]), set()).add((d["step"], d["uid"]))
    assert sorted(k[1] for k in draws) == [0, 1, 2, 3] and {k[0] for k in draws} == {"train"}
    assert len({k[2] for k in draws}) == 4
    for key, seen in draws.items():
        steps = sorted(step for step, _ in seen)
        assert len(seen) == 2 and steps[0] in (1, 2) and steps[1] in (3, 4), (key, seen)
        assert len({uid for _, uid in seen}) == 2
    keys_a = {(e["data"]["prompt_index"], e["data"]["prompt_hash"]) for e in ea if e["type"] == "sample"}
    assert keys_a == {(k[1], k[2]) for k in draws}  # the uninterrupted run reports the same keys
    for step in (3, 4):
        for k in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "response_length/mean"):
            assert ma[step][k] == pytest.approx(mb[step][k], abs=1e-6), (step, k)
    wa = ckpt.read_actor_model(tmp_path / "a" / "out" / "global_step_4")
    wb = ckpt.read_actor_model(tmp_path / "b" / "out" / "global_step_4")
    w0 = ckpt.read_actor_model(tmp_path / "b" / "out" / "global_step_2")
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    assert max((wa[k] - w0[k]).abs().max().item() for k in wa) > 0  # steps 3-4 really trained
    # A finished run resumed again says so and trains nothing.
    assert run(b_rest) == 0
    last = events(tmp_path / "b" / "out")
    assert any(e["type"] == "log" and "nothing left to train" in e["data"]["message"] for e in last[len(eb):])


def test_in_reward_kl_counts_the_tokens_the_rollout_correction_rejects(tmp_path, tiny_model_dir, demo_data_dir):
    """The adv phase in verl's order: the KL penalty goes into the rewards over the whole response,
    then the rollout correction rejects tokens (they leave the loss mask), then the estimator."""
    from trainer.algorithms.losses import get_kl_controller
    from trainer.loop import Trainer
    from trainer.types import PromptItem, Trajectory

    cfg = smoke_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl", **{
        "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.1,
        "algorithm.rollout_correction.rollout_rs": "token_k1", "algorithm.rollout_correction.rollout_rs_threshold": 2.0})
    t = Trainer(cfg, emitter=None)
    t.reward_fn = lambda src, text, gt, extra=None: float(text == gt)
    t.kl_ctrl = get_kl_controller(t.cfg.algorithm.kl_ctrl)
    p = PromptItem(uid="u", index=0, messages=[], prompt_ids=[1, 2, 3], ground_truth="7")
    trajs = [Trajectory(uid="u", index=i, prompt=p, prompt_ids=[1, 2, 3], response_ids=[10, 11, 12],
                        loss_mask=[1, 1, 1], response_text=text) for i, text in enumerate(("7", "8"))]
    exp = t.score(trajs)
    b = exp.batch
    b.old_log_probs = torch.full((2, 3), -1.0)
    b.rollout_log_probs = torch.tensor([[-1.0, -2.0, -1.0], [-1.0, -1.0, -1.0]])  # row 0 token 1: |log r| = 1 > ln 2
    b.ref_log_probs = torch.tensor([[-1.0, -1.5, -1.0], [-1.0, -1.0, -1.0]])  # KL (k1) 0.5 on that token
    metrics, corr = t.compute_advantages(exp)
    assert b.loss_mask[0].tolist() == [1.0, 0.0, 1.0] and corr["rollout_corr/rollout_rs_masked_fraction"] > 0
    assert b.token_level_rewards[0, 1].item() == pytest.approx(-0.1 * 0.5)  # its KL still in the reward
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((0.5 / 3 + 0) / 2)


def test_bypass_mode_takes_the_rollouts_log_probs_as_old_before_the_in_reward_kl(tmp_path, tiny_model_dir,
                                                                                 demo_data_dir):
    from trainer.algorithms.losses import get_kl_controller
    from trainer.loop import Trainer
    from trainer.types import PromptItem, Trajectory

    cfg = smoke_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl", **{
        "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.1,
        "algorithm.rollout_correction.bypass_mode": True})
    t = Trainer(cfg, emitter=None)
    t.reward_fn = lambda src, text, gt, extra=None: float(text == gt)
    t.kl_ctrl = get_kl_controller(t.cfg.algorithm.kl_ctrl)
    p = PromptItem(uid="u", index=0, messages=[], prompt_ids=[1, 2, 3], ground_truth="7")
    trajs = [Trajectory(uid="u", index=i, prompt=p, prompt_ids=[1, 2, 3], response_ids=[10, 11],
                        loss_mask=[1, 1], response_text=text) for i, text in enumerate(("7", "8"))]
    exp = t.score(trajs)
    b = exp.batch
    b.rollout_log_probs = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    b.ref_log_probs = torch.tensor([[-1.0, -1.5], [-1.0, -1.0]])
    assert b.old_log_probs is None  # bypass mode has no old-log-prob pass
    metrics, corr = t.compute_advantages(exp)
    assert torch.equal(b.old_log_probs, b.rollout_log_probs) and corr == {}
    assert b.token_level_rewards[0, 0].item() == pytest.approx(0.0)
    assert b.token_level_rewards[0, 1].item() == pytest.approx(1.0 - 0.1 * (-2.0 + 1.5))  # score, less beta * k1
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((-0.5 / 2 + 0) / 2)


def test_score_on_last_trained_token_and_zero_advantage_on_tool_tokens(tmp_path, tiny_model_dir, demo_data_dir):
    from trainer.algorithms.losses import get_kl_controller
    from trainer.loop import Trainer
    from trainer.types import PromptItem, Trajectory

    cfg = smoke_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl")
    t = Trainer(cfg, emitter=None)
    t.reward_fn = lambda src, text, gt, extra=None: float(text == gt)
    t.kl_ctrl = get_kl_controller(t.cfg.algorithm.kl_ctrl)
    p = PromptItem(uid="u", index=0, messages=[], prompt_ids=[1, 2, 3], ground_truth="7")
    # assistant (3) | tool reply (3, mask 0) | assistant (2) | trailing template token (mask 0)
    mask = [1, 1, 1, 0, 0, 0, 1, 1, 0]
    good = Trajectory(uid="u", index=0, prompt=p, prompt_ids=[1, 2, 3], response_ids=list(range(10, 19)),
                      loss_mask=mask, response_text="7")
    bad = Trajectory(uid="u", index=1, prompt=p, prompt_ids=[1, 2, 3], response_ids=[20, 21], loss_mask=[1, 1],
                     response_text="8")
    exp = t.score([good, bad])
    assert exp.batch.token_level_scores[0].nonzero().flatten().tolist() == [7]  # last mask-1 token
    assert exp.batch.token_level_scores[0, 7] == 1.0 and exp.batch.token_level_scores[1].sum() == 0
    t.compute_advantages(exp)
    adv = exp.batch.advantages
    assert torch.all(adv[0, torch.tensor(mask) == 0] == 0)
    assert torch.allclose(adv[0, torch.tensor(mask) == 1], torch.full((5,), 1 / (2 ** 0.5 + 1e-6) * 1.0), atol=1e-5)
    assert good.advantage > 0 > bad.advantage
