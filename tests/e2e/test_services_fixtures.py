"""The shared service fixtures start real Ray, Celery and Daphne processes that answer."""
import json
import urllib.request
import pytest

@pytest.mark.django_db(transaction=True)
def test_services(celery_worker, asgi_server, ray_head):
    from rlstudio.config.celery import app
    assert app.control.ping(timeout=2)
    with urllib.request.urlopen(asgi_server + "/healthz") as r:
        body = json.load(r)
    assert body["db"] == "ok"
    with urllib.request.urlopen(ray_head + "/api/jobs/") as r:
        assert r.status == 200
