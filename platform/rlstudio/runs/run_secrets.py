"""A run folder's secret files: the run's ingest token and the operator's tracker secrets, each in an
owner-only file (0600 from its creation) that the job is pointed at, never put in the job's environment
(Ray's job API shows `runtime_env.env_vars` to anyone who can reach it). They are removed when the run
ends (`remove_token`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from . import gate, trackers

TOKEN_FILE = "ingest_token"


def write_token(out_dir: Path, token: str) -> Path:
    """The run's ingest token in its folder (owner-only permissions): the job reads it from there,
    so that it never appears in Ray's job API (whose `runtime_env.env_vars` anyone on it can read)."""
    return write_secret(out_dir, TOKEN_FILE, token)


def write_secret(out_dir: Path, name: str, secret: str) -> Path:
    """`secret` in the file `name` of the run folder `out_dir`, readable by its owner only (0600 from its
    creation: written to a new temporary file, then renamed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    tmp = path.with_name(name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secret)
    tmp.replace(path)
    return path


def write_tracker_files(*, run, spec: Mapping[str, Any], out_dir: Path) -> dict[str, str]:
    """For the trackers the frozen `spec` lists: each operator secret in its owner-only file of the run
    folder and the user's view of the config (`gate.user_view`: no server path) in `trackers.CONFIG_FILE`;
    the job's environment that names them, with the non-secret settings and the run's lineage id, name
    and tags (`trackers`). {} when the spec lists no tracker."""
    loggers = (spec.get("trainer") or {}).get("logger") or []
    if not trackers.listed(loggers):
        return {}
    env = {variable: str(write_secret(out_dir, file_name, secret))
           for variable, (file_name, secret) in trackers.secret_files(loggers).items()}
    view = out_dir / trackers.CONFIG_FILE
    view.write_text(json.dumps(gate.user_view(spec), sort_keys=True), encoding="utf-8")
    env["RLSTUDIO_TRACKER_CONFIG_FILE"] = str(view)
    env.update(trackers.plain_env(loggers))
    env.update(trackers.run_env(run, loggers))
    return env


def read_token(out_dir: Path) -> str:
    """The token a job was given (its file in the run folder), or ''."""
    try:
        return (out_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def remove_token(out_dir: Path) -> None:
    """The run's ingest token and its tracker secrets out of its folder (the run has ended)."""
    for name in (TOKEN_FILE, *trackers.SECRET_FILES):
        (out_dir / name).unlink(missing_ok=True)
