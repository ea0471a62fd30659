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


def test_validations_and_playground_sessions_go_to_their_queues_when_named():
    """RLSTUDIO_DATASETS_QUEUE / RLSTUDIO_PLAYGROUND_QUEUE (set by `make run`) route those tasks to the
    queues their own workers serve; every other task, and those two when unset, go to the default."""
    import json
    import os
    import subprocess
    import sys

    probe = ("import django; django.setup(); import json; from rlstudio import celery_app as a; "
             "r = a.amqp.router; print(json.dumps({n: r.route({}, n)['queue'].name for n in "
             "('catalog.validate_dataset', 'playground.run_session', 'runs.submit_run')}))")

    def routes(**queues):
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "rlstudio.config.settings.test", **queues}
        for key in ("RLSTUDIO_DATASETS_QUEUE", "RLSTUDIO_PLAYGROUND_QUEUE"):
            env.setdefault(key, "")
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    default = celery_app.conf.task_default_queue
    named = routes(RLSTUDIO_DATASETS_QUEUE="datasets", RLSTUDIO_PLAYGROUND_QUEUE="playground")
    assert named == {"catalog.validate_dataset": "datasets", "playground.run_session": "playground",
                     "runs.submit_run": default}
    assert set(routes().values()) == {default}
