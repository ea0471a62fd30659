"""The one-command launcher of RL Studio (`make run` = `python -m rlstudio.launcher`).

Owns starting, supervising and stopping every process of a local RL Studio: embedded PostgreSQL
and Redis (when DATABASE_URL / REDIS_URL are not set), a Ray head, a Celery worker and beat, and
the ASGI server. It never imports Django itself; Django-side setup runs in `bootstrap`, a child.
"""
