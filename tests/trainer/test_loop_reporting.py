"""Sample reporting of the GRPO loop: whole groups, carrying the group statistics the step used.

`pick_groups` on its own, then one cpu_smoke step with n=4 whose reported samples are checked against
the advantage estimator run again on their rewards (trainer.algorithms.advantages), and the sample
events' new fields against the event schema (old events without them still validate).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from trainer.config import apply_overrides
from trainer.events.schema import SampleData
from trainer.events.wire import validate_event
from trainer.loop import pick_groups
from trainer.recipes import get_recipe
from trainer.run import run

# Scores that differ between samples of a prompt (the share of digits and spaces in the response).
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str))
'''


@pytest.mark.parametrize("uids, budget, rows", [
    (["a"] * 4 + ["b"] * 4, 2, [0, 1, 2, 3]),  # under one group's size: still one whole group
    (["a"] * 4 + ["b"] * 4, 5, [0, 1, 2, 3]),
    (["a"] * 2 + ["b"] * 2 + ["c"] * 2, 4, [0, 1, 4, 5]),  # two groups, spread over the batch
    (["a"] * 2 + ["b"] * 2, 100, [0, 1, 2, 3]),
    (["a", "b", "a", "b"], 2, [0, 2]),  # a group is its uid's rows, wherever they lie
    (["a"] * 3, -1, [0, 1, 2]),
    (["a"] * 3, 0, []),
    ([], 4, []),
])
def test_pick_groups_takes_whole_groups(uids, budget, rows):
    assert pick_groups(uids, budget) == rows


def test_a_step_reports_whole_groups_with_the_estimators_statistics(tmp_path, tiny_model_dir, demo_data_dir):
    import torch

    from trainer.algorithms.advantages import grpo_advantage

    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    n = 4
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(demo_data_dir / "train.jsonl"), "actor_rollout_ref.model.path": str(tiny_model_dir),
        "trainer.default_local_dir": str(tmp_path / "out"), "custom_reward_function.path": str(reward),
        "trainer.logger": ["jsonl"], "trainer.total_training_steps": 1, "trainer.save_freq": -1,
        "actor_rollout_ref.rollout.n": n, "data.train_batch_size": 3, "actor_rollout_ref.actor.ppo_mini_batch_size": 3,
        "report.samples_per_step": 6, "report.token_view": False})
    assert run(cfg) == 0
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    samples = [e for e in events if e["type"] == "sample"]
    # 3 prompts x 4 samples; a budget of 6 trajectories holds one whole group of 4 (not 6 loose rows).
    assert len(samples) == n
    assert len({s["data"]["uid"] for s in samples}) == 1
    assert sorted(s["data"]["index"] for s in samples) == list(range(n))
    data = [s["data"] for s in samples]
    rewards = [d["reward"] for d in data]
    assert len(set(rewards)) > 1, rewards  # the check below means something only with different scores
    for d in data:
        assert d["group_size"] == n
        assert d["group_mean"] == pytest.approx(statistics.mean(rewards), abs=1e-6)
        assert d["group_std"] == pytest.approx(statistics.stdev(rewards), abs=1e-6)  # unbiased, as torch.std
    # The advantages the update used are the estimator's on these scores (no KL in the reward here).
    expected, _ = grpo_advantage(torch.tensor(rewards)[:, None], torch.ones(n, 1), [data[0]["uid"]] * n)
    assert [d["advantage"] for d in data] == pytest.approx(expected[:, 0].tolist(), abs=1e-5)
    assert [d["advantage"] for d in data] == pytest.approx(
        [(r - d["group_mean"]) / (d["group_std"] + 1e-6) for r, d in zip(rewards, data)], abs=1e-5)
    # The event schema takes the new fields, refuses bad ones, and still takes an event without them.
    typed = validate_event(samples[0]).data
    assert isinstance(typed, SampleData) and typed.group_size == n
    old = {k: v for k, v in samples[0].items()}
    old["data"] = {k: v for k, v in samples[0]["data"].items() if not k.startswith("group_")}
    assert validate_event(old).data.group_mean is None and "group_mean" not in validate_event(old).to_dict()["data"]
    bad = {**samples[0], "data": {**samples[0]["data"], "group_size": 0}}
    with pytest.raises(ValueError, match="data.group_size"):
        validate_event(bad)


def test_validation_reports_whole_groups(tmp_path, tiny_model_dir, demo_data_dir):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(demo_data_dir / "train.jsonl"), "data.val_files": str(demo_data_dir / "test.jsonl"),
        "actor_rollout_ref.model.path": str(tiny_model_dir), "trainer.default_local_dir": str(tmp_path / "out"),
        "custom_reward_function.path": str(reward), "trainer.logger": ["jsonl"], "trainer.total_training_steps": 1,
        "trainer.save_freq": -1, "trainer.val_before_train": True, "trainer.test_freq": -1,
        "actor_rollout_ref.rollout.val_kwargs.n": 2, "report.val_samples": 5, "report.samples_per_step": 0})
    assert run(cfg) == 0
    events = [json.loads(line) for line in Path(tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    val = [e["data"] for e in events if e["type"] == "sample"]
    assert val and all(d["validation"] for d in val)  # samples_per_step 0: no training samples
    by_uid: dict[str, list[int]] = {}
    for d in val:
        by_uid.setdefault(d["uid"], []).append(d["index"])
    assert len(by_uid) == 2 and all(sorted(ix) == [0, 1] for ix in by_uid.values())  # 5 // 2 = 2 groups
    assert all("group_mean" not in d for d in val)  # no advantages in validation


def _val_run(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch, **overrides):
    """A cpu_smoke run that validates once before training; returns its events and the prompts each
    validation generation was given (the worker group's generate, spied)."""
    from trainer.parallel.group import WorkerGroup

    batches: list[int] = []
    original = WorkerGroup.generate

    def spy(self, prompts, **kw):
        if kw["n"] == 2:  # a validation: val_kwargs.n = 2, rollout.n = 1
            batches.append(len(prompts))
        return original(self, prompts, **kw)

    monkeypatch.setattr(WorkerGroup, "generate", spy)
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    out = tmp_path / "out"
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(demo_data_dir / "train.jsonl"), "data.val_files": str(demo_data_dir / "test.jsonl"),
        "actor_rollout_ref.model.path": str(tiny_model_dir), "trainer.default_local_dir": str(out),
        "custom_reward_function.path": str(reward), "trainer.logger": ["jsonl"], "trainer.total_training_steps": 1,
        "trainer.save_freq": -1, "trainer.val_before_train": True, "trainer.test_freq": -1,
        "actor_rollout_ref.rollout.n": 1, "actor_rollout_ref.rollout.val_kwargs.n": 2,
        "report.samples_per_step": 0, **overrides})
    assert run(cfg) == 0
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()], batches


def test_validation_generates_val_batch_size_prompts_at_a_time(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch):
    events, batches = _val_run(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch,
                               **{"data.val_batch_size": 3, "report.val_samples": -1})
    assert batches == [3, 3, 2]  # the 8 validation prompts, 3 at a time
    val = [e["data"] for e in events if e["type"] == "sample"]
    assert len(val) == 16 and all(d["validation"] for d in val)  # every sample of every batch reported
    # the reward mean is over the whole set, not the last batch
    mean = next(e["data"]["metrics"] for e in events if e["type"] == "metrics"
                and any(k.startswith("val-core/") for k in e["data"]["metrics"]))
    [(key, value)] = [(k, v) for k, v in mean.items() if k.startswith("val-core/") and "/reward/mean@" in k]
    assert key.endswith("/reward/mean@2") and value == pytest.approx(statistics.mean(d["reward"] for d in val))
    # verl's other figures of the same samples: the prompts' stds and best-of-2 beside the mean
    assert {k.split("/", 3)[-1] for k in mean if k.startswith(("val-core/", "val-aux/"))} >= {
        "mean@2", "std@2", "best@2/mean", "worst@2/mean"}
    assert {"val-aux/num_turns/mean", "val-aux/num_turns/max", "val-aux/num_turns/min"} <= set(mean)


def test_validation_samples_are_chosen_over_the_whole_set(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch):
    events, batches = _val_run(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch,
                               **{"data.val_batch_size": 4, "report.val_samples": 4})
    assert batches == [4, 4]
    rows = [json.loads(line) for line in (demo_data_dir / "test.jsonl").read_text().splitlines()]
    val = [e["data"] for e in events if e["type"] == "sample"]
    # two whole groups, spread as pick_groups spreads them: the first and the last prompt, one per batch
    assert len(val) == 4 and len({d["uid"] for d in val}) == 2
    truths = {json.dumps(d["ground_truth"]) for d in val}
    assert truths == {json.dumps(rows[0]["reward_model"]["ground_truth"]),
                      json.dumps(rows[-1]["reward_model"]["ground_truth"])}
