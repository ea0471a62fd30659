"""A short CPU run on the tiny MATH-style fixture scores with the reward chosen for it: `math_boxed` by
name, or `default` routing the rows' data_source "lighteval/MATH" to it; a data_source the default
does not route fails the run with a message naming it and the rewards to pick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainer.rewards as rewards
from trainer.config import apply_overrides
from trainer.recipes import get_recipe
from trainer.run import run

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "math" / "math_tiny.jsonl"


def _cfg(tmp_path: Path, model: Path, train: Path, reward_name: str):
    return apply_overrides(
        get_recipe("cpu_smoke"),
        {
            "data.train_files": str(train),
            "actor_rollout_ref.model.path": str(model),
            "trainer.default_local_dir": str(tmp_path / "out"),
            "trainer.total_training_steps": 1,
            "trainer.save_freq": -1,
            "trainer.logger": ["jsonl"],
            "tools.names": [],
            "actor_rollout_ref.rollout.multi_turn.enable": False,
            "reward.name": reward_name,
        },
    )


def _events(tmp_path: Path) -> list[dict]:
    text = (tmp_path / "out" / "events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("reward_name", ["math_boxed", "default"])
def test_a_math_run_scores_with_math_boxed(tmp_path, tiny_model_dir, monkeypatch, reward_name):
    calls: list[tuple[str, str, float]] = []
    chosen = rewards._REGISTRY["math_boxed"]

    def spy(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        score = chosen(data_source, solution_str, ground_truth, extra_info, **kwargs)
        calls.append((data_source, str(ground_truth), score))
        return score

    monkeypatch.setitem(rewards._REGISTRY, "math_boxed", spy)
    assert run(_cfg(tmp_path, tiny_model_dir, FIXTURE, reward_name)) == 0
    ev = _events(tmp_path)
    assert [e["data"]["state"] for e in ev if e["type"] == "status"][-1] == "succeeded"
    truths = {
        json.loads(line)["reward_model"]["ground_truth"]
        for line in FIXTURE.read_text().splitlines()
    }
    # cpu_smoke: 2 prompts x 2 samples, every one scored by math_boxed
    assert len(calls) == 4
    assert {c[0] for c in calls} == {"lighteval/MATH"} and {c[1] for c in calls} <= truths
    train = [
        e["data"]["metrics"]
        for e in ev
        if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]
    ]
    assert len(train) == 1
    assert train[0]["critic/score/mean"] == pytest.approx(sum(c[2] for c in calls) / len(calls))


def test_an_unrouted_data_source_fails_the_run_naming_it(tmp_path, tiny_model_dir):
    train = tmp_path / "unknown.jsonl"
    with open(FIXTURE, encoding="utf-8") as src, open(train, "w", encoding="utf-8") as dst:
        for line in src:
            dst.write(json.dumps({**json.loads(line), "data_source": "my/homework"}) + "\n")
    assert run(_cfg(tmp_path, tiny_model_dir, train, "default")) == 1
    failed = [
        e["data"]
        for e in _events(tmp_path)
        if e["type"] == "status" and e["data"]["state"] == "failed"
    ]
    assert len(failed) == 1
    message = failed[0]["message"]
    assert "no default reward for data_source 'my/homework'" in message
    assert "math_boxed" in message and "reward.name" in message
