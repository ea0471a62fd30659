"""The sweep form says how many runs the user may still queue (every run of a sweep is queued at once
and a sweep of more is refused whole), and a refusal that names no field is not said to be "marked
below, on its field"."""
import pytest
from django.test import Client

from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run
from tests.rlstudio.sweeps.conftest import LR, N

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_the_form_says_the_room_left_in_the_queue(alice, make_run):
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0, max_queued_runs=5)
    body = _client(alice).get("/sweeps/new/").content.decode()
    assert 'data-room="5"' in body and "queues at most 5 runs (0 queued now)" in body
    assert 'data-max="16"' in body and "A sweep makes at most 16 runs" in body
    make_run(alice, "a"), make_run(alice, "b")
    assert Run.objects.filter(owner=alice, status="queued").count() == 2
    body = _client(alice).get("/sweeps/new/").content.decode()
    assert 'data-room="3"' in body and "(2 queued now), so a sweep of more than 3 runs is refused" in body
    assert "js/sweep_form.js" in body


def test_a_sweep_over_the_room_is_refused_with_the_reason_on_top(alice, ready):
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0, max_queued_runs=3)
    data = {"name": "too-big", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "axis_key_1": LR, "axis_values_1": "1e-6, 3e-6", "axis_key_2": N, "axis_values_2": "2,4"}
    resp = _client(alice).post("/sweeps/new/", data)
    assert resp.status_code == 400
    body = resp.content.decode()
    assert "max_queued_runs is 3" in body
    assert "Not launched (no run of the sweep was made):</p>" in body
    assert "marked below, on its field" not in body
    assert Run.objects.count() == 0


def test_a_field_refusal_still_points_below(alice, ready):
    data = {"name": "f", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "axis_key_1": LR, "axis_values_1": "1e-6,,3e-6"}
    body = _client(alice).post("/sweeps/new/", data).content.decode()
    assert "the problem is marked below, on its field." in body
