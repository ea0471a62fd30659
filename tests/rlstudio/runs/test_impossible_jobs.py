"""A job that could never be admitted as it is: refused at launch (a 400 on `gpus`) when it asks more
GPUs than its owner's quota allows at once (max_gpus); one asking more than the cluster has in all now
(a GPU node restarting, an autoscaler yet to add one) is accepted and queued with a reason that says it
starts when GPUs join; and one queued that can never start as it is (the quota lowered, a GPU node gone,
or launched so) says waiting cannot help, is not tried, and holds neither its owner's later jobs nor
the cluster's queue back.

Real PostgreSQL, no Ray (RAY_ADDRESS unset unless a test stands the cluster's total in)."""
from datetime import datetime, timezone as dt_tz
from pathlib import Path

import pytest
from django.test import Client

from rlstudio.catalog.models import ModelAsset
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs import ray_jobs
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.queue import NEVER_PREFIX, Attempt, QueuedJob, admission_pass
from rlstudio.runs.services.admission import queue_admit_jobs
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db
S, E = RunStatus, EvaluationStatus


@pytest.fixture
def no_ray(settings):
    settings.RAY_ADDRESS = None


@pytest.fixture
def cluster(monkeypatch, no_ray):
    """The cluster's GPUs in all, as Ray's node summary would give them (`value`)."""
    class Cluster:
        value = 0.0

    monkeypatch.setattr(ray_jobs, "cluster_total_gpus", lambda: Cluster.value)
    return Cluster


def _quota(user, gpus=1, runs=2):
    GpuQuota.objects.update_or_create(user=user, defaults=dict(max_gpus=gpus, gpu_hours_per_month=100,
                                                               max_concurrent_runs=runs))


def _body(ready, **extra):
    return {"name": "huge", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            **extra}


def _error(resp, field="gpus") -> str:
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    return resp.json()["error"]["message"]


# ------------------------------------------------------------------ refused at launch


def test_a_run_over_the_quota_is_refused_and_the_next_cpu_run_is_not_held_back(alice, ready, no_ray):
    _quota(alice, gpus=1)
    api = api_client(alice)
    message = _error(api.post("/api/v1/runs/", _body(ready, gpus=1024), format="json"))
    assert message == "this run asks 1024 GPUs; your quota allows at most 1 at a time"
    assert not Run.objects.exists()
    resp = api.post("/api/v1/runs/", _body(ready, name="cpu", gpus=0), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.SUBMITTING, resp.content


CLUSTER_NEVER = ("It starts when GPUs join the cluster: stop it if none will (your later jobs do not wait for "
                 "it), or ask an admin to add GPUs to the cluster")


def test_a_run_over_the_clusters_total_is_queued_saying_so_and_holds_back_no_later_job(
        alice, bob, ready, cluster, make_run):
    _quota(alice, gpus=4)
    cluster.value = 0.0  # a CPU-only cluster, or its GPU node restarting
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=1), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.QUEUED, resp.content
    assert resp.json()["queue_reason"] == (f"{NEVER_PREFIX}this run asks 1 GPU; the cluster has 0 GPUs in all. "
                                           + CLUSTER_NEVER)
    # It holds no one back: alice's own later CPU run starts.
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, name="cpu", gpus=0), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.SUBMITTING, resp.content
    Run.objects.filter(owner=alice).update(status=S.STOPPED)
    cluster.value = 2.0
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=3), format="json")
    assert resp.status_code == 201 and resp.json()["queue_reason"].startswith(
        f"{NEVER_PREFIX}this run asks 3 GPUs; the cluster has 2 GPUs in all. It starts when GPUs join")
    Run.objects.filter(owner=alice).update(status=S.STOPPED)
    # 2 GPUs in all, both held by bob's run: alice's run on 2 waits for them, queued.
    _quota(bob, gpus=2)
    Run.objects.filter(pk=make_run(bob, "holder", gpus=2).pk).update(status=S.RUNNING)
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=2), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.QUEUED, resp.content
    assert resp.json()["queue_reason"] == "the cluster has 0 free GPUs and this run needs 2"


def test_when_ray_does_not_answer_a_run_within_the_quota_is_queued_not_refused(alice, ready, no_ray):
    _quota(alice, gpus=2)
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=2), format="json")
    assert resp.status_code == 201 and resp.json()["status"] == S.QUEUED, resp.content
    assert resp.json()["queue_reason"] == "the cluster has 0 free GPUs and this run needs 2"


def _finished_gpu_run(run, gpus=2):
    """`run_with_ckpts` failed (a resume has steps left) on `gpus` GPUs, its step 2 checkpoint committed."""
    from django.conf import settings

    Run.objects.filter(pk=run.pk).update(status=S.FAILED, gpus=gpus)
    (Path(settings.RUNS_DIR) / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("2")
    run.refresh_from_db()
    return run


def test_a_clone_or_resume_of_a_run_whose_quota_was_lowered_is_refused(alice, run_with_ckpts, no_ray):
    run = _finished_gpu_run(run_with_ckpts)
    _quota(alice, gpus=1)  # lowered since the run was launched on 2
    api = api_client(alice)
    for action, kind in (("clone", "clone"), ("resume", "resume")):
        message = _error(api.post(f"/api/v1/runs/{run.pk}/{action}/", {}, format="json"))
        assert message == (f"this run asks 2 GPUs; your quota allows at most 1 at a time (a {kind} asks as many "
                           "GPUs as the run it comes from)")
    assert Run.objects.count() == 1


def test_staff_cloning_or_resuming_another_users_run_read_its_owners_quota(alice, staff, run_with_ckpts, no_ray):
    run = _finished_gpu_run(run_with_ckpts)
    _quota(alice, gpus=1)
    _quota(staff, gpus=8)  # staff's own quota is not the one that applies: the new run is alice's
    for action in ("clone", "resume"):
        message = _error(api_client(staff).post(f"/api/v1/runs/{run.pk}/{action}/", {}, format="json"))
        assert message.startswith("this run asks 2 GPUs; its owner's quota allows at most 1 at a time")
    assert Run.objects.count() == 1


def test_a_clone_or_resume_on_a_cluster_too_small_is_queued_saying_so(alice, run_with_ckpts, cluster):
    run = _finished_gpu_run(run_with_ckpts)
    _quota(alice, gpus=2, runs=3)
    cluster.value = 1.0
    for action in ("clone", "resume"):
        resp = api_client(alice).post(f"/api/v1/runs/{run.pk}/{action}/", {}, format="json")
        assert resp.status_code == 201 and resp.json()["status"] == S.QUEUED, resp.content
        assert resp.json()["queue_reason"].startswith(
            f"{NEVER_PREFIX}this run asks 2 GPUs; the cluster has 1 GPU in all. It starts when GPUs join")


def test_evaluations_over_the_quota_are_refused_over_the_cluster_queued(alice, run_with_ckpts, make_dataset,
                                                                         make_model, cluster):
    data = make_dataset(alice, "eval-data", status="ready")
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    api = api_client(alice)
    _quota(alice, gpus=1)
    cluster.value = 0.0
    body = {"dataset": data.pk, "k": 1, "gpus": 1}
    resp = api.post(f"/api/v1/models/{model.pk}/evaluations/", body, format="json")
    assert resp.status_code == 202 and resp.json()["status"] == E.QUEUED, resp.content
    assert resp.json()["queue_reason"] == (f"{NEVER_PREFIX}this evaluation asks 1 GPU; the cluster has 0 GPUs in "
                                           "all. " + CLUSTER_NEVER)
    Evaluation.objects.update(status=E.STOPPED)
    _quota(alice, gpus=0)
    message = _error(api.post(f"/api/v1/models/{model.pk}/evaluations/", body, format="json"))
    assert message == "this evaluation asks 1 GPU; your quota allows at most 0 at a time"
    message = _error(api.post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", {**body, "checkpoints": [1]},
                              format="json"))
    assert message == "this evaluation asks 1 GPU; your quota allows at most 0 at a time"
    assert Evaluation.objects.count() == 1


def test_the_evaluation_of_another_users_run_is_checked_against_its_creators_quota(
        alice, staff, run_with_ckpts, make_dataset, no_ray):
    """The evaluation is staff's (their quota admits it), so staff's quota bounds its GPUs, not the run's owner's."""
    data = make_dataset(alice, "eval-data", status="ready")
    _quota(alice, gpus=1)
    _quota(staff, gpus=0)
    body = {"dataset": data.pk, "k": 1, "gpus": 1, "checkpoints": [1]}
    message = _error(api_client(staff).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", body, format="json"))
    assert message == "this evaluation asks 1 GPU; your quota allows at most 0 at a time"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", preset="smoke", seed=0)


def test_the_run_form_and_its_preview_show_the_refusal_on_gpus(alice, make_dataset, tiny_dir, no_ray):
    _quota(alice, gpus=1)
    page = Client()
    page.force_login(alice)
    form = {"name": "f1", "dataset": make_dataset(alice, status="ready").pk, "preset": "cpu_smoke", "gpus": 4,
            "model": ModelAsset.objects.create(owner=alice, name="tiny", path=str(tiny_dir)).pk}
    resp = page.post("/runs/new/", form)
    assert resp.status_code == 400
    assert "gpus" in resp.context["form"].errors
    assert any("this run asks 4 GPUs; your quota allows at most 1 at a time" in e
               for e in resp.context["form"].errors["gpus"])
    assert not Run.objects.exists()
    errors = page.post("/runs/new/preview/", form).json()["errors"]
    assert {"field": "gpus", "message": "this run asks 4 GPUs; your quota allows at most 1 at a time",
            "form_field": "gpus"} in errors
    assert not [e for e in page.post("/runs/new/preview/", {**form, "gpus": 1}).json()["errors"]
                if e["field"] == "gpus"]


# ------------------------------------------------------------------ already queued, now impossible


def test_a_queued_run_over_a_lowered_quota_says_so_and_holds_back_none_of_its_owners_later_jobs(
        alice, make_run, no_ray):
    _quota(alice, gpus=4)
    huge = make_run(alice, "huge", gpus=4)
    _quota(alice, gpus=1)  # an admin lowered the quota while it waited
    later = make_run(alice, "later", gpus=0)
    queue_admit_jobs()
    huge.refresh_from_db(), later.refresh_from_db()
    assert later.status == S.SUBMITTING
    assert huge.status == S.QUEUED
    assert huge.queue_reason == (f"{NEVER_PREFIX}this run asks 4 GPUs; your quota allows at most 1 at a time. "
                                 "Stop it (your later jobs do not wait for it) or ask an admin to raise your quota")
    # The quota raised again: it can start again, and its owner's later jobs wait behind it again.
    _quota(alice, gpus=4, runs=1)
    Run.objects.filter(pk=later.pk).update(status=S.SUCCEEDED)
    third = make_run(alice, "third", gpus=0)
    queue_admit_jobs()
    huge.refresh_from_db(), third.refresh_from_db()
    assert huge.queue_reason == "the cluster has 0 free GPUs and this run needs 4"
    assert third.status == S.QUEUED and f"earlier queued run #{huge.pk}" in third.queue_reason


def test_a_queued_run_bigger_than_the_cluster_holds_no_one_back(alice, bob, make_run, cluster, monkeypatch):
    _quota(alice, gpus=2)
    _quota(bob, gpus=2)
    cluster.value = 1.0  # a GPU node left: 1 GPU in all now
    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", lambda *, needed: 1.0)
    big = make_run(bob, "big", gpus=2)
    bobs_cpu = make_run(bob, "bobs-cpu", gpus=0)
    small = make_run(alice, "small", gpus=1)
    queue_admit_jobs()
    for run in (big, bobs_cpu, small):
        run.refresh_from_db()
    assert small.status == S.SUBMITTING and bobs_cpu.status == S.SUBMITTING
    assert big.status == S.QUEUED and big.queue_reason == (
        f"{NEVER_PREFIX}this run asks 2 GPUs; the cluster has 1 GPU in all. " + CLUSTER_NEVER)


def test_when_ray_does_not_answer_a_queued_gpu_run_waits_and_still_holds_its_owners_later_jobs(
        alice, make_run, no_ray):
    _quota(alice, gpus=2)
    gpu, cpu = make_run(alice, "gpu", gpus=2), make_run(alice, "cpu", gpus=0)
    queue_admit_jobs()
    gpu.refresh_from_db(), cpu.refresh_from_db()
    assert gpu.queue_reason == "the cluster has 0 free GPUs and this run needs 2"
    assert cpu.status == S.QUEUED and f"earlier queued run #{gpu.pk}" in cpu.queue_reason


def test_a_queued_evaluation_over_a_lowered_quota_holds_back_none_of_its_owners_later_runs(
        alice, make_run, make_dataset, make_model, no_ray):
    _quota(alice, gpus=1)
    ev = Evaluation.objects.create(owner=alice, model=make_model(alice, "m", tokenizer_ok=True), gpus=1, k=1,
                                   dataset=make_dataset(alice, "d", status="ready"), include_base=True,
                                   checkpoints=[], max_prompts=1, sampling={})
    _quota(alice, gpus=0)
    later = make_run(alice, "later", gpus=0)
    queue_admit_jobs()
    ev.refresh_from_db(), later.refresh_from_db()
    assert later.status == S.SUBMITTING
    assert ev.status == E.QUEUED and ev.queue_reason.startswith(
        f"{NEVER_PREFIX}this evaluation asks 1 GPU; your quota allows at most 0 at a time")


def test_the_pure_pass_neither_tries_nor_is_held_back_by_a_job_that_can_never_start():
    at = datetime(2026, 1, 1, tzinfo=dt_tz.utc)
    big = QueuedJob(kind="run", id=1, owner_id=1, gpus=8, queued_at=at)
    small = QueuedJob(kind="run", id=2, owner_id=2, gpus=1, queued_at=at.replace(minute=1))
    tried, held = [], []

    def try_admit(job, free):
        tried.append(job.id)
        return Attempt(admitted=free is not None and job.gpus <= free, reason="the cluster", cluster=True)

    admitted = admission_pass([small, big], free_gpus=lambda needed: 4.0, try_admit=try_admit,
                              held_back=lambda job, blocker: held.append(job.id),
                              never=lambda job, free: job.gpus > 4)
    assert admitted == [small] and tried == [2] and held == []
