"""Streaming readers of uploaded dataset files: one `(where, row)` at a time, never the whole file.

Owns format detection (by name and magic bytes) and the byte-level checks that must happen while
reading: encoding, NUL bytes, one JSON object per line, line length, nesting depth, and the size a
compressed file expands to, and that a zipped `save_to_disk` folder names no file outside itself
(`check_hf_folder`). Every refusal is a `RowError` naming the line or row and, where it
applies, the field. No Django here: limits come in as a `Limits` value.

Formats: JSONL (`.jsonl`), a JSON array (`.json`, bounded by `max_json_document_bytes` because a
single document cannot be streamed line by line), Parquet (read by record batches with pyarrow), CSV
(pyarrow's streaming reader, every column read as text), a zipped `datasets.save_to_disk` folder,
and gzip of the text formats (`.jsonl.gz`, `.json.gz`, `.csv.gz`).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import stat
import zipfile
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


def _is_link_or_special(info: zipfile.ZipInfo) -> bool:
    """Whether a member's Unix mode (the high half of `external_attr`) makes it a symbolic link, a
    device, a FIFO or a socket: anything but a plain file or a folder."""
    mode = info.external_attr >> 16
    return bool(stat.S_IFMT(mode)) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def extract_zip(path: Path, dest: Path, limits: Limits) -> Path:
    """Unpack a zipped `save_to_disk` folder into `dest` (sizes and paths checked first).

    Members are plain files and folders only: a symbolic link (or any other special file) is
    refused, and files are opened without following a link, so nothing is written or read outside
    `dest`.
    """
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise RowError(f"not a readable zip archive ({exc})") from None
    with zf:
        total = 0
        for info in zf.infolist():
            name = info.filename
            if name.startswith("/") or ".." in Path(name).parts or "\x00" in name:
                raise RowError(f"the archive holds an unsafe path {name!r}")
            if _is_link_or_special(info):
                raise RowError(f"the archive holds a symbolic link or special file {name!r} "
                               "(only plain files and folders are allowed)")
            total += info.file_size
            if total > limits.max_decompressed_bytes:
                raise RowError(f"the archive expands past the limit of {limits.max_decompressed_bytes} "
                               "bytes (RLSTUDIO_MAX_DECOMPRESSED_BYTES)")
        dest.mkdir(parents=True, exist_ok=True)
        written = 0
        for info in zf.infolist():
            target = dest / info.filename
            try:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            except OSError as exc:
                raise RowError(f"the archive cannot be unpacked at {info.filename!r} "
                               f"({exc.strerror or type(exc).__name__})") from None
            # Count what really comes out: the sizes in the directory may lie.
            with zf.open(info) as src, open(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > limits.max_decompressed_bytes:
                        raise RowError("the archive expands past the limit of "
                                       f"{limits.max_decompressed_bytes} bytes")
                    out.write(chunk)
    # The folder itself, or the single folder the zip wraps it in.
    candidates = [p.parent for p in dest.rglob("dataset_info.json")] + [p.parent for p in dest.rglob("dataset_dict.json")]
    if not candidates:
        raise RowError("the zip holds no `datasets.save_to_disk` folder (no dataset_info.json)")
    return min(candidates, key=lambda p: len(p.parts))


def _is_plain_name(name: Any) -> bool:
    """Whether `name` is one file or folder name: text, no separator, not `.`/`..`, no NUL."""
    return (isinstance(name, str) and name not in ("", ".", "..")
            and not any(c in name for c in ("/", "\\", "\x00")))


def _escapes(name: str) -> bool:
    """Whether a path named in the metadata points above or outside its folder (absolute, `..`)."""
    return name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name)


def _read_meta(path: Path, shown: str) -> Any:
    """The JSON of a metadata file `path` (`shown` is how messages name it)."""
    if path.is_symlink() or not path.is_file():
        raise RowError(f"{shown} is not a regular file")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise RowError(f"{shown} is not valid JSON ({exc})") from None


def _member(folder: Path, name: str, says: str, kind: str) -> Path:
    """`folder / name` when `name` is a plain name of something directly in `folder` (not a link);
    else a RowError that starts with `says` ("state.json names a data file") and names `name`."""
    if _escapes(name):
        raise RowError(f"{says} outside the dataset folder: {name!r}")
    if not _is_plain_name(name):
        raise RowError(f"{says} that is not a plain {kind} name: {name!r}")
    target = folder / name
    if target.is_symlink() or target.resolve().parent != folder.resolve():
        raise RowError(f"{says} outside the dataset folder: {name!r}")
    return target


def _check_dataset_folder(folder: Path, shown: str) -> None:
    """Refuse a `Dataset` folder whose state.json names a data file that is not a plain file lying
    in `folder` itself; `shown` is the folder as messages name it ('' for the top one)."""
    state_name = f"{shown}state.json"
    state = _read_meta(folder / "state.json", state_name)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        raise RowError(f"{state_name} names no data files (its '_data_files' list is missing or empty)")
    for entry in files:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            raise RowError(f"{state_name} has a data file entry without a file name: {entry!r}")
        target = _member(folder, name, f"{state_name} names a data file", "file")
        if not target.is_file():
            raise RowError(f"{state_name} names a data file the zip does not hold: {name!r}")


def check_hf_folder(folder: Path) -> None:
    """Refuse a `save_to_disk` folder whose metadata names a file or folder outside it, before
    `datasets` opens anything: each state.json's `_data_files[*].filename` must be a file of that
    folder, and each of dataset_dict.json's `splits` a subfolder. (`datasets` joins these names onto
    the folder as they are, so `/abs/x.arrow` or `../x` would read any Arrow file the worker can.)
    Mirrors `datasets.load_from_disk`: a folder with dataset_info.json and state.json is a `Dataset`,
    else one with dataset_dict.json is a `DatasetDict`."""
    if (folder / "dataset_info.json").is_file() and (folder / "state.json").is_file():
        _check_dataset_folder(folder, "")
        return
    if not (folder / "dataset_dict.json").exists():
        return  # datasets refuses it itself
    meta = _read_meta(folder / "dataset_dict.json", "dataset_dict.json")
    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, list) or not splits:
        raise RowError("dataset_dict.json names no splits (its 'splits' list is missing or empty)")
    for name in splits:
        if not isinstance(name, str):
            raise RowError(f"dataset_dict.json names a split that is not text: {name!r}")
        sub = _member(folder, name, "dataset_dict.json names a split", "folder")
        if not sub.is_dir():
            raise RowError(f"dataset_dict.json names a split the zip does not hold: {name!r}")
        _check_dataset_folder(sub, f"{name}/")


def iter_hf_disk(folder: Path, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of a `save_to_disk` folder (memory-mapped Arrow, read in batches).

    The metadata is checked first (`check_hf_folder`). Rows are read as plain Arrow values: no
    feature decoding (an `Image` or `Audio` value naming a path would open that file) and none of the
    output format state.json asks for.
    """
    import datasets

    check_hf_folder(folder)
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as exc:
        # Name no server path: the extraction folder is ours, not the uploader's.
        raise RowError(f"not a readable datasets folder ({str(exc).replace(str(folder), '<zip>')})") from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds and len(ds) != 1:
            raise RowError(f"a DatasetDict with splits {list(ds)}: zip one split folder")
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    row = 0
    for batch in ds.with_format("arrow").iter(batch_size=1024):
        for values in batch.to_pylist():
            row += 1
            yield row, values


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
