"""Isolation: another user's objects answer 404 on every page and endpoint; staff see all."""
import pytest
from django.test import Client

from rlstudio.runs.models import RunConfig

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
