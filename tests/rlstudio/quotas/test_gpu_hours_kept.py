"""A deleted run's GPU-hours stay in its owner's monthly budget (GpuHoursSpent, written by the quotas'
`on_run_delete` hook in the deletion's transaction): the quota API, the staff quota page, admission and
the alerts' monthly budget read the same figure after the deletion as before it, to the float, in every
month the run spans; a CPU run keeps nothing; users cannot reach the rows (no API; read-only admin).
So do an evaluation's, deleted on its own or with its catalog model (the evaluations' and the
catalog's delete hooks); a CPU evaluation keeps nothing."""
from datetime import datetime, timedelta, timezone as dt_tz

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.alerts.selectors import month_budget
from rlstudio.catalog.services.model_assets import model_delete
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.evaluations.services import evaluation_delete
from rlstudio.quotas.models import GpuHoursSpent, GpuQuota
from rlstudio.quotas.selectors import month_gpu_hours, month_start, quota_admin_overview, quota_usage_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_admit, run_delete, run_share

pytestmark = pytest.mark.django_db
S = RunStatus


@pytest.fixture
def no_ray(settings):
    settings.RAY_ADDRESS = None


@pytest.fixture
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = str(tmp_path / "runs")
    return tmp_path / "runs"


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def _held(run, *, gpus, started, finished, status=S.SUCCEEDED):
    Run.objects.filter(pk=run.pk).update(status=status, gpus=gpus, started=started, finished=finished)
    run.refresh_from_db()
    return run


def _figures(user, now) -> tuple:
    """Every place that shows or checks the user's GPU-hours this month."""
    row = next(u for u in quota_admin_overview(now=now).users if u.user_id == user.pk)
    return (month_gpu_hours(user=user, now=now), quota_usage_for(user=user, now=now).gpu_hours_this_month,
            row.gpu_hours_this_month, month_budget(user=user, now=now).used)


def test_deleting_a_gpu_run_this_month_keeps_its_hours_in_every_figure(alice, make_run, runs_dir, no_ray):
    now = timezone.now()
    # Seconds-long runs on many GPUs lie in this month at any hour of it; odd figures test float sums.
    other = _held(make_run(alice, "other"), gpus=7, started=now - timedelta(seconds=3.3), finished=now)
    gone = _held(make_run(alice, "gone"), gpus=1333, started=now - timedelta(seconds=9.7),
                 finished=now - timedelta(seconds=0.1))
    before = _figures(alice, now)
    assert before[0] > 3.5 and before[1] == round(before[0], 6)
    resp = _api(alice).delete(f"/api/v1/runs/{gone.pk}/")
    assert resp.status_code == 204, resp.content
    assert not Run.objects.filter(pk=gone.pk).exists() and Run.objects.filter(pk=other.pk).exists()
    assert _figures(alice, now) == before
    assert _figures(alice, timezone.now()) == before  # later in the month: the same (both runs finished)
    assert _api(alice).get("/api/v1/quota/").json()["gpu_hours_this_month"] == before[1]
    kept = GpuHoursSpent.objects.get(user=alice)
    assert kept.month == month_start(now).date() and f"run #{gone.pk}" in kept.job
    assert kept.gpu_microseconds == 1333 * 9_600_000


def test_a_user_at_their_budget_stays_at_it_after_deleting_the_run_that_used_it(alice, make_run, runs_dir, no_ray):
    GpuQuota.objects.create(user=alice, max_gpus=4, gpu_hours_per_month=10, max_concurrent_runs=3)
    now = timezone.now()
    spent = _held(make_run(alice, "spent"), gpus=3960, started=now - timedelta(seconds=10), finished=now)
    waiting = make_run(alice, "waiting", gpus=1)
    assert run_admit(run=waiting, by=alice) is False
    reason = Run.objects.get(pk=waiting.pk).queue_reason
    assert reason.startswith("you used 11.0 of your 10 GPU-hours this month")
    run_delete(run=spent, by=alice)
    assert run_admit(run=waiting, by=alice) is False
    waiting.refresh_from_db()
    assert waiting.status == S.QUEUED and waiting.queue_reason == reason
    usage = _api(alice).get("/api/v1/quota/").json()
    assert usage["gpu_hours_this_month"] == pytest.approx(11.0) and usage["queued"][0]["reason"] == reason


def test_a_run_across_the_month_boundary_leaves_each_months_figure_unchanged(alice, make_run, runs_dir, no_ray):
    now = timezone.now()
    this_month = month_start(now)
    last_month = month_start(this_month - timedelta(days=1))
    started = this_month - timedelta(hours=5, microseconds=3)
    finished = this_month + (now - this_month) / 3
    run = _held(make_run(alice, "across"), gpus=3, started=started, finished=finished)
    _held(make_run(alice, "stays"), gpus=2, started=this_month - timedelta(hours=1), finished=finished)
    before = (month_gpu_hours(user=alice, now=now, month=last_month), _figures(alice, now))
    assert before[0] == pytest.approx(3 * (5 + 1e-6 / 3600) + 2)
    run_delete(run=run, by=alice)
    assert (month_gpu_hours(user=alice, now=now, month=last_month), _figures(alice, now)) == before
    months = dict(GpuHoursSpent.objects.filter(user=alice).values_list("month", "gpu_microseconds"))
    assert months[last_month.date()] == 3 * (5 * 3600 * 10**6 + 3)
    assert set(months) == {last_month.date()} | ({this_month.date()} if finished > this_month else set())


def test_a_cpu_run_and_a_gpu_run_that_never_started_keep_nothing(alice, make_run, runs_dir):
    now = timezone.now()
    cpu = _held(make_run(alice, "cpu"), gpus=0, started=now - timedelta(hours=1), finished=now)
    never = _held(make_run(alice, "never"), gpus=2, started=None, finished=now, status=S.STOPPED)
    for run in (cpu, never):
        assert _api(alice).delete(f"/api/v1/runs/{run.pk}/").status_code == 204
    assert not GpuHoursSpent.objects.exists()


def test_the_runs_evaluations_hours_are_kept_for_their_own_owners(alice, bob, make_run, runs_dir):
    now = timezone.now()
    run = _held(make_run(alice, "evaluated"), gpus=0, started=now - timedelta(seconds=20), finished=now)
    run_share(run=run, by=alice, add=["bob"])
    Evaluation.objects.create(run=run, owner=bob, dataset=run.dataset, checkpoints=[2], k=1, max_prompts=3,
                              sampling={}, gpus=1, status=EvaluationStatus.SUCCEEDED,
                              started=now - timedelta(seconds=4), finished=now)
    before = (month_gpu_hours(user=alice, now=now), month_gpu_hours(user=bob, now=now))
    assert before == (0.0, 4 / 3600)
    run_delete(run=run, by=alice)
    assert (month_gpu_hours(user=alice, now=now), month_gpu_hours(user=bob, now=now)) == before
    assert list(GpuHoursSpent.objects.values_list("user", flat=True)) == [bob.pk]


def test_the_kept_hours_have_no_api_and_are_read_only_in_the_admin(alice, staff, make_run, runs_dir):
    now = timezone.now()
    run = _held(make_run(alice, "gone"), gpus=1, started=now - timedelta(seconds=5), finished=now)
    run_delete(run=run, by=alice)
    kept = GpuHoursSpent.objects.get()
    schema = _api(alice).get("/api/v1/schema/", HTTP_ACCEPT="application/json").content.decode().lower()
    assert "gpuhoursspent" not in schema and "gpu_microseconds" not in schema
    admin = Client()
    admin.force_login(staff)
    base = "/admin/quotas/gpuhoursspent/"
    assert admin.get(base).status_code == 200 and "gone" in admin.get(base).content.decode()
    assert admin.get(f"{base}add/").status_code == 403
    assert admin.post(f"{base}{kept.pk}/change/", {"gpu_microseconds": 1}).status_code == 403
    assert admin.post(f"{base}{kept.pk}/delete/", {"post": "yes"}).status_code == 403
    kept.refresh_from_db()
    assert kept.gpu_microseconds == 5_000_000
    user = Client()
    user.force_login(alice)
    assert user.get(base).status_code == 302  # not staff: the admin's login page


def test_a_run_over_three_months_and_a_new_year_keeps_one_row_a_month(alice, make_run, runs_dir):
    now = timezone.now()
    started = datetime(2024, 11, 20, 7, 30, 0, 250, tzinfo=dt_tz.utc)
    finished = datetime(2025, 1, 10, 18, 0, tzinfo=dt_tz.utc)
    run = _held(make_run(alice, "long"), gpus=2, started=started, finished=finished, status=S.FAILED)
    months = [datetime(2024, 11, 1, tzinfo=dt_tz.utc), datetime(2024, 12, 1, tzinfo=dt_tz.utc),
              datetime(2025, 1, 1, tzinfo=dt_tz.utc), datetime(2025, 2, 1, tzinfo=dt_tz.utc)]
    before = [month_gpu_hours(user=alice, now=now, month=m) for m in months]
    assert before[1] == 2 * 31 * 24 and before[3] == 0.0
    run_delete(run=run, by=alice)
    assert [month_gpu_hours(user=alice, now=now, month=m) for m in months] == before
    kept = list(GpuHoursSpent.objects.order_by("month").values_list("month", "gpu_microseconds"))
    assert [m for m, _ in kept] == [m.date() for m in months[:3]]
    assert sum(us for _, us in kept) == 2 * ((finished - started) // timedelta(microseconds=1))



def _evaluation(owner, dataset, *, gpus, seconds, **subject):
    now = timezone.now()
    return Evaluation.objects.create(owner=owner, dataset=dataset, checkpoints=[2], k=1, max_prompts=3,
                                     sampling={}, gpus=gpus, status=EvaluationStatus.SUCCEEDED,
                                     started=now - timedelta(seconds=seconds), finished=now, **subject)


def test_deleting_a_gpu_evaluation_on_its_own_keeps_its_hours(alice, make_run, runs_dir, settings, tmp_path):
    settings.STATE_DIR = str(tmp_path)
    run = _held(make_run(alice, "evaluated"), gpus=0, started=timezone.now() - timedelta(seconds=20),
                finished=timezone.now())
    ev = _evaluation(alice, run.dataset, gpus=1, seconds=7.3, run=run)
    now = timezone.now()
    before = _figures(alice, now)
    assert before[0] == pytest.approx(7.3 / 3600)
    evaluation_delete(user=alice, ev=ev)
    assert not Evaluation.objects.filter(pk=ev.pk).exists()
    assert _figures(alice, now) == before
    kept = GpuHoursSpent.objects.get(user=alice)
    assert kept.gpu_microseconds == 7_300_000 and f"evaluation #{ev.pk} of run #{run.pk}" in kept.job


def test_deleting_a_model_keeps_its_gpu_evaluations_hours(alice, bob, make_dataset, make_model, settings, tmp_path):
    settings.STATE_DIR = str(tmp_path)
    model = make_model(alice, "evaluated-model", visibility="everyone")
    ev = _evaluation(bob, make_dataset(bob), gpus=1, seconds=11, model=model)
    now = timezone.now()
    before = (month_gpu_hours(user=alice, now=now), month_gpu_hours(user=bob, now=now))
    assert before == (0.0, pytest.approx(11 / 3600))
    model_delete(model=model, by=alice)
    assert not Evaluation.objects.filter(pk=ev.pk).exists()
    assert (month_gpu_hours(user=alice, now=now), month_gpu_hours(user=bob, now=now)) == before
    kept = GpuHoursSpent.objects.get()
    assert kept.user == bob and "evaluated-model" in kept.job


def test_deleting_a_cpu_evaluation_keeps_nothing(alice, make_dataset, make_model, runs_dir, settings, tmp_path):
    settings.STATE_DIR = str(tmp_path)
    model = make_model(alice, "cpu-model")
    data = make_dataset(alice)
    evaluation_delete(user=alice, ev=_evaluation(alice, data, gpus=0, seconds=30, model=model))
    _evaluation(alice, data, gpus=0, seconds=30, model=model)
    model_delete(model=model, by=alice)
    assert not Evaluation.objects.exists() and not GpuHoursSpent.objects.exists()
