"""Production settings: DEBUG off, a real SECRET_KEY required, HTTPS everywhere, whitenoise static.

Passes `python manage.py check --deploy --fail-level WARNING` when given SECRET_KEY (50+ random
characters) and ALLOWED_HOSTS. Behind a TLS-terminating proxy set RLSTUDIO_BEHIND_TLS_PROXY=1 (the
proxy must set X-Forwarded-Proto); SECURE_SSL_REDIRECT=0 only when the proxy redirects itself.
"""
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F401,F403
from .base import ENV

if not ENV.secret_key:
    raise ImproperlyConfigured(
        "SECRET_KEY is not set: production needs a secret of 50+ random characters, e.g. "
        "SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))')"
    )
SECRET_KEY = ENV.secret_key
if ENV.debug:
    raise ImproperlyConfigured("DEBUG must not be on with the production settings")
DEBUG = False
if not ENV.allowed_hosts:
    raise ImproperlyConfigured("ALLOWED_HOSTS is not set (a comma list of the site's host names)")
ALLOWED_HOSTS = list(ENV.allowed_hosts)

SECURE_SSL_REDIRECT = ENV.ssl_redirect
# Load balancers and the launcher probe /healthz over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
if ENV.behind_tls_proxy:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 60 * 60 * 24 * 365
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
