"""The Celery app of RL Studio (broker and results on REDIS_URL, JSON only, late acks).

Run a worker: `celery -A rlstudio worker -l info` (beat: `celery -A rlstudio beat`).
Tasks live in each app's `tasks.py` and are found by autodiscovery. The beat schedule below runs
the runs' reconcile every RLSTUDIO_RECONCILE_INTERVAL_S seconds (default 3), and every 30 s
re-sends the validation of datasets whose task never reached the queue, recovers the exports whose
worker died or whose task was lost, and fails the playground sessions no worker will end.
"""
import os

from celery import Celery

# The worker is an entry point like manage.py: it needs a settings module before Django loads.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlstudio.config.settings.local")

app = Celery("rlstudio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def publish(task_name: str, *args) -> Exception | None:
    """Send the task registered as `task_name` (e.g. "runs.submit_run") with `args`; return the
    broker's error instead of raising it.

    Tasks are found in the Celery app's registry (filled by autodiscovery of each app's tasks.py),
    so that services, which the tasks call, never import the task modules back.

    What publishing raises when the broker is unreachable: kombu wraps the transport's connection and
    timeout errors in OperationalError; a bare socket error can still escape from connection set-up.
    The Celery settings bound how long it tries (docs/runs.md), so a web request that publishes can
    answer normally and leave the work where a periodic task finds it again.
    """
    from kombu.exceptions import OperationalError

    if task_name not in app.tasks:
        app.loader.import_default_modules()  # autodiscovery (a worker does it at start; a web process here)
    task = app.tasks[task_name]
    try:
        task.delay(*args)
    except (OperationalError, OSError) as exc:
        return exc
    return None


@app.on_after_finalize.connect
def _beat_schedule(sender, **_kwargs):
    """Periodic tasks (read from settings once Django is configured)."""
    from django.conf import settings

    interval = float(getattr(settings, "RLSTUDIO_RECONCILE_INTERVAL_S", 3.0))
    sender.conf.beat_schedule = {
        **(sender.conf.beat_schedule or {}),
        "runs-reconcile": {
            "task": "runs.reconcile",
            # Expire stale copies: a reconcile queued behind a long task is useless once the next is due.
            "schedule": interval,
            "options": {"expires": max(interval * 2, 5.0)},
        },
        "catalog-resend-validations": {
            "task": "catalog.resend_validations",
            "schedule": 30.0,
            "options": {"expires": 30.0},
        },
        "exports-recover": {
            "task": "exports.recover",
            "schedule": 30.0,
            "options": {"expires": 30.0},
        },
        "playground-expire-stale": {
            "task": "playground.expire_stale",
            "schedule": 30.0,
            "options": {"expires": 30.0},
        },
    }
