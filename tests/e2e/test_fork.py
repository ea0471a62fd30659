"""A fork end to end: API → Celery → Ray job → trainer → ingest, all real (the session's worker, beat
and Ray head, the cpu_smoke recipe on the tiny smoke model, as tests/e2e/test_run_lifecycle.py).

A run trains to its end with a checkpoint at every step; a fork from its first step with a new lr and
one more step in total runs to succeeded, starting at the step after the fork's (its first metrics are
step 2) and training at the new lr (the trainer's actor/lr).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs.models import RunStatus
from tests.e2e.test_run_lifecycle import _launch, _wait, assets, make_user, services, world  # noqa: F401

S = RunStatus
pytestmark = [pytest.mark.django_db(transaction=True)]
LR = "actor_rollout_ref.actor.optim.lr"


def _lrs(run) -> dict[int, float]:
    """{step: actor/lr} of the metrics events in the run's events.jsonl."""
    path = Path(run.config["trainer"]["default_local_dir"]) / "events.jsonl"
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {e["data"]["step"]: e["data"]["metrics"].get("actor/lr") for e in events if e["type"] == "metrics"}


def test_a_fork_from_an_earlier_step_trains_on_at_the_new_lr(world):  # noqa: F811
    body = _launch(world, "fork-parent", **{"trainer.save_freq": 1})  # 2 steps, checkpoints 1 and 2
    parent = _wait(body["id"], lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert parent.status == S.SUCCEEDED, parent.error
    old_lr = parent.config["actor_rollout_ref"]["actor"]["optim"]["lr"]
    assert _lrs(parent) == {1: old_lr, 2: old_lr}
    new_lr = old_lr * 5

    resp = world["api"].post(f"/api/v1/runs/{parent.pk}/fork/",
                             {"step": 1, "overrides": {LR: new_lr, "trainer.total_training_steps": 3}},
                             format="json")
    assert resp.status_code == 201, resp.content
    child = resp.json()
    assert child["parent"] == parent.pk and child["parent_kind"] == "fork" and child["total_steps"] == 3
    fork = _wait(child["id"], lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert fork.status == S.SUCCEEDED, fork.error
    ckpt = str(Path(parent.config["trainer"]["default_local_dir"]) / "global_step_1")
    assert fork.resume_from == ckpt == fork.config["trainer"]["resume_from_path"]
    assert fork.config["trainer"]["resume_fork"] is True
    assert fork.step == 3 and fork.checkpoint_path.endswith("global_step_3")
    lrs = _lrs(fork)
    assert sorted(lrs) == [2, 3], lrs  # it starts at the step after the fork's
    assert all(lr == pytest.approx(new_lr) for lr in lrs.values()), lrs
    assert AuditEvent.objects.get(action="run.fork", object_id=str(fork.pk)).data == {
        "parent": parent.pk, "step": 1, "changed": [LR, "trainer.total_training_steps"]}
