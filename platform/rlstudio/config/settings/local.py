"""Development settings: DEBUG on unless DEBUG=0, localhost allowed."""
from .base import *  # noqa: F401,F403
from .base import ENV

DEBUG = True if ENV.debug is None else ENV.debug
ALLOWED_HOSTS = list(ENV.allowed_hosts) or ["localhost", "127.0.0.1", "[::1]"]
# Serve static files straight from static/ (no collectstatic needed outside production).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
