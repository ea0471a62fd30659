"""Every row of a stored upload, whatever its format (`iter_rows`: the readers of `formats`, or of
`hf_disk` for a zipped `save_to_disk` folder), and what a position counts in each (`unit_of`)."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any, Iterator

from .formats import (Detected, Limits, RowError, iter_csv, iter_json_document, iter_jsonl, iter_parquet,
                      open_bytes)
from .hf_disk import extract_zip, iter_hf_disk


def iter_rows(path: Path, detected: Detected, limits: Limits, *, work_dir: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every row of the stored upload at `path`, as (line or row number, dict)."""
    if detected.format == "parquet":
        yield from iter_parquet(path, limits)
        return
    if detected.format == "hf_disk":
        try:
            folder = extract_zip(path, work_dir, limits)
            yield from iter_hf_disk(folder, limits)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        return
    stream = open_bytes(path, detected, limits)
    try:
        if detected.format == "jsonl":
            yield from iter_jsonl(stream, limits)
        elif detected.format == "json":
            yield from iter_json_document(stream, limits)
        elif detected.format == "csv":
            yield from iter_csv(stream, limits)
        else:
            raise RowError(f"unknown format {detected.format!r}")
    except (EOFError, OSError, gzip.BadGzipFile) as exc:
        if isinstance(exc, RowError):
            raise
        raise RowError(f"the compressed data is damaged or truncated ({exc})") from None
    finally:
        stream.close()


def unit_of(detected: Detected) -> str:
    """What a position counts in this format: lines of a JSONL, rows elsewhere."""
    return {"jsonl": "line", "json": "item"}.get(detected.format, "row")
