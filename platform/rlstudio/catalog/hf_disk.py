"""A zipped `datasets.save_to_disk` folder, read safely: unpacked with its sizes and paths checked
(`extract_zip`: plain files and folders only, nothing outside the destination), its metadata checked
to name no file outside itself (`check_hf_folder`), then its rows read as plain Arrow values
(`iter_hf_disk`). Every refusal is a `formats.RowError`."""
from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any, Iterator

from .formats import Limits, RowError


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
