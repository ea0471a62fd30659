"""The demo admin's credentials: from RLSTUDIO_ADMIN_USER / RLSTUDIO_ADMIN_PASSWORD, otherwise a
password generated once per state dir and kept (mode 0600) in `<state>/admin-password`."""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def admin_credentials(state: Path, environ: dict[str, str] | None = None) -> tuple[str, str, str]:
    """Returns (user, password, source) where source says where the password came from."""
    environ = os.environ if environ is None else environ
    user = environ.get("RLSTUDIO_ADMIN_USER") or "admin"
    if environ.get("RLSTUDIO_ADMIN_PASSWORD"):
        return user, environ["RLSTUDIO_ADMIN_PASSWORD"], "RLSTUDIO_ADMIN_PASSWORD"
    path = state / "admin-password"
    if path.exists() and path.read_text().strip():
        return user, path.read_text().strip(), str(path)
    password = secrets.token_urlsafe(12)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return user, password, str(path)
