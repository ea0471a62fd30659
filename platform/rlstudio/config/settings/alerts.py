"""Alert and notification settings (imported at the end of base.py; docs/alerts.md).

E-mail goes through Django's mail settings, read from the environment: with `EMAIL_HOST` unset,
e-mail is off (the settings page says so) unless `EMAIL_BACKEND` names another backend (e.g.
`django.core.mail.backends.console.EmailBackend` for development). Webhook endpoints are registered
by operators in the admin; their secrets stay in the environment (`RLSTUDIO_WEBHOOK_SECRET_*`).
Each tunable is an environment variable of the same name (README, Configuration).
"""
from rlstudio.config.env import env_float, env_int, env_str

EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_str("EMAIL_USE_TLS", "1").strip().lower() in ("1", "true", "yes", "on")
EMAIL_USE_SSL = env_str("EMAIL_USE_SSL", "0").strip().lower() in ("1", "true", "yes", "on")
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 20)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "RL Studio <rlstudio@localhost>")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")

# Webhooks: seconds one POST may take, attempts in all, first retry delay (doubling, at most 5 min).
RLSTUDIO_WEBHOOK_TIMEOUT_S = env_float("RLSTUDIO_WEBHOOK_TIMEOUT_S", 10)
RLSTUDIO_WEBHOOK_MAX_ATTEMPTS = env_int("RLSTUDIO_WEBHOOK_MAX_ATTEMPTS", 6)
RLSTUDIO_WEBHOOK_BACKOFF_S = env_float("RLSTUDIO_WEBHOOK_BACKOFF_S", 5)
