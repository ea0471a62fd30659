"""GET /healthz: is the database, Redis and Ray reachable? (no authentication)

200 when the database and Redis answer, 503 when either does not; Ray is informational ("ok" or
"unavailable"): the web process asks Ray's dashboard over HTTP and never imports ray.
"""
import urllib.error
import urllib.request

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

TIMEOUT_S = 1.0


def check_db() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return "ok"
    except Exception:  # noqa: BLE001 - any failure means "not healthy", the kind does not matter here
        return "error"


def check_redis() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
        )
        try:
            return "ok" if client.ping() else "error"
        finally:
            client.close()
    except Exception:  # noqa: BLE001
        return "error"


def check_ray() -> str:
    if not settings.RAY_ADDRESS:
        return "unavailable"
    try:
        with urllib.request.urlopen(settings.RAY_DASHBOARD_URL + "/api/version", timeout=TIMEOUT_S) as resp:
            return "ok" if resp.status == 200 else "unavailable"
    except (urllib.error.URLError, OSError, ValueError):
        return "unavailable"


@never_cache
@require_GET
def healthz(request):
    body = {"db": check_db(), "redis": check_redis(), "ray": check_ray(), "version": settings.RLSTUDIO_VERSION}
    healthy = body["db"] == "ok" and body["redis"] == "ok"
    return JsonResponse(body, status=200 if healthy else 503)
