"""Streaming readers of uploaded dataset files: one `(where, row)` at a time, never the whole file.

Owns format detection (by name and magic bytes), the readers of the text and Parquet formats, and the
byte-level checks that must happen while reading: encoding, NUL bytes, one JSON object per line, line
length, nesting depth, and the size a compressed file expands to. Every refusal is a `RowError`
naming the line or row and, where it applies, the field. No Django here: limits come in as a
`Limits` value. A zipped `save_to_disk` folder is read by `hf_disk`; every row of a stored upload,
whatever its format, by `rows.iter_rows`.

Formats: JSONL (`.jsonl`), a JSON array (`.json`, bounded by `max_json_document_bytes` because a
single document cannot be streamed line by line), Parquet (read by record batches with pyarrow), CSV
(pyarrow's streaming reader, every column read as text), a zipped `datasets.save_to_disk` folder,
and gzip of the text formats (`.jsonl.gz`, `.json.gz`, `.csv.gz`).
"""
from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

FORMATS = ("jsonl", "json", "parquet", "csv", "hf_disk")
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class Limits:
    max_upload_bytes: int = 1 << 30
    max_line_bytes: int = 8 << 20
    max_nesting_depth: int = 32
    max_decompressed_bytes: int = 4 << 30
    max_json_document_bytes: int = 256 << 20


class RowError(ValueError):
    """A refusal with its place: `line` (1-based line or row number) and `field` where they apply."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None,
                 unit: str = "line"):
        self.reason, self.line, self.field, self.unit = message, line, field, unit
        where = []
        if line is not None:
            where.append(f"{unit} {line}")
        if field:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


@dataclass(frozen=True)
class Detected:
    format: str  # one of FORMATS
    gzipped: bool = False


def detect_format(name: str, head: bytes) -> Detected:
    """The format of a file called `name` whose first bytes are `head`; RowError when unknown or
    when the content contradicts the name (text posing as Parquet, a gzip that is not one)."""
    lower = name.lower()
    gz = lower.endswith(".gz")
    base = lower[:-3] if gz else lower
    if gz and not head.startswith(GZIP_MAGIC):
        raise RowError(f"{name!r} is named .gz but is not gzip data")
    if not gz and head.startswith(GZIP_MAGIC):
        gz = True  # a gzip under a plain name: accept it, the name's inner suffix still decides
    if base.endswith((".parquet", ".pq")):
        if gz:
            raise RowError("gzip of Parquet is not supported (Parquet is compressed already)")
        if not head.startswith(PARQUET_MAGIC):
            raise RowError(f"{name!r} is named .parquet but is not a Parquet file (no PAR1 header)")
        return Detected("parquet")
    if base.endswith(".zip"):
        if not head.startswith(ZIP_MAGIC):
            raise RowError(f"{name!r} is named .zip but is not a zip archive")
        return Detected("hf_disk")
    for suffix, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"), (".csv", "csv")):
        if base.endswith(suffix):
            if not gz and (head.startswith(PARQUET_MAGIC) or head.startswith(ZIP_MAGIC)):
                raise RowError(f"{name!r} is named {suffix} but holds binary data")
            return Detected(fmt, gzipped=gz)
    raise RowError(f"unsupported file type {name!r}: use .jsonl, .json, .parquet, .csv, a .zip of a "
                   "datasets folder, or .jsonl.gz / .json.gz / .csv.gz")


class _CountingReader(io.RawIOBase):
    """Wraps a decompressing stream and refuses to hand out more than `limit` bytes in total."""

    def __init__(self, inner: BinaryIO, limit: int):
        self.inner, self.limit, self.count = inner, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self.inner.read(len(buf))
        self.count += len(data)
        if self.count > self.limit:
            raise RowError(f"the compressed file expands past the limit of {self.limit} bytes "
                           "(RLSTUDIO_MAX_DECOMPRESSED_BYTES)")
        buf[: len(data)] = data
        return len(data)


def open_bytes(path: Path, detected: Detected, limits: Limits) -> BinaryIO:
    """The file's content as a binary stream (decompressed and size-checked for gzip)."""
    raw = open(path, "rb")
    if not detected.gzipped:
        return raw
    return io.BufferedReader(_CountingReader(gzip.GzipFile(fileobj=raw), limits.max_decompressed_bytes),
                             buffer_size=1 << 20)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """True when `value` nests containers deeper than `limit` (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse_json_line(raw: bytes, *, line: int, limits: Limits) -> dict[str, Any]:
    """One JSONL line → its object, or RowError saying what is wrong with it."""
    if b"\x00" in raw:
        raise RowError("contains a NUL byte (binary data, not JSON text)", line=line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RowError(f"is not valid UTF-8 (byte {exc.start + 1} of the line)", line=line) from None
    # Cheap pre-check in C: only lines with many brackets can nest too deep.
    if raw.count(b"[") + raw.count(b"{") > limits.max_nesting_depth:
        try:
            value = json.loads(text)
        except RecursionError:
            raise RowError(f"JSON nested deeper than the limit of {limits.max_nesting_depth} "
                           "(RLSTUDIO_MAX_NESTING_DEPTH)", line=line) from None
        except json.JSONDecodeError as exc:
            raise RowError(f"is not valid JSON ({exc.msg} at column {exc.colno})", line=line) from None
        if _depth_exceeds(value, limits.max_nesting_depth):
            raise RowError(f"JSON nested deeper than the limit of {limits.max_nesting_depth} "
                           "(RLSTUDIO_MAX_NESTING_DEPTH)", line=line)
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RowError(f"is not valid JSON ({exc.msg} at column {exc.colno})", line=line) from None
    if not isinstance(value, dict):
        raise RowError(f"expected a JSON object, got {_json_type(value)}", line=line)
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    return "an object"


def iter_jsonl(stream: BinaryIO, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; the last line need not end with a newline."""
    line = 0
    while True:
        raw = stream.readline(limits.max_line_bytes + 1)
        if not raw:
            return
        line += 1
        if len(raw) > limits.max_line_bytes:
            raise RowError(f"is longer than the limit of {limits.max_line_bytes} bytes "
                           "(RLSTUDIO_MAX_LINE_BYTES)", line=line)
        if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte order mark is harmless
        if not raw.strip():
            continue
        yield line, parse_json_line(raw.rstrip(b"\r\n"), line=line, limits=limits)


def iter_json_document(stream: BinaryIO, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """(item number, object) of a JSON array document (bounded: a document is parsed whole)."""
    data = stream.read(limits.max_json_document_bytes + 1)
    if len(data) > limits.max_json_document_bytes:
        raise RowError(f"a .json document over {limits.max_json_document_bytes} bytes cannot be "
                       "validated as one piece; upload it as JSONL (one object per line)")
    if b"\x00" in data:
        raise RowError("the file contains a NUL byte (binary data, not JSON text)",
                       line=data[: data.index(b"\x00")].count(b"\n") + 1)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RowError("is not valid UTF-8", line=data[: exc.start].count(b"\n") + 1) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise RowError(f"JSON nested deeper than the limit of {limits.max_nesting_depth}") from None
    except json.JSONDecodeError as exc:
        raise RowError(f"is not valid JSON ({exc.msg} at column {exc.colno})", line=exc.lineno) from None
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), list):
        value = next(iter(value.values()))  # {"data": [...]}: a common wrapper
    if not isinstance(value, list):
        raise RowError(f"a .json file must hold an array of objects, got {_json_type(value)}")
    for i, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise RowError(f"expected a JSON object, got {_json_type(item)}", line=i, unit="item")
        if _depth_exceeds(item, limits.max_nesting_depth):
            raise RowError(f"JSON nested deeper than the limit of {limits.max_nesting_depth}",
                           line=i, unit="item")
        yield i, item


def iter_parquet(path: Path, limits: Limits, batch_rows: int = 1024) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) read by record batches (memory bounded by one batch)."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(str(path))
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise RowError(f"not a readable Parquet file ({exc})") from None
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows):
            for item in batch.to_pylist():
                row += 1
                yield row, item
    except RowError:
        raise
    except Exception as exc:
        raise RowError(f"Parquet data cannot be read ({exc})", line=row + 1, unit="row") from None


def iter_csv(stream: BinaryIO, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) with every column as text; the header names the fields."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header = stream.readline(limits.max_line_bytes + 1)
    if len(header) > limits.max_line_bytes:
        raise RowError(f"the header is longer than the limit of {limits.max_line_bytes} bytes", line=1)
    if b"\x00" in header:
        raise RowError("contains a NUL byte", line=1)
    try:
        names = next(iter(__import__("csv").reader([header.decode("utf-8-sig")])), [])
    except UnicodeDecodeError:
        raise RowError("is not valid UTF-8", line=1) from None
    names = [n.strip() for n in names]
    if not names or not any(names):
        raise RowError("the CSV file has no header row", line=1)
    if len(set(names)) != len(names):
        raise RowError(f"the CSV header repeats a column name: {names}", line=1)
    rest = io.BufferedReader(_Prefixed(header, stream), buffer_size=1 << 20)
    try:
        reader = pacsv.open_csv(
            rest,
            read_options=pacsv.ReadOptions(block_size=max(limits.max_line_bytes, 1 << 20)),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        raise RowError(f"not a readable CSV file ({exc})") from None
    row = 0
    try:
        for batch in reader:
            for item in batch.to_pylist():
                row += 1
                for key, value in item.items():
                    if isinstance(value, str) and "\x00" in value:
                        raise RowError("contains a NUL byte", line=row, field=key, unit="row")
                yield row, item
    except RowError:
        raise
    except pa.ArrowInvalid as exc:
        raise RowError(f"CSV cannot be read after row {row} ({exc})", line=row + 1, unit="row") from None


class _Prefixed(io.RawIOBase):
    """`prefix` then the rest of `stream` (the header line was read once to learn the names)."""

    def __init__(self, prefix: bytes, stream: BinaryIO):
        self.prefix, self.stream = prefix, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.prefix:
            n = min(len(buf), len(self.prefix))
            buf[:n], self.prefix = self.prefix[:n], self.prefix[n:]
            return n
        data = self.stream.read(len(buf))
        buf[: len(data)] = data
        return len(data)
