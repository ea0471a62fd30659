"""The catalog's files under an uploads root: the reading limits of an upload (`upload_limits`, from
settings), a name cleaned for display (`clean_name`), the suffix a stored file keeps
(`stored_suffix`), and removing a file or folder (`remove_path`).

Storage layout under an uploads root (settings.UPLOADS_DIR when the upload arrives; every later step
derives it from the absolute `file_path` stored on the dataset, so the web process and a Celery
worker with another state folder agree):
    incoming/<uuid>.part          the upload, until it is valid (removed when it is not)
    <sha[:2]>/<sha256><suffix>    the stored file, by content hash (shared by identical uploads)
    rows/<dataset id>.jsonl       the converted rows, in the trainer's row format
"""
from __future__ import annotations

import shutil
from pathlib import Path

from django.conf import settings

from ..formats import Limits


def upload_limits() -> Limits:
    """The limits on reading an uploaded file, from settings (RLSTUDIO_MAX_UPLOAD_BYTES and the others)."""
    return Limits(
        max_upload_bytes=settings.RLSTUDIO_MAX_UPLOAD_BYTES,
        max_line_bytes=settings.RLSTUDIO_MAX_LINE_BYTES,
        max_nesting_depth=settings.RLSTUDIO_MAX_NESTING_DEPTH,
        max_decompressed_bytes=settings.RLSTUDIO_MAX_DECOMPRESSED_BYTES,
        max_json_document_bytes=settings.RLSTUDIO_MAX_JSON_DOCUMENT_BYTES,
    )


def stored_suffix(name: str) -> str:
    """The suffix the stored file of an upload named `name` keeps (a compressed one's two: `.jsonl.gz`)."""
    lower = name.lower()
    for s in (".jsonl.gz", ".json.gz", ".csv.gz", ".ndjson.gz"):
        if lower.endswith(s):
            return s
    return Path(lower).suffix[:16]


def clean_name(name: str) -> str:
    """`name` without unprintable characters, stripped, at most 200 characters."""
    return "".join(ch for ch in name if ch.isprintable()).strip()[:200]


def remove_path(path: str | Path | None) -> None:
    """Remove a file or a folder (nothing when it is not there or `path` is empty)."""
    if path:
        p = Path(path)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
