"""The launcher's side of the endpoints contract with `rlstudio.config.env`.

While an instance runs, `<state>/services/endpoints.json` holds the URLs of its services, so
that `python manage.py ...` in another shell with the same RLSTUDIO_STATE_DIR reaches them. Written
atomically (temp file + rename); removed on a clean shutdown.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

KEYS = ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "RAY_DASHBOARD_URL")


def write(path: Path, values: dict[str, str | None]) -> None:
    unknown = set(values) - set(KEYS)
    if unknown:
        raise ValueError(f"not an endpoint key: {sorted(unknown)}")
    data = {k: v for k, v in values.items() if v}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.chmod(0o600)
    os.replace(tmp, path)


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
