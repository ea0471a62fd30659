"""Database constraints of the records: PostgreSQL refuses what the models forbid."""
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from rlstudio.catalog.models import Dataset
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run, RunConfig
from rlstudio.telemetry.models import MemoryPoint, MetricRow, RunEvent, Sample

pytestmark = pytest.mark.django_db


def _refused(fn):
    with pytest.raises(IntegrityError), transaction.atomic():
        fn()


def test_run_status_must_be_a_known_state(make_run, alice):
    run = make_run(alice)
    _refused(lambda: Run.objects.filter(pk=run.pk).update(status="exploded"))
    run.refresh_from_db()
    assert run.status == "queued"


def test_run_gpus_cannot_be_negative(make_run, alice):
    run = make_run(alice)
    _refused(lambda: Run.objects.filter(pk=run.pk).update(gpus=-1))


def test_duplicate_submission_id_refused(make_run, alice):
    a, b = make_run(alice, "a"), make_run(alice, "b")
    Run.objects.filter(pk=a.pk).update(ray_submission_id="rlstudio-run-1")
    _refused(lambda: Run.objects.filter(pk=b.pk).update(ray_submission_id="rlstudio-run-1"))
    # Many runs without a submission id are fine (NULLs are distinct).
    assert Run.objects.filter(ray_submission_id__isnull=True).count() == 1


def test_dataset_status_checked(make_dataset, alice):
    ds = make_dataset(alice)
    _refused(lambda: Dataset.objects.filter(pk=ds.pk).update(status="maybe"))
    _refused(lambda: Dataset.objects.filter(pk=ds.pk).update(preset="alpaca"))


def test_negative_quotas_refused(alice):
    _refused(lambda: GpuQuota.objects.create(user=alice, max_gpus=-1))
    _refused(lambda: GpuQuota.objects.create(user=alice, gpu_hours_per_month=-0.5))
    _refused(lambda: GpuQuota.objects.create(user=alice, max_concurrent_runs=-2))
    assert GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0).pk


def test_one_default_quota_and_default_means_no_user(alice):
    assert GpuQuota.objects.filter(is_default=True).count() == 1  # made by the data migration
    _refused(lambda: GpuQuota.objects.create(is_default=True))
    _refused(lambda: GpuQuota.objects.create(user=alice, is_default=True))
    _refused(lambda: GpuQuota.objects.create(user=None, is_default=False))


def test_duplicate_seq_refused_for_every_stream(make_run, alice):
    run = make_run(alice)
    other = make_run(alice, "other")
    now = timezone.now()
    RunEvent.objects.create(run=run, seq=1, type="metrics", time=now, data={})
    _refused(lambda: RunEvent.objects.create(run=run, seq=1, type="log", time=now, data={}))
    RunEvent.objects.create(run=other, seq=1, type="metrics", time=now, data={})  # other run: fine
    Sample.objects.create(run=run, seq=1, step=1, uid="p0", index=0)
    _refused(lambda: Sample.objects.create(run=run, seq=1, step=1, uid="p0", index=1))
    MemoryPoint.objects.create(run=run, seq=1, time=now)
    _refused(lambda: MemoryPoint.objects.create(run=run, seq=1, time=now))
    MetricRow.objects.create(run=run, step=1, time=now, metrics={})
    _refused(lambda: MetricRow.objects.create(run=run, step=1, time=now, metrics={}))


def test_run_config_name_unique_per_owner(alice, bob):
    RunConfig.objects.create(owner=alice, name="base", config={})
    RunConfig.objects.create(owner=bob, name="base", config={})
    _refused(lambda: RunConfig.objects.create(owner=alice, name="base", config={}))


def test_dataset_in_use_is_protected(make_run, alice):
    from django.db.models import ProtectedError

    run = make_run(alice)
    with pytest.raises(ProtectedError):
        run.dataset.delete()
