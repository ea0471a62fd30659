"""RL Studio's web package: Django apps, settings and the Celery app.

Importing the package loads the Celery app so that `@shared_task` functions bind to it
(the Celery worker runs as `celery -A rlstudio worker`).
"""
from .config.celery import app as celery_app

__version__ = "0.1.0"
__all__ = ["celery_app", "__version__"]
