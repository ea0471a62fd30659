"""Values that are present but wrong are 400s naming their field, never read as "absent": the launch's
ids, overrides and config, two configs at once, a retention body that is not an object, unknown PATCH
fields of datasets and models, and job-log's download flag."""
import pytest

from rlstudio.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def _launch(ready, **extra):
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, **extra}


@pytest.mark.parametrize("extra,field", [
    ({"preset": "cpu_smoke", "overrides": 0}, "overrides"),
    ({"preset": "cpu_smoke", "overrides": ""}, "overrides"),
    ({"preset": "cpu_smoke", "overrides": "data.train_batch_size=4"}, "overrides"),
    ({"preset": "cpu_smoke", "config": {}}, "config"),
    ({"config": {}}, "config"),
    ({"config": [1]}, "config"),
    ({"preset": "cpu_smoke", "config": {"trainer": {"total_epochs": 1}}}, "config"),
    ({"preset": "cpu_smoke", "config_id": 1}, "config_id"),
    ({"preset": "cpu_smoke", "val_dataset": 0}, "val_dataset"),
    ({"preset": "cpu_smoke", "config_id": 0}, "config_id"),
    ({"preset": "cpu_smoke", "reward_model_id": 0}, "reward_model_id"),
    ({"preset": "cpu_smoke", "dataset": 0}, "dataset"),
])
def test_a_present_but_wrong_launch_field_is_a_400_naming_it(api, ready, extra, field):
    resp = api.post("/api/v1/runs/", _launch(ready, **extra), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field, resp.json()
    assert Run.objects.count() == 0


@pytest.mark.parametrize("extra", [
    {"preset": "cpu_smoke", "overrides": {}},
    {"preset": "cpu_smoke", "overrides": None, "val_dataset": None, "config_id": None, "reward_model_id": None},
    {"preset": "", "config": {"trainer": {"total_training_steps": 2}}},
    {"overrides": ["actor_rollout_ref.rollout.n=4"]},
])
def test_absent_spellings_and_one_config_still_launch(api, ready, extra):
    resp = api.post("/api/v1/runs/", _launch(ready, **extra), format="json")
    assert resp.status_code == 201, resp.content


def test_clone_overrides_of_the_wrong_type_are_a_400(api, alice, make_run):
    run = make_run(alice)
    resp = api.post(f"/api/v1/runs/{run.pk}/clone/", {"overrides": 0}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "overrides", resp.content


def test_retention_put_needs_an_object(api, alice, make_run):
    run = make_run(alice)
    assert api.put(f"/api/v1/runs/{run.pk}/retention/", {"mode": "every_kth_step", "k": 5},
                   format="json").status_code == 200
    for body in ([], [1], 0):
        resp = api.put(f"/api/v1/runs/{run.pk}/retention/", body, format="json")
        assert resp.status_code == 400, (body, resp.content)
        assert "must be an object" in resp.json()["error"]["message"]
    assert api.get(f"/api/v1/runs/{run.pk}/retention/").json() == {"mode": "every_kth_step", "k": 5}


@pytest.mark.parametrize("kind", ["datasets", "models"])
def test_catalog_patch_refuses_unknown_fields(api, alice, make_dataset, make_model, kind):
    item = make_dataset(alice) if kind == "datasets" else make_model(alice)
    resp = api.patch(f"/api/v1/{kind}/{item.pk}/", {"owner": "bob", "name": "renamed"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "owner", resp.content
    item.refresh_from_db()
    assert item.name != "renamed"  # nothing changed
    resp = api.patch(f"/api/v1/{kind}/{item.pk}/", {"name": "renamed"}, format="json")
    assert resp.status_code == 200 and resp.json()["name"] == "renamed"


def test_job_log_download_takes_the_usual_yes_and_no_and_refuses_others(api, alice, make_run):
    run = make_run(alice)
    for yes in ("1", "true", "yes", "on", "TRUE"):
        resp = api.get(f"/api/v1/runs/{run.pk}/job-log/?download={yes}")
        assert resp.status_code == 200 and resp["Content-Disposition"].startswith("attachment"), yes
        assert b"".join(resp.streaming_content if resp.streaming else [resp.content]) == b"[the run has no Ray job yet]\n"
    for no in ("0", "false", "no", "off", ""):
        resp = api.get(f"/api/v1/runs/{run.pk}/job-log/?download={no}")
        assert resp.status_code == 200 and "lines" in resp.json(), no
    resp = api.get(f"/api/v1/runs/{run.pk}/job-log/?download=maybe")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "download"


def test_stop_of_a_submitting_run_is_a_409(api, alice, make_run):
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUBMITTING)
    resp = api.post(f"/api/v1/runs/{run.pk}/stop/", {}, format="json")
    assert resp.status_code == 409 and "being submitted" in resp.json()["error"]["message"]
