"""Web hardening settings (imported at the end of base.py; docs/security.md, "Web hardening").

- failed logins and failed API tokens: django-axes (rlstudio.accounts.throttle);
- request bodies: sizes, authentication of uploads and a minimum rate, enforced by
  rlstudio.config.request_gate before the body is read;
- the Content-Security-Policy of every page (django-csp; inline scripts carry the request's nonce).
Each tunable is an environment variable of the same name (README, Configuration).
"""
from datetime import timedelta

from csp.constants import NONCE, NONE, SELF, UNSAFE_INLINE

from rlstudio.config.env import env_float, env_int

# --- Failed logins and API tokens (django-axes) -------------------------------------------------
# The standalone backend refuses a locked-out login before ModelBackend checks the password.
AUTHENTICATION_BACKENDS = [
    "rlstudio.accounts.backends.ThrottledLoginBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failures allowed within the cool-off; the next one locks the account and the address (each on its
# own: ["username", "ip_address"] is "username OR address").
AXES_FAILURE_LIMIT = env_int("RLSTUDIO_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("RLSTUDIO_LOGIN_COOLOFF_MIN", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# A success does not wipe the failures: it would wipe the address's, and with them the other
# accounts' tried from there (axes resets by every lockout parameter).
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_CALLABLE = "rlstudio.accounts.throttle.lockout_response"
# The name a failure is counted under, cut to axes' column (255) with no NUL: a longer one was a 500.
AXES_USERNAME_CALLABLE = "rlstudio.accounts.throttle.axes_username"
AXES_HTTP_RESPONSE_CODE = 429

# --- Request bodies (rlstudio.config.request_gate) ---------------------------------------------
# The largest body of any request that is not a dataset upload (uploads: RLSTUDIO_MAX_UPLOAD_BYTES
# plus a megabyte for the multipart envelope). Must stay above RLSTUDIO_INGEST_MAX_REQUEST_BYTES.
RLSTUDIO_MAX_REQUEST_BYTES = env_int("RLSTUDIO_MAX_REQUEST_BYTES", 32 << 20)
# A body must arrive within RLSTUDIO_BODY_TIMEOUT_S seconds plus one second per
# RLSTUDIO_BODY_MIN_RATE bytes received (Apache mod_reqtimeout's body=20,MinRate=500); else 408.
RLSTUDIO_BODY_TIMEOUT_S = env_float("RLSTUDIO_BODY_TIMEOUT_S", 20)
RLSTUDIO_BODY_MIN_RATE = env_int("RLSTUDIO_BODY_MIN_RATE", 500)

# --- Content-Security-Policy (django-csp) -------------------------------------------------------
# Scripts only from this site or inline with the request's nonce (`nonce="{{ request.csp_nonce }}"`);
# no inline event handlers, no eval. plotly.js is served from /static/ (no CDN); it injects its own
# <style> elements and style attributes at run time, so styles may be inline (a style cannot run
# code). connect-src 'self' covers the run page's WebSocket (same host and port).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:", "blob:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
