"""The Celery app: configured from settings, real Redis broker, JSON only, late acks, never eager."""
import redis
from django.conf import settings

from rlstudio import celery_app


def test_celery_app_is_configured_from_settings():
    conf = celery_app.conf
    assert conf.broker_url == settings.REDIS_URL == conf.result_backend
    assert conf.task_acks_late is True
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.task_always_eager is False
    # The broker answers (the real Redis of the test machine).
    assert redis.Redis.from_url(conf.broker_url, socket_timeout=2).ping()
