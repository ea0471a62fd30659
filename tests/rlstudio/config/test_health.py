"""GET /healthz against the real PostgreSQL and Redis."""
import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def test_health_ok_without_auth():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"db": "ok", "redis": "ok", "ray": "unavailable", "version": "0.1.0"}


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_health_503_when_redis_is_down():
    response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["redis"] == "error" and response.json()["db"] == "ok"


@override_settings(RAY_ADDRESS="127.0.0.1:1", RAY_DASHBOARD_URL="http://127.0.0.1:1")
def test_ray_unreachable_is_unavailable_not_an_outage():
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json()["ray"] == "unavailable"
