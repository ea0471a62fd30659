"""Deleting a sweep (the sweep, not its runs) and what it protects: a dataset or model a sweep names
is refused with a 409 saying so, never a 500, until the sweep is deleted."""
import pytest
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.runs.models import Run, RunStatus
from rlstudio.sweeps.models import Sweep, SweepRun
from rlstudio.sweeps.services import sweep_launch
from tests.rlstudio.conftest import api_client
from tests.rlstudio.sweeps.conftest import N

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(alice, inputs):
    return sweep_launch(owner=alice, name="grid", inputs=inputs, axes=[{"key": N, "values": [2, 4]}])


def _run_ids(sweep):
    return list(Run.objects.filter(sweep_run__sweep=sweep).order_by("pk").values_list("pk", flat=True))


def test_a_sweep_with_live_runs_is_refused_then_deleted_and_its_runs_stay(alice, sweep):
    api, ids = api_client(alice), _run_ids(sweep)
    Run.objects.filter(pk__in=ids).update(status=RunStatus.RUNNING)
    refused = api.delete(f"/api/v1/sweeps/{sweep.pk}/")
    assert refused.status_code == 409 and "2 run(s) that have not ended: stop them first" in refused.json()["error"]["message"]
    assert Sweep.objects.filter(pk=sweep.pk).exists()
    Run.objects.filter(pk__in=ids).update(status=RunStatus.SUCCEEDED)
    assert api.delete(f"/api/v1/sweeps/{sweep.pk}/").status_code == 204
    assert not Sweep.objects.filter(pk=sweep.pk).exists() and not SweepRun.objects.filter(run_id__in=ids).exists()
    assert _run_ids_left(ids) == ids  # the runs stay, with their sweep tag
    event = AuditEvent.objects.get(action="sweep.delete")
    assert event.data == {"name": "grid", "runs": ids}
    assert api.get(f"/api/v1/sweeps/{sweep.pk}/").status_code == 404


def _run_ids_left(ids):
    return list(Run.objects.filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))


def test_only_its_owner_or_staff_may_delete_it(alice, bob, staff, sweep):
    Run.objects.filter(pk__in=_run_ids(sweep)).update(status=RunStatus.STOPPED)
    assert api_client(bob).delete(f"/api/v1/sweeps/{sweep.pk}/").status_code == 404
    assert Client().post(f"/sweeps/{sweep.pk}/delete/").status_code == 302  # to the login page
    assert Sweep.objects.filter(pk=sweep.pk).exists()
    assert api_client(staff).delete(f"/api/v1/sweeps/{sweep.pk}/").status_code == 204


def test_the_page_deletes_it_or_says_why_not(alice, sweep):
    c = Client()
    c.force_login(alice)
    ids = _run_ids(sweep)
    Run.objects.filter(pk__in=ids).update(status=RunStatus.SUCCEEDED)
    Run.objects.filter(pk=ids[0]).update(status=RunStatus.QUEUED)
    page = c.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'id="sweep-stop"' in page and 'id="sweep-delete"' not in page  # live: stop, not delete
    refused = c.post(f"/sweeps/{sweep.pk}/delete/", follow=True)
    assert "1 run(s) that have not ended: stop them first" in refused.content.decode()
    Run.objects.filter(pk__in=ids).update(status=RunStatus.FAILED)
    assert 'id="sweep-delete"' in c.get(f"/sweeps/{sweep.pk}/").content.decode()
    done = c.post(f"/sweeps/{sweep.pk}/delete/", follow=True)
    assert done.redirect_chain[-1][0] == "/sweeps/" and "its 2 run(s) stay on the runs list" in done.content.decode()
    assert not Sweep.objects.filter(pk=sweep.pk).exists()


def test_a_dataset_or_model_a_sweep_holds_is_refused_with_409_until_the_sweep_goes(alice, ready, sweep):
    """Its runs deleted (nothing else uses the dataset and model), the sweep still names them: the
    deletion says so (it was a 500: the sweep's protected foreign keys) and deletes nothing."""
    api = api_client(alice)
    Run.objects.filter(pk__in=_run_ids(sweep)).delete()
    dataset, model = ready["dataset"], ready["model"]
    for url in (f"/api/v1/datasets/{dataset.pk}/", f"/api/v1/models/{model.pk}/"):
        resp = api.delete(url)
        assert resp.status_code == 409, (url, resp.content)
        assert "is used by 1 sweep(s): delete them first" in resp.json()["error"]["message"]
    c = Client()
    c.force_login(alice)
    page = c.post(f"/datasets/{dataset.pk}/delete/", follow=True)
    assert page.status_code == 200 and "is used by 1 sweep(s)" in page.content.decode()
    assert Dataset.objects.filter(pk=dataset.pk).exists() and ModelAsset.objects.filter(pk=model.pk).exists()
    assert not AuditEvent.objects.filter(action__in=("dataset.delete", "model.delete")).exists()  # rolled back
    assert api.delete(f"/api/v1/sweeps/{sweep.pk}/").status_code == 204
    assert api.delete(f"/api/v1/datasets/{dataset.pk}/").status_code == 204
    assert api.delete(f"/api/v1/models/{model.pk}/").status_code == 204
