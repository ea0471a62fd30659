"""THE one module that reads the process environment for RL Studio's web side.

Everything configurable (database, Redis, Ray, secrets, hosts, the state folder, the port) is read
here once, into a frozen `Env`; settings modules import `load_env()` and never touch `os.environ`.

Launcher contract: when DATABASE_URL / REDIS_URL / RAY_ADDRESS are absent from the environment, the
values are taken from `$RLSTUDIO_STATE_DIR/services/endpoints.json`, which the launcher writes while
its embedded services run, so that `python manage.py ...` in another shell with the same state
folder talks to the same servers. Without either, development defaults apply (RAY_ADDRESS unset
then means "no Ray").
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from rlstudio.text import yes_no

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/rlstudio"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_RAY_DASHBOARD_URL = "http://127.0.0.1:8265"
ENDPOINTS_FILE = Path("services") / "endpoints.json"
PLAYGROUND_MAX_ACTIVE_DEFAULT = 4  # playground sessions on the site at once (the settings and `make run`'s worker)


class EnvError(ValueError):
    """An environment variable holds a value RL Studio cannot use (the message names it)."""


@dataclass(frozen=True)
class Env:
    """The environment as RL Studio sees it (each field documents its variable)."""

    database_url: str
    """DATABASE_URL: postgresql://user:pass@host:port/name (a socket dir as `?host=/path`)."""
    database_url_from: str
    """Where database_url came from: "env", "endpoints" (the launcher's file) or "default"."""
    redis_url: str
    """REDIS_URL: Celery broker and result backend, Channels layer, health check."""
    ray_address: str | None
    """RAY_ADDRESS: the Ray cluster runs are submitted to; None means no Ray."""
    ray_dashboard_url: str
    """RAY_DASHBOARD_URL: Ray's dashboard / Jobs API over HTTP (health check, job submission); by
    default RAY_ADDRESS when that is an http(s) URL, else http://127.0.0.1:8265."""
    secret_key: str | None
    """SECRET_KEY: required in production, generated-per-checkout default elsewhere."""
    debug: bool | None
    """DEBUG: None when unset, so each settings module picks its own default."""
    allowed_hosts: tuple[str, ...]
    """ALLOWED_HOSTS: comma-separated host names."""
    csrf_trusted_origins: tuple[str, ...]
    """CSRF_TRUSTED_ORIGINS: comma-separated origins such as https://example.com."""
    state_dir: Path
    """RLSTUDIO_STATE_DIR: uploads/, checkpoints/, runs/, services/ (default <repo>/var)."""
    port: int
    """PORT: the HTTP port the ASGI server listens on (default 8000)."""
    ssl_redirect: bool
    """SECURE_SSL_REDIRECT (production): redirect HTTP to HTTPS (default on)."""
    behind_tls_proxy: bool
    """RLSTUDIO_BEHIND_TLS_PROXY: trust X-Forwarded-Proto=https from a TLS-terminating proxy."""
    test_database_name: str | None
    """RLSTUDIO_TEST_DATABASE_NAME: the test database's name (default test_<name>)."""


def _bool(environ: Mapping[str, str], name: str, default: bool | None) -> bool | None:
    raw = environ.get(name)
    if raw is None:
        return default
    if not raw.strip():
        return False
    answer = yes_no(raw)
    if answer is not None:
        return answer
    raise EnvError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _csv(environ: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = environ.get(name)
    if raw is None:
        return default
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def read_endpoints(state_dir: Path) -> dict[str, str]:
    """The launcher's `services/endpoints.json` under `state_dir`, or {} when there is none.

    A file that exists but is not a JSON object of strings raises: silently falling back to the
    defaults would point this process at other servers than the running platform's.
    """
    path = state_dir / ENDPOINTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise EnvError(f"{path} must be a JSON object of strings")
    return data


def state_dir_from_env(environ: Mapping[str, str] | None = None) -> Path:
    """The state folder: RLSTUDIO_STATE_DIR, else <repository>/var whatever the working directory;
    absolute and resolved (its text is an instance's identity). The settings and the launcher both use it."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("RLSTUDIO_STATE_DIR") or REPO_ROOT / "var").expanduser().resolve()


def load_env(environ: Mapping[str, str] | None = None) -> Env:
    """Read the environment (default `os.environ`) into an `Env`."""
    environ = os.environ if environ is None else environ
    state_dir = state_dir_from_env(environ)
    endpoints = read_endpoints(state_dir)

    if environ.get("DATABASE_URL"):
        database_url, database_url_from = environ["DATABASE_URL"], "env"
    elif endpoints.get("DATABASE_URL"):
        database_url, database_url_from = endpoints["DATABASE_URL"], "endpoints"
    else:
        database_url, database_url_from = DEFAULT_DATABASE_URL, "default"
    redis_url = environ.get("REDIS_URL") or endpoints.get("REDIS_URL") or DEFAULT_REDIS_URL
    ray_address = environ.get("RAY_ADDRESS") or endpoints.get("RAY_ADDRESS") or None

    raw_port = environ.get("PORT", "8000")
    try:
        port = int(raw_port)
    except ValueError as exc:
        raise EnvError(f"PORT={raw_port!r} is not an integer") from exc

    return Env(
        database_url=database_url,
        database_url_from=database_url_from,
        redis_url=redis_url,
        ray_address=ray_address,
        ray_dashboard_url=(
            environ.get("RAY_DASHBOARD_URL")
            or endpoints.get("RAY_DASHBOARD_URL")
            or (ray_address if ray_address and ray_address.startswith(("http://", "https://")) else None)
            or DEFAULT_RAY_DASHBOARD_URL
        ).rstrip("/"),
        secret_key=environ.get("SECRET_KEY") or None,
        debug=_bool(environ, "DEBUG", None),
        allowed_hosts=_csv(environ, "ALLOWED_HOSTS", ()),
        csrf_trusted_origins=_csv(environ, "CSRF_TRUSTED_ORIGINS", ()),
        state_dir=state_dir,
        port=port,
        ssl_redirect=bool(_bool(environ, "SECURE_SSL_REDIRECT", True)),
        behind_tls_proxy=bool(_bool(environ, "RLSTUDIO_BEHIND_TLS_PROXY", False)),
        test_database_name=environ.get("RLSTUDIO_TEST_DATABASE_NAME") or None,
    )


def parse_database_url(url: str) -> dict[str, Any]:
    """A Django DATABASES entry from a postgresql:// URL.

    `postgresql://u:p@h:5432/db?host=/run/pg&sslmode=require` → HOST "/run/pg" (a unix socket
    folder given as a query parameter wins over the netloc host, as libpq does), other query
    parameters become connection OPTIONS.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise EnvError(f"DATABASE_URL must be a postgresql:// URL, got scheme {parts.scheme!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    host = query.pop("host", None) or (unquote(parts.hostname) if parts.hostname else "")
    port = query.pop("port", None) or (str(parts.port) if parts.port else "")
    name = unquote(parts.path.lstrip("/")) or "postgres"
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or "") or query.pop("user", ""),
        "PASSWORD": unquote(parts.password or "") or query.pop("password", ""),
        "HOST": host,
        "PORT": port,
        "OPTIONS": query,
    }


# --- Tunables: optional numeric / text settings, one environment variable each ----------------
# Settings modules read them through these (never os.environ directly), so that the web server, the
# Celery worker and the tests agree, and a bad value names its variable.
def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if environ is None else environ).get(name, "")
    if raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name} must be an integer (got {raw!r})") from None


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(name, "")
    if raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise EnvError(f"{name} must be a number (got {raw!r})") from None


def env_str(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    raw = (os.environ if environ is None else environ).get(name, "")
    return raw if raw.strip() else default


def env_paths(name: str, default: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """A list of folders separated by colons (like PATH) or commas, either or both (so a folder's name
    may hold neither); blank items and surrounding spaces dropped; the default when none is left."""
    raw = (os.environ if environ is None else environ).get(name, "")
    return [p.strip() for p in re.split(r"[:,]", raw) if p.strip()] or list(default)
