"""Test settings: the real PostgreSQL and Redis, a fast password hasher, nothing faked.

DATABASE_URL defaults to the `postgres` database on 127.0.0.1 (pytest-django creates and drops
`test_postgres` next to it); RLSTUDIO_TEST_DATABASE_NAME names another test database so that two
suites can run at once on one server. Celery stays real: no eager mode.
"""
from .base import *  # noqa: F401,F403
from .base import CHANNEL_LAYERS, DATABASES, ENV, parse_database_url

if ENV.database_url_from != "env":
    # Tests never follow a running launcher's endpoints.json: they use the test machine's server.
    DATABASES["default"].update(
        parse_database_url("postgresql://postgres@127.0.0.1:5432/postgres")
    )
if ENV.test_database_name:
    DATABASES["default"]["TEST"] = {"NAME": ENV.test_database_name}

DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Serve static files straight from static/ (no collectstatic needed outside production).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

# Each test session gets a Celery queue of its own (the worker the tests start inherits the variable),
# so two suites sharing one Redis never take each other's tasks.
import os as _os  # noqa: E402

CELERY_TASK_DEFAULT_QUEUE = _os.environ.setdefault(
    "RLSTUDIO_CELERY_QUEUE", f"rlstudio-test-{_os.getpid()}"
)
# Likewise a channel-layer prefix of its own (run ids restart in every test database, so two suites
# on one Redis would otherwise hear each other's `run.<id>` groups); never a development platform's.
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = _os.environ.setdefault(
    "RLSTUDIO_CHANNELS_PREFIX", f"rlstudio-test-{_os.getpid()}"
)
