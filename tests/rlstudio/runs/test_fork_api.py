"""POST /api/v1/runs/{id}/fork/: 201 with the new run; 400 naming the field (step, the dotted key,
overrides) with nothing created; 404 for a run the caller cannot see, 403 for a reader it is shared
with, 409 for a live run or one without a kept checkpoint.

Real PostgreSQL; no Ray or worker.
"""
import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs import launch
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_share
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db
S = RunStatus
LR = "actor_rollout_ref.actor.optim.lr"


@pytest.fixture
def parent(alice, make_run, runs_dir):
    """alice's stopped cpu_smoke run (2 steps) with checkpoints at steps 1 and 2 in its folder."""
    run = make_run(alice, "parent", config=launch.build_config(preset="cpu_smoke"))
    Run.objects.filter(pk=run.pk).update(status=S.STOPPED, step=2, total_steps=2)
    run.refresh_from_db()
    for step in (1, 2):
        (runs_dir / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    return run


def _error(resp, status: int, field: str | None = None) -> dict:
    assert resp.status_code == status, resp.content
    error = resp.json()["error"]
    if field is not None:
        assert error["field"] == field, error
    return error


def test_a_fork_is_a_201_with_the_new_run(api, parent, runs_dir, bob):
    resp = api.post(f"/api/v1/runs/{parent.pk}/fork/",
                    {"step": 1, "name": "hotter", "overrides": {LR: 5e-4, "actor_rollout_ref.rollout.temperature": 1.2}},
                    format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["parent"] == parent.pk and body["parent_kind"] == "fork" and body["name"] == "hotter"
    fork = Run.objects.get(pk=body["id"])
    assert fork.resume_from == str(runs_dir / str(parent.pk) / "global_step_1")
    assert body["config"]["actor_rollout_ref"]["actor"]["optim"]["lr"] == 5e-4
    assert set(AuditEvent.objects.get(action="run.fork").data["changed"]) == {LR, "actor_rollout_ref.rollout.temperature"}
    old_lr = parent.config["actor_rollout_ref"]["actor"]["optim"]["lr"]
    assert body["fork"]["step"] == 1 and {"key": LR, "old": old_lr, "new": 5e-4} in body["fork"]["changes"]
    assert api.get(f"/api/v1/runs/{parent.pk}/").json()["fork"] is None
    # A reader of the fork alone reads what it changed to, not the parent's values.
    run_share(run=fork, by=parent.owner, add=["bob"])
    seen = api_client(bob).get(f"/api/v1/runs/{fork.pk}/").json()["fork"]
    assert {"key": LR, "old": None, "new": 5e-4} in seen["changes"]
    # No body: the newest checkpoint (step 2), which the 2-step run leaves nothing past: 400 on the total.
    _error(api.post(f"/api/v1/runs/{parent.pk}/fork/", {}, format="json"), 400, "trainer.total_training_steps")
    resp = api.post(f"/api/v1/runs/{parent.pk}/fork/", {"overrides": ["trainer.total_training_steps=3"]},
                    format="json")
    assert resp.status_code == 201 and Run.objects.get(pk=resp.json()["id"]).resume_from.endswith("global_step_2")


@pytest.mark.parametrize("body,field", [
    ({"step": 5}, "step"),
    ({"step": "two"}, "step"),
    ({"step": -1}, "step"),
    ({"step": 1, "overrides": {"actor_rollout_ref.rollout.n": 4}}, "actor_rollout_ref.rollout.n"),
    ({"step": 1, "overrides": ["algorithm.adv_estimator=gae"]}, "algorithm.adv_estimator"),
    ({"step": 1, "overrides": {"trainer.resume_fork": True}}, "trainer.resume_fork"),
    ({"step": 1, "overrides": {"data.train_files": "/srv/bob/data.jsonl"}}, "data.train_files"),
    ({"step": 1, "overrides": "lr=1"}, "overrides"),
    ({"step": 1, "overrides": 3}, "overrides"),
    ({"step": 1, "name": "x" * 201}, "name"),
])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_made(api, parent, body, field):
    error = _error(api.post(f"/api/v1/runs/{parent.pk}/fork/", body, format="json"), 400, field)
    if field.startswith("actor_rollout_ref.rollout.n"):
        assert "clone" in error["message"]
    assert Run.objects.count() == 1 and not AuditEvent.objects.filter(action="run.fork").exists()


def test_a_reader_gets_403_an_outsider_404(parent, alice, bob, make_user):
    run_share(run=parent, by=alice, add=["bob"])
    error = _error(api_client(bob).post(f"/api/v1/runs/{parent.pk}/fork/", {"step": 1}, format="json"), 403)
    assert error["code"] == "permission_denied"
    _error(api_client(make_user("carol")).post(f"/api/v1/runs/{parent.pk}/fork/", {"step": 1}, format="json"), 404)
    assert Run.objects.count() == 1


def test_a_live_run_or_one_without_a_checkpoint_is_a_409(api, parent, alice, make_run, runs_dir):
    Run.objects.filter(pk=parent.pk).update(status=S.RUNNING)
    error = _error(api.post(f"/api/v1/runs/{parent.pk}/fork/", {"step": 1}, format="json"), 409)
    assert "only a finished run" in error["message"]
    bare = make_run(alice, "bare", config=launch.build_config(preset="cpu_smoke"))
    Run.objects.filter(pk=bare.pk).update(status=S.FAILED)
    error = _error(api.post(f"/api/v1/runs/{bare.pk}/fork/", {}, format="json"), 409)
    assert "no checkpoint" in error["message"]
    assert Run.objects.count() == 2


def test_the_kept_checkpoints_are_listed_for_a_reader_by_step_and_never_as_paths(api, parent, alice, bob,
                                                                                make_user, runs_dir):
    (runs_dir / str(parent.pk) / "global_step_7.tmp" / "actor").mkdir(parents=True)  # being written
    body = api.get(f"/api/v1/runs/{parent.pk}/checkpoints/").json()
    assert body == {"run": parent.pk, "steps": [1, 2], "latest": 2}
    run_share(run=parent, by=alice, add=["bob"])
    seen = api_client(bob).get(f"/api/v1/runs/{parent.pk}/checkpoints/")
    assert seen.status_code == 200 and seen.json()["steps"] == [1, 2] and str(runs_dir) not in seen.content.decode()
    _error(api_client(make_user("carol")).get(f"/api/v1/runs/{parent.pk}/checkpoints/"), 404)
    bare = Run.objects.create(owner=alice, name="bare", dataset=parent.dataset, model=parent.model, config={})
    assert api.get(f"/api/v1/runs/{bare.pk}/checkpoints/").json() == {"run": bare.pk, "steps": [], "latest": None}
