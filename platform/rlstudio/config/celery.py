"""The Celery app of RL Studio (broker and results on REDIS_URL, JSON only, late acks).

Run a worker: `celery -A rlstudio worker -l info` (beat: `celery -A rlstudio beat`).
Tasks live in each app's `tasks.py` and are found by autodiscovery.
"""
import os

from celery import Celery

# The worker is an entry point like manage.py: it needs a settings module before Django loads.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlstudio.config.settings.local")

app = Celery("rlstudio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
