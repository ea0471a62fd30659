"""Who may reach a `make run` instance: the host names its children accept and what the banner warns
about when the web app is bound beyond the machine's loopback (`HOST=0.0.0.0 make run` for a team).

Pure functions of the launcher's environment; the launcher (cli.py) applies and prints them.
"""
from __future__ import annotations

from collections.abc import Mapping

# The names the local machine reaches its own web app by: the launcher's health probe and the URL the
# banner prints use 127.0.0.1. They are the development settings' default ALLOWED_HOSTS as well.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_LOOPBACK_BINDS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _names(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def allowed_hosts_for_children(environ: Mapping[str, str]) -> str | None:
    """ALLOWED_HOSTS for the launcher's children: the operator's names followed by the loopback ones,
    or None when the operator set none (the settings' own default, loopback only, then applies).

    Without the loopback names an operator's `ALLOWED_HOSTS=studio.lab` made the launcher's own
    `/healthz` probe to 127.0.0.1 answer 400 until the start failed after 120 s. ALLOWED_HOSTS checks
    the Host header, which any client writes, not where a connection comes from: once bound beyond
    loopback, another machine sending `Host: localhost` is answered too. That lets nobody in who
    could not already connect (the names only stop a page, link or cookie being made for a host the
    site does not serve, and a browser cannot send another site's request with a loopback Host)."""
    given = _names(environ.get("ALLOWED_HOSTS") or "")
    if not given:
        return None
    return ",".join(given + [name for name in LOOPBACK_HOSTS if name not in given])


def binds_beyond_loopback(host: str) -> bool:
    """Whether Daphne bound to `host` is reachable from other machines (0.0.0.0, ::, an interface's
    address or a name), as opposed to the loopback default."""
    return host.strip().lower() not in _LOOPBACK_BINDS and not host.startswith("127.")


def exposure_warnings(host: str, port: int, environ: Mapping[str, str], hostname: str) -> list[str]:
    """The banner's warnings for an instance other machines can reach, each naming what to set; none
    on loopback. `hostname` is this machine's name, offered as the example."""
    if not binds_beyond_loopback(host):
        return []
    out = []
    if not _names(environ.get("ALLOWED_HOSTS") or ""):
        out.append(f"WARNING: bound to {host} but ALLOWED_HOSTS is not set, so only this machine is "
                   f"answered: other machines get 400 Bad Request. Restart with the name they use, e.g. "
                   f"ALLOWED_HOSTS={hostname} (their URL: http://{hostname}:{port}/)")
    if not environ.get("SECRET_KEY"):
        out.append("WARNING: SECRET_KEY is not set: the development key is derived from the checkout "
                   "path. For a server others use, set SECRET_KEY to 50+ random characters (kept the "
                   "same across restarts); a team's production site: docs/deploy.md")
    return out
