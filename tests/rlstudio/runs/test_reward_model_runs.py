"""A run with a reward model: chosen by reward_model_id among the catalog models the user may see (own or
shared) and only of kind reward; the platform writes its path (users cannot); the run records it, and
its spec, its clone and the new-run form carry it."""
import pytest
from django.test import Client

from rlstudio.catalog.models import ModelAsset
from rlstudio.runs.launch import freeze_spec
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db


def _body(ready, **extra):
    """A launch's body: the preset cpu_smoke unless `extra` gives the config another way (two: a 400)."""
    preset = {} if {"config", "config_id"} & set(extra) else {"preset": "cpu_smoke"}
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, **preset, **extra}


@pytest.fixture
def rm(alice, make_model):
    return make_model(alice, name="alices-rm", kind=ModelAsset.Kind.REWARD)


def test_own_reward_model_is_written_by_the_platform(api, ready, rm, tmp_path):
    resp = api.post("/api/v1/runs/", _body(ready, reward_model_id=rm.pk,
                                           overrides={"reward_model.rule_weight": 0.0}), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["reward_model"] == rm.pk
    section = body["config"]["reward_model"]
    assert section["enable"] is True and section["model"]["path"] == rm.path and section["rule_weight"] == 0.0
    run = Run.objects.get(pk=body["id"])
    assert run.reward_model == rm
    spec = freeze_spec(run=run, out_dir=tmp_path / str(run.pk))
    assert spec["reward_model"]["model"]["path"] == rm.path and spec["reward_model"]["enable"] is True
    clone = api.post(f"/api/v1/runs/{run.pk}/clone/", {"name": "c"}, format="json")
    assert clone.status_code == 201, clone.content
    assert clone.json()["reward_model"] == rm.pk and clone.json()["config"]["reward_model"]["model"]["path"] == rm.path


def test_another_users_private_reward_model_is_refused_a_shared_one_allowed(api, ready, bob, make_model):
    theirs = make_model(bob, name="bobs-rm", kind=ModelAsset.Kind.REWARD)
    resp = api.post("/api/v1/runs/", _body(ready, reward_model_id=theirs.pk), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "reward_model_id", resp.content
    assert "bobs-rm" not in resp.content.decode() and Run.objects.count() == 0
    theirs.visibility = ModelAsset.Visibility.EVERYONE
    theirs.save()
    resp = api.post("/api/v1/runs/", _body(ready, reward_model_id=theirs.pk), format="json")
    assert resp.status_code == 201, resp.content


@pytest.mark.parametrize("extra,field,words", [
    ({"overrides": {"reward_model.model.path": "/srv/other-user/rm"}}, "reward_model.model.path", "set by the platform"),
    ({"overrides": {"reward_model.model.trust_remote_code": True}}, "reward_model.model.trust_remote_code",
     "set by the platform"),
    ({"overrides": {"reward_model.enable": True}}, "reward_model_id", "needs a reward model"),
    ({"config": {"reward_model": {"enable": True, "model": {"path": "/etc"}}}}, "reward_model.model.path",
     "set by the platform"),
])
def test_users_cannot_name_a_reward_model_path(api, ready, extra, field, words):
    resp = api.post("/api/v1/runs/", _body(ready, **extra), format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["field"] == field and words in err["message"], err
    assert Run.objects.count() == 0


def test_kinds_are_not_interchangeable(api, ready, rm):
    resp = api.post("/api/v1/runs/", _body(ready, reward_model_id=ready["model"].pk), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "reward_model_id", resp.content
    resp = api.post("/api/v1/runs/", {**_body(ready), "model": rm.pk}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "model", resp.content
    assert Run.objects.count() == 0


def test_a_reward_model_in_use_cannot_be_deleted(api, ready, rm):
    assert api.post("/api/v1/runs/", _body(ready, reward_model_id=rm.pk), format="json").status_code == 201
    resp = api.delete(f"/api/v1/models/{rm.pk}/")
    assert resp.status_code == 409 and "r1" in resp.json()["error"]["message"], resp.content


def test_the_form_offers_reward_models_for_the_reward_model_only(alice, ready, rm):
    web = Client()
    web.force_login(alice)
    page = web.get("/runs/new/").content.decode()
    model_select = page.split('name="model"', 1)[1].split("</select>", 1)[0]
    rm_select = page.split('name="reward_model"', 1)[1].split("</select>", 1)[0]
    assert "alices-rm" in rm_select and "alices-rm" not in model_select
    assert ready["model"].name in model_select and ready["model"].name not in rm_select
    resp = web.post("/runs/new/", {"name": "via-form", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                   "reward_model": rm.pk, "preset": "cpu_smoke", "gpus": 0})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert Run.objects.get(name="via-form").reward_model == rm


def test_the_run_page_names_the_reward_model_and_its_weights(alice, api, ready, rm):
    run_id = api.post("/api/v1/runs/", _body(ready, reward_model_id=rm.pk,
                                             overrides={"reward_model.rm_weight": 2.5}), format="json").json()["id"]
    web = Client()
    web.force_login(alice)
    page = web.get(f"/runs/{run_id}/").content.decode()
    assert "Reward model" in page and "alices-rm" in page and "reward model × 2.5" in page
