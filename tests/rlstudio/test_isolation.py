"""Isolation: another user's objects answer 404 on every page and endpoint; staff see all. Datasets and
models shared with everyone (by staff) are the one exception: visible to all, read-only for non-owners."""
import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.runs.models import Run, RunConfig

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(alice, bob, staff, make_run):
    run = make_run(alice, "alice-run")
    config = RunConfig.objects.create(owner=alice, name="alice-config", config={"x": 1})
    return {"run": run, "dataset": run.dataset, "model": run.model, "config": config}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _detail_urls(world):
    return [
        f"/runs/{world['run'].pk}/",
        f"/datasets/{world['dataset'].pk}/",
        f"/api/v1/runs/{world['run'].pk}/",
        f"/api/v1/datasets/{world['dataset'].pk}/",
        f"/api/v1/configs/{world['config'].pk}/",
    ]


def test_owner_sees_their_objects(world, alice):
    client = _client(alice)
    for url in _detail_urls(world):
        assert client.get(url).status_code == 200, url
    for url in ["/api/v1/runs/", "/api/v1/datasets/", "/api/v1/models/", "/api/v1/configs/"]:
        assert client.get(url).json()["count"] == 1, url


def test_other_user_gets_404_and_empty_lists(world, bob):
    client = _client(bob)
    for url in _detail_urls(world):
        response = client.get(url)
        assert response.status_code == 404, url
        if url.startswith("/api/"):
            assert response.json()["error"]["code"] == "not_found"
    for url in ["/api/v1/runs/", "/api/v1/datasets/", "/api/v1/models/", "/api/v1/configs/"]:
        assert client.get(url).json() == {"count": 0, "results": []}, url
    for url, name in [("/runs/", "alice-run"), ("/datasets/", "alice-run-data"), ("/models/", "alice-run-model")]:
        page = client.get(url)
        assert page.status_code == 200 and name not in page.content.decode(), url


def test_staff_sees_everything(world, staff):
    client = _client(staff)
    for url in _detail_urls(world):
        assert client.get(url).status_code == 200, url
    for url in ["/api/v1/runs/", "/api/v1/datasets/", "/api/v1/models/", "/api/v1/configs/"]:
        assert client.get(url).json()["count"] == 1, url
    page = client.get("/runs/").content.decode()
    assert "alice-run" in page and ">alice<" in page  # the owner column is shown to staff


def test_pages_and_api_need_login(world):
    client = Client()
    for url in ["/", "/runs/", f"/runs/{world['run'].pk}/", "/datasets/", "/models/", "/accounts/profile/"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
    for url in ["/api/v1/runs/", "/api/v1/datasets/", "/api/v1/quota/", f"/api/v1/runs/{world['run'].pk}/"]:
        response = client.get(url)
        assert response.status_code == 401, url
        assert response.json()["error"]["code"] == "not_authenticated"


def test_a_private_dataset_or_model_is_never_reachable_by_id(alice, bob, make_dataset, make_model):
    """Not in a list, not by id, not as a run's dataset / val_dataset / model, not in the run form."""
    theirs = {"dataset": make_dataset(alice, "alice-ready", status="ready"), "model": make_model(alice, "alice-m")}
    mine = {"dataset": make_dataset(bob, "bob-ready", status="ready"), "model": make_model(bob, "bob-m")}
    api = APIClient()
    api.force_authenticate(bob)
    for kind, item in (("datasets", theirs["dataset"]), ("models", theirs["model"])):
        assert item.name not in {x["name"] for x in api.get(f"/api/v1/{kind}/").json()["results"]}
        for method in ("get", "patch", "delete"):
            assert getattr(api, method)(f"/api/v1/{kind}/{item.pk}/", {}, format="json").status_code == 404
    assert api.get(f"/api/v1/datasets/{theirs['dataset'].pk}/rows/").status_code == 404
    assert api.post(f"/api/v1/datasets/{theirs['dataset'].pk}/reward-check/", {}, format="json").status_code == 404
    for key, value in [("dataset", theirs["dataset"].pk), ("val_dataset", theirs["dataset"].pk),
                       ("model", theirs["model"].pk)]:
        body = {"name": "r", "dataset": mine["dataset"].pk, "model": mine["model"].pk, "preset": "cpu_smoke",
                key: value}
        resp = api.post("/api/v1/runs/", body, format="json")
        assert resp.status_code == 400, (key, resp.content)
        assert resp.json()["error"]["field"] in {key, "dataset"}, resp.json()  # val_dataset is named "dataset"
    assert not Run.objects.exists()
    page = _client(bob)
    assert page.get(f"/datasets/{theirs['dataset'].pk}/").status_code == 404
    assert page.post(f"/datasets/{theirs['dataset'].pk}/visibility/", {"visibility": "private"}).status_code == 404
    assert page.post(f"/models/{theirs['model'].pk}/delete/").status_code == 404
    form = page.get("/runs/new/").content.decode()
    assert "bob-ready" in form and "bob-m" in form
    assert "alice-ready" not in form and "alice-m" not in form


def test_a_shared_dataset_and_model_reach_every_user_read_only(world, bob, staff, make_dataset):
    from rlstudio.catalog.sharing import catalog_set_visibility

    shared = make_dataset(world["dataset"].owner, "alice-shared", status="ready")
    for item in (shared, world["model"]):
        catalog_set_visibility(item=item, by=staff, visibility="everyone")
    client = _client(bob)
    assert client.get("/api/v1/models/").json()["count"] == 1
    assert [d["name"] for d in client.get("/api/v1/datasets/").json()["results"]] == ["alice-shared"]
    assert client.get(f"/api/v1/models/{world['model'].pk}/").status_code == 200
    assert client.get(f"/datasets/{shared.pk}/").status_code == 200
    assert client.get(f"/api/v1/datasets/{world['dataset'].pk}/").status_code == 404  # still private
    assert client.delete(f"/api/v1/models/{world['model'].pk}/").status_code == 403
    assert client.get(f"/runs/{world['run'].pk}/").status_code == 404  # runs are never shared
    form = client.get("/runs/new/").content.decode()
    assert "alice-shared" in form and "alice-run-model" in form
