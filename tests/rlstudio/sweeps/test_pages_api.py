"""The sweeps pages and API: owner and staff only (404 for anyone else, even a reader of its runs),
the table with the best run, stop all, the form's refusals on their fields, a hostile name escaped."""
import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_share
from rlstudio.sweeps.models import Sweep
from rlstudio.sweeps.services import sweep_launch
from rlstudio.telemetry.models import MetricRow
from tests.rlstudio.conftest import api_client
from tests.rlstudio.sweeps.conftest import LR, N

pytestmark = pytest.mark.django_db
HOSTILE = '<img src=x onerror=alert(1)>"sw'


def _client(user):
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def sweep(alice, inputs):
    return sweep_launch(owner=alice, name=HOSTILE, inputs=inputs, axes=[{"key": N, "values": [2, 4]}])


def _runs(sweep):
    return [link.run for link in sweep.sweep_runs.select_related("run").order_by("index")]


def test_the_page_shows_every_run_escapes_the_name_and_marks_the_best(alice, sweep):
    first, second = _runs(sweep)
    now = timezone.now()
    val = "val-core/openai/gsm8k/reward/mean@1"
    MetricRow.objects.create(run=first, step=1, time=now, metrics={"critic/score/mean": 0.9, val: 0.2})
    MetricRow.objects.create(run=second, step=1, time=now, metrics={"critic/score/mean": 0.1, val: 0.6})
    page = _client(alice).get(f"/sweeps/{sweep.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert HOSTILE not in html and "&lt;img src=x onerror=alert(1)&gt;&quot;sw" in html
    for run in (first, second):
        assert f'data-run-id="{run.pk}"' in html and f"/runs/{run.pk}/" in html
    assert f"?ids={first.pk},{second.pk}" in html  # compare these runs
    assert 'id="sweep-stop"' in html
    best = html[html.index('id="sweep-best"') - 60:]
    assert f'data-run-id="{second.pk}"' in best[:80]  # the held-out metric is the default choice
    assert f"best {val}</th>" in html  # the held-out metric's column
    by_reward = _client(alice).get(f"/sweeps/{sweep.pk}/?metric=reward").content.decode()
    assert f'data-run-id="{first.pk}" class="best"' in by_reward
    assert by_reward.count("Latest reward") == 1 and "latest reward (critic/score/mean)</th>" not in by_reward  # once
    # a tie at the top names no best run
    MetricRow.objects.filter(run=second).update(metrics={"critic/score/mean": 0.9, val: 0.6})
    tied = _client(alice).get(f"/sweeps/{sweep.pk}/?metric=reward").content.decode()
    assert 'id="sweep-best"' not in tied and 'class="badge">best' not in tied


def test_others_get_404_even_when_a_run_is_shared_with_them(alice, bob, staff, sweep):
    run_share(run=_runs(sweep)[0], by=alice, users=["bob"])
    assert _client(bob).get(f"/runs/{_runs(sweep)[0].pk}/").status_code == 200  # bob reads the run…
    assert _client(bob).get(f"/sweeps/{sweep.pk}/").status_code == 404  # …not the sweep
    assert _client(bob).post(f"/sweeps/{sweep.pk}/stop/").status_code == 404
    assert 'id="run-sweep"' not in _client(bob).get(f"/runs/{_runs(sweep)[0].pk}/").content.decode()
    assert api_client(bob).get(f"/api/v1/sweeps/{sweep.pk}/").status_code == 404
    assert api_client(bob).get("/api/v1/sweeps/").json()["count"] == 0
    assert _client(staff).get(f"/sweeps/{sweep.pk}/").status_code == 200
    assert Client().get(f"/sweeps/{sweep.pk}/").status_code == 302  # to the login page


def test_the_run_page_says_part_of_sweep_for_its_owner(alice, sweep):
    html = _client(alice).get(f"/runs/{_runs(sweep)[1].pk}/").content.decode()
    assert 'id="run-sweep"' in html and f"/sweeps/{sweep.pk}/" in html and HOSTILE not in html


def test_the_list_is_paged_and_narrowed(alice, bob, sweep, settings):
    html = _client(alice).get("/sweeps/").content.decode()
    assert f"/sweeps/{sweep.pk}/" in html and HOSTILE not in html
    assert f"/sweeps/{sweep.pk}/" not in _client(bob).get("/sweeps/").content.decode()


def test_stop_all_from_the_page(alice, inputs):
    Run.objects.all().delete()
    sweep = sweep_launch(owner=alice, name="s", inputs=inputs, axes=[{"key": N, "values": [2, 4]}])
    Run.objects.filter(sweep_run__sweep=sweep).update(status=RunStatus.QUEUED)
    resp = _client(alice).post(f"/sweeps/{sweep.pk}/stop/")
    assert resp.status_code == 302
    assert set(Run.objects.filter(sweep_run__sweep=sweep).values_list("status", flat=True)) == {RunStatus.STOPPED}


def test_the_form_launches_a_sweep(alice, ready):
    data = {"name": "form-sweep", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "axis_key_1": LR, "axis_values_1": "1e-6, 3e-6", "axis_key_2": N, "axis_values_2": "2,4"}
    resp = _client(alice).post("/sweeps/new/", data)
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    sweep = Sweep.objects.get(name="form-sweep")
    assert resp["Location"] == f"/sweeps/{sweep.pk}/"
    assert sweep.axes == [{"key": LR, "values": [1e-6, 3e-6]}, {"key": N, "values": [2, 4]}]
    assert sweep.sweep_runs.count() == 4


def test_the_form_gives_each_run_its_sample_retention(alice, ready):
    from rlstudio.telemetry.models import RunRetention

    data = {"name": "kept", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "axis_key_1": N, "axis_values_1": "2,4", "retention_mode": "per_step", "retention_k": "3"}
    form = _client(alice).get("/sweeps/new/").content.decode()
    assert 'id="sweep-retention"' in form and 'name="retention_k"' in form
    assert _client(alice).post("/sweeps/new/", data).status_code == 302
    runs = Run.objects.filter(sweep_run__sweep__name="kept")
    assert sorted(RunRetention.objects.filter(run__in=runs).values_list("mode", "k")) == [("per_step", 3)] * 2
    refused = _client(alice).post("/sweeps/new/", {**data, "name": "kept2", "retention_k": "0"})
    assert refused.status_code == 400 and not Sweep.objects.filter(name="kept2").exists()
    k_row = refused.content.decode().split('data-field="retention_k"', 1)[1].split("</p>", 1)[0]
    assert "greater than or equal to 1" in k_row  # said on its field


@pytest.mark.parametrize("extra,field,text", [
    ({"axis_values_2": "2, -1"}, "axis_values_2", "axes[1]"),
    ({"axis_values_2": "2,,4"}, "axis_values_2", "empty value"),
    ({"axis_key_2": ""}, "axis_key_2", "choose the key"),
])
def test_the_form_puts_a_refusal_on_its_axis_row(alice, ready, extra, field, text):
    data = {"name": "f", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "axis_key_1": LR, "axis_values_1": "1e-6", "axis_key_2": N, "axis_values_2": "2", **extra}
    resp = _client(alice).post("/sweeps/new/", data)
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert field in errors and text in " ".join(errors[field])
    assert Sweep.objects.count() == 0 and Run.objects.count() == 0


def _body(ready, **extra):
    return {"name": "api", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "axes": [{"key": N, "values": [2, 4]}], **extra}


def test_api_launch_detail_list_and_stop(alice, ready):
    api = api_client(alice)
    resp = api.post("/api/v1/sweeps/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert [r["params"] for r in body["runs"]] == [{N: 2}, {N: 4}]
    assert {r["status"] for r in body["runs"]} <= {"queued", "submitting"}
    assert body["metric"] == "reward" and body["axes"] == [{"key": N, "values": [2, 4]}]
    detail = api.get(f"/api/v1/sweeps/{body['id']}/").json()
    assert [r["run"] for r in detail["runs"]] == [r["run"] for r in body["runs"]]
    assert "latest_metrics" in detail["runs"][0] and "latest_reward" in detail["runs"][0]
    listed = api.get("/api/v1/sweeps/").json()
    assert listed["count"] == 1 and listed["results"][0]["run_count"] == 2
    Run.objects.filter(pk__in=[r["run"] for r in body["runs"]]).update(status=RunStatus.QUEUED)
    stopped = api.post(f"/api/v1/sweeps/{body['id']}/stop/", {}, format="json")
    assert stopped.status_code == 200 and sorted(stopped.json()["stopped"]) == sorted(r["run"] for r in body["runs"])


@pytest.mark.parametrize("extra,field", [
    ({"axes": [{"key": "trainer.default_local_dir", "values": ["/etc"]}]}, "axes[0].key"),
    ({"axes": [{"key": N, "values": [2, 0]}]}, "axes[0]"),
    ({"axes": "n=2"}, "axes"),
    ({"overrides": {"data.train_files": "/etc/passwd"}}, "data.train_files"),
    ({"name": ""}, "name"),
    ({"dataset": 99999}, "dataset"),
])
def test_api_refusals_name_the_field_and_leave_nothing(alice, ready, extra, field):
    resp = api_client(alice).post("/api/v1/sweeps/", _body(ready, **extra), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    assert Sweep.objects.count() == 0 and Run.objects.count() == 0
