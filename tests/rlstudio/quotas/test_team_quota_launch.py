"""A job asking more GPUs than one of its owner's team quotas allows at once (the team's max_gpus) is
refused at launch as one over the user's own max_gpus is: a 400 on `gpus` whose message names the team,
nothing recorded (launch, run form and its preview, clone, resume, fork, sweep, both evaluation
launches); staff acting on another user's run read "its owner's team". A team quota lowered after the
launch leaves the job queued with a reason that says waiting cannot help and names the team, also when
a GPU job queued before it waits for the cluster (it is never held back behind it, and its owner's
later jobs do not wait for it). Real PostgreSQL, no Ray."""
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from rlstudio.catalog.models import ModelAsset
from rlstudio.evaluations.models import Evaluation
from rlstudio.quotas.models import GpuQuota, TeamQuota
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.queue import NEVER_PREFIX, reason_for_reader
from rlstudio.runs.services.admission import HELD_BACK_REASON, queue_admit_jobs
from rlstudio.sweeps.models import Sweep
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db
S = RunStatus
TEAM_SAYS = "your team nlp's quota allows at most 2 GPUs at a time"


@pytest.fixture(autouse=True)
def no_ray(settings):
    settings.RAY_ADDRESS = None


@pytest.fixture
def nlp(alice, bob):
    """Team "nlp" (alice, bob) sharing 2 GPUs at once; each member's own quota allows 8."""
    for user in (alice, bob):
        GpuQuota.objects.create(user=user, max_gpus=8, gpu_hours_per_month=1000, max_concurrent_runs=5)
    team = Group.objects.create(name="nlp")
    team.user_set.set([alice, bob])
    TeamQuota.objects.create(team=team, max_gpus=2, gpu_hours_per_month=1000)
    return team


@pytest.fixture
def ready(alice, make_dataset, make_model):
    return {"dataset": make_dataset(alice, status="ready"), "model": make_model(alice)}


def _error(resp, field="gpus") -> str:
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    return resp.json()["error"]["message"]


def _launch(ready, **extra):
    return {"name": "big", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke", **extra}


def test_a_launch_over_a_teams_max_gpus_is_a_400_on_gpus_naming_the_team(alice, ready, nlp):
    api = api_client(alice)
    message = _error(api.post("/api/v1/runs/", _launch(ready, gpus=3), format="json"))
    assert message == f"this run asks 3 GPUs; {TEAM_SAYS}"
    assert not Run.objects.exists()
    # The user's own max_gpus is named first when the launch is over both.
    GpuQuota.objects.filter(user=alice).update(max_gpus=1)
    message = _error(api.post("/api/v1/runs/", _launch(ready, gpus=3), format="json"))
    assert message == "this run asks 3 GPUs; your quota allows at most 1 at a time"
    # Within both (the team holds nothing now): accepted, queued (no Ray: no free GPUs).
    GpuQuota.objects.filter(user=alice).update(max_gpus=8)
    resp = api.post("/api/v1/runs/", _launch(ready, gpus=2), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.QUEUED, resp.content


def test_a_team_without_a_quota_or_of_someone_else_refuses_nothing(alice, bob, ready, nlp):
    TeamQuota.objects.filter(team=nlp).delete()
    Group.objects.create(name="vision").user_set.set([bob])
    TeamQuota.objects.create(team=Group.objects.get(name="vision"), max_gpus=0, gpu_hours_per_month=0)
    resp = api_client(alice).post("/api/v1/runs/", _launch(ready, gpus=3), format="json")
    assert resp.status_code == 201, resp.content


def test_the_run_form_and_its_preview_put_the_team_refusal_on_gpus(alice, ready, nlp):
    page = Client()
    page.force_login(alice)
    form = {"name": "f1", "dataset": ready["dataset"].pk, "preset": "cpu_smoke", "gpus": 3,
            "model": ready["model"].pk}
    resp = page.post("/runs/new/", form)
    assert resp.status_code == 400
    assert any(TEAM_SAYS in e for e in resp.context["form"].errors["gpus"])
    assert not Run.objects.exists()
    errors = page.post("/runs/new/preview/", form).json()["errors"]
    assert {"field": "gpus", "message": f"this run asks 3 GPUs; {TEAM_SAYS}", "form_field": "gpus"} in errors


def _finished_on(run, gpus):
    """`run` failed on `gpus` GPUs, its step 2 checkpoint committed (a resume has steps left)."""
    from django.conf import settings

    Run.objects.filter(pk=run.pk).update(status=S.FAILED, gpus=gpus)
    (Path(settings.RUNS_DIR) / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("2")
    run.refresh_from_db()
    return run


def test_clone_resume_and_fork_over_a_team_quota_lowered_since_are_refused(alice, staff, nlp, run_with_ckpts):
    run = _finished_on(run_with_ckpts, 3)  # launched on 3; the team's quota is 2 now
    for action, body in (("clone", {}), ("resume", {}), ("fork", {"step": 1})):
        message = _error(api_client(alice).post(f"/api/v1/runs/{run.pk}/{action}/", body, format="json"))
        assert message == f"this run asks 3 GPUs; {TEAM_SAYS} (a {action} asks as many GPUs as the run it comes from)"
        # Staff acting on alice's run read her team's quota as its owner's.
        message = _error(api_client(staff).post(f"/api/v1/runs/{run.pk}/{action}/", body, format="json"))
        assert message.startswith("this run asks 3 GPUs; its owner's team nlp's quota allows at most 2 GPUs at a time")
    assert Run.objects.count() == 1


def test_a_sweep_over_a_teams_max_gpus_is_refused_whole(alice, ready, nlp):
    body = {**_launch(ready, gpus=3, name="sw"), "axes": [{"key": "actor_rollout_ref.rollout.n", "values": [2, 4]}]}
    message = _error(api_client(alice).post("/api/v1/sweeps/", body, format="json"))
    assert TEAM_SAYS in message
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_evaluations_over_a_teams_max_gpus_are_refused(alice, nlp, run_with_ckpts, make_dataset):
    data = make_dataset(alice, "eval-data", status="ready")
    model = ModelAsset.objects.create(owner=alice, name="alice-base", path="/models/x", tokenizer_ok=True)
    api = api_client(alice)
    TeamQuota.objects.filter(team=nlp).update(max_gpus=0)  # an evaluation asks 1 GPU at most
    body = {"dataset": data.pk, "k": 1, "gpus": 1}
    says = "this evaluation asks 1 GPU; your team nlp's quota allows at most 0 GPUs at a time"
    assert _error(api.post(f"/api/v1/models/{model.pk}/evaluations/", body, format="json")) == says
    assert _error(api.post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", {**body, "checkpoints": [1]},
                           format="json")) == says
    assert not Evaluation.objects.exists()


def test_a_team_quota_lowered_after_the_launch_leaves_it_queued_saying_so(alice, make_user, nlp, make_run,
                                                                          monkeypatch):
    """Behind a GPU job that waits for the cluster, the run now over its team's max_gpus still gets the
    reason that names the team (not the held-back one), and its owner's later CPU run does not wait for it."""
    carol = make_user("carol")  # in no team
    GpuQuota.objects.create(user=carol, max_gpus=8, gpu_hours_per_month=1000, max_concurrent_runs=5)
    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", lambda *, needed: 1.0)
    first = make_run(carol, "first", gpus=2)  # queued first, waits for the cluster's GPUs: holds GPU jobs back
    huge = make_run(alice, "huge", gpus=2)
    TeamQuota.objects.filter(team=nlp).update(max_gpus=1)  # lowered while it waits
    later = make_run(alice, "later", gpus=0)
    queue_admit_jobs()
    first.refresh_from_db(), huge.refresh_from_db(), later.refresh_from_db()
    assert first.status == S.QUEUED and first.queue_reason == "the cluster has 1 free GPUs and this run needs 2"
    assert huge.status == S.QUEUED and huge.queue_reason != HELD_BACK_REASON
    assert huge.queue_reason == (f"{NEVER_PREFIX}this run asks 2 GPUs; your team nlp's quota allows at most 1 GPU "
                                 "at a time. Stop it (your later jobs do not wait for it) or ask an admin to raise "
                                 "your team's quota")
    assert later.status == S.SUBMITTING, later.queue_reason
    assert reason_for_reader(huge.queue_reason) == (
        f"{NEVER_PREFIX}it asks more GPUs than a team quota of its owner's allows at a time")
