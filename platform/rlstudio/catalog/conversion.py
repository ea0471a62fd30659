"""Validate-and-convert in one streaming pass, and the prompt token-length statistics.

`convert_file` reads an upload row by row (catalog.rows), converts each row with its preset
(catalog.presets) and appends it to a JSONL file in the trainer's row format, keeping a sparse
byte-offset index (every `INDEX_EVERY` rows) so the rows API can page without scanning. Memory is
one row (or one Arrow batch) whatever the file's size. `token_length_stats` reads the converted file
back and templates each prompt with a model's tokenizer, as the trainer will. No Django here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .formats import Detected, Limits, RowError
from .presets import CONVERTERS, recognise
from .rows import iter_rows, unit_of

INDEX_EVERY = 100


@dataclass
class ConvertResult:
    preset: str  # the preset really used (auto resolved)
    num_rows: int
    columns: list[dict[str, str]]  # [{"name": ..., "type": ...}] of the source rows
    offsets: list[int] = field(default_factory=list)  # byte offset of row k*INDEX_EVERY in the output


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def convert_file(src: Path, *, detected: Detected, preset: str, split: str, limits: Limits,
                 out_path: Path, work_dir: Path) -> ConvertResult:
    """Convert every row of `src` into `out_path` (JSONL); RowError on the first bad row.

    The caller owns cleanup: on error `out_path` may hold a partial file.
    """
    unit = unit_of(detected)
    types: dict[str, set[str]] = {}
    order: list[str] = []
    offsets: list[int] = []
    used = preset
    n = 0
    with open(out_path, "wb") as out:
        for line, row in iter_rows(src, detected, limits, work_dir=work_dir):
            if used == "auto":
                used = recognise(row, line=line, unit=unit)
            for key, value in row.items():
                if key not in types:
                    types[key] = set()
                    order.append(key)
                types[key].add(_type_name(value))
            converted = CONVERTERS[used](row, index=n, line=line, unit=unit, split=split)
            try:
                data = json.dumps(converted, ensure_ascii=False, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise RowError(f"holds a value that is not JSON data ({exc})", line=line, unit=unit) from None
            if n % INDEX_EVERY == 0:
                offsets.append(out.tell())
            out.write(data + b"\n")
            n += 1
    if n == 0:
        raise RowError("the file holds no rows (it is empty)")
    columns = [{"name": k, "type": "|".join(sorted(types[k] - {"null"}) or ["null"])
                + ("?" if "null" in types[k] and len(types[k]) > 1 else "")} for k in order]
    return ConvertResult(preset=used, num_rows=n, columns=columns, offsets=offsets)


def read_converted(path: Path, offsets: list[int], *, offset: int, limit: int) -> list[dict[str, Any]]:
    """Rows [offset, offset+limit) of a converted file, seeking with the sparse index."""
    if limit <= 0 or offset < 0:
        return []
    block = offset // INDEX_EVERY
    if block >= len(offsets):
        return []
    rows: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        f.seek(offsets[block])
        skip = offset - block * INDEX_EVERY
        for raw in f:
            if skip:
                skip -= 1
                continue
            rows.append(json.loads(raw))
            if len(rows) >= limit:
                break
    return rows


def iter_converted(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:
        for raw in f:
            yield json.loads(raw)


def _percentile(sorted_values: list[int], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an ascending list."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize_lengths(lengths: list[int], *, max_prompt_length: int, bins: int = 30) -> dict[str, Any]:
    """min / mean / p50 / p95 / max, the count over `max_prompt_length`, and a histogram."""
    values = sorted(lengths)
    if not values:
        return {"count": 0}
    lo, hi = values[0], values[-1]
    width = max(1, -(-(hi - lo + 1) // bins))
    counts: dict[int, int] = {}
    for v in values:
        b = (v - lo) // width
        counts[b] = counts.get(b, 0) + 1
    edges = [lo + i * width for i in range(max(counts) + 2)]
    return {
        "count": len(values), "min": lo, "mean": round(sum(values) / len(values), 2),
        "p50": _percentile(values, 0.5), "p95": _percentile(values, 0.95), "max": hi,
        "max_prompt_length": max_prompt_length,
        "over_max_prompt_length": sum(1 for v in values if v > max_prompt_length),
        "histogram": {"edges": edges, "counts": [counts.get(i, 0) for i in range(len(edges) - 1)]},
    }


def token_lengths(path: Path, tokenizer: Any, *, tool_schemas: dict[str, dict[str, Any]],
                  batch: int = 256) -> list[int]:
    """Templated prompt length of every converted row (with the tools each row offers)."""
    lengths: list[int] = []
    texts: list[str] = []

    def flush():
        if texts:
            enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
            lengths.extend(len(ids) for ids in enc)
            texts.clear()

    for row in iter_converted(path):
        extra = row.get("extra_info") or {}
        tools = [tool_schemas[t] if isinstance(t, str) and t in tool_schemas else t
                 for t in (extra.get("tools") or [])]
        tools = [t for t in tools if isinstance(t, dict)]
        texts.append(tokenizer.apply_chat_template(row["prompt"], tools=tools or None,
                                                   add_generation_prompt=True, tokenize=False))
        if len(texts) >= batch:
            flush()
    flush()
    return lengths
