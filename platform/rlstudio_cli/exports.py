"""`rlstudio exports list RUN_ID`, `exports start RUN_ID --step S`, `exports show|delete RUN_ID
EXPORT_ID` and `exports download RUN_ID EXPORT_ID -o FILE`: a run's exports of its checkpoints as
Hugging Face folders, under /api/v1/runs/{id}/exports/ (docs/api.md "Exports of a run's
checkpoints"). An export belongs to its run in the API, so those take both ids. A download streams
the archive (.../{eid}/archive/, a .tar.gz) into a temporary file beside FILE a chunk at a time, and
puts it in place only once it is whole; an existing FILE is left alone unless `--force`. `-o -`
writes the archive's bytes to stdout instead (and nothing else: the summary goes to stderr).
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from .client import Client, ClientError
from .common import confirmed, emit_json, err, out, when
from .output import cell, clean, pairs, table


def cmd_exports_list(client: Client, args) -> int:
    rows = client.get(f"runs/{args.run}/exports/") or []
    if args.json:
        emit_json(rows)
        return 0
    table(("ID", "STEP", "STATUS", "LORA", "SIZE", "MODEL", "OWNER", "CREATED"),
          [(x.get("id"), x.get("step"), x.get("status"), x.get("lora"), x.get("size_bytes"), x.get("model"),
            x.get("owner"), when(x.get("created"))) for x in rows])
    return 0


def cmd_exports_start(client: Client, args) -> int:
    export = client.post(f"runs/{args.run}/exports/", {"step": args.step})
    if args.json:
        emit_json(export)
    else:
        out(f"export {export.get('id')} of run {args.run} step {export.get('step')}: {clean(export.get('status'))}")
    return 0


def cmd_exports_show(client: Client, args) -> int:
    x = client.get(f"runs/{args.run}/exports/{args.id}/")
    if args.json:
        emit_json(x)
        return 0
    items = [("id", x.get("id")), ("run", x.get("run", args.run)), ("step", x.get("step")),
             ("status", x.get("status")), ("lora", x.get("lora")), ("size", _size(x.get("size_bytes"))),
             ("model", x.get("model")), ("owner", x.get("owner")), ("created", when(x.get("created"))),
             ("started", when(x.get("started"))), ("finished", when(x.get("finished")))]
    if x.get("archive"):
        items.append(("download", f"rlstudio exports download {args.run} {x.get('id')} -o FILE"))
    if x.get("error"):
        items.append(("error", x.get("error")))
    pairs(items)
    files = x.get("files") or []
    if files:
        out(f"\nfiles ({len(files)}):")
        for name in files:
            out(f"  {clean(name)}")
    return 0


def _size(size) -> str:
    """Bytes, and in MiB or GiB when that many."""
    if not isinstance(size, int):
        return cell(size)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if size >= scale:
            return f"{size} ({size / scale:.1f} {unit})"
    return str(size)


def cmd_exports_delete(client: Client, args) -> int:
    """DELETE the export: its catalog model, its record and its folder (the checkpoint stays)."""
    path, name = f"runs/{args.run}/exports/{args.id}/", f"export {args.id} of run {args.run}"

    def question() -> str:
        x = client.get(path)
        model = f" and its catalog model {cell(x.get('model'))}" if x.get("model") else ""
        return f"delete {name} (step {cell(x.get('step'))}, {clean(x.get('status'))}){model}?"

    if not confirmed(args, question, what="an export"):
        err(f"{name} not deleted")
        return 1
    client.delete(path)
    out(f"{name} deleted")
    return 0


def _refuse(message: str) -> ClientError:
    return ClientError(message, field="--output", exit_code=2)


def _place(tmp: Path, dest: Path, *, force: bool) -> None:
    """The finished download at `dest`: replacing what is there with `force`, else only when nothing
    is (a hard link fails on an existing name, so a file made meanwhile is not overwritten either)."""
    if force:
        os.replace(tmp, dest)
        return
    try:
        os.link(tmp, dest)
    except FileExistsError:
        raise _refuse(f"{dest} exists: pass --force to overwrite it") from None
    except OSError:  # a file system without hard links
        if dest.exists():
            raise _refuse(f"{dest} exists: pass --force to overwrite it") from None
        os.replace(tmp, dest)
        return
    tmp.unlink()


class _ReaderGone(ClientError):
    """stdout's reader closed it midway (a ClientError, so the download passes it through as it is)."""


def _to_stdout(client: Client, args) -> int:
    """`-o -`: the archive's bytes on stdout as they come, nothing else there (the summary on stderr).
    A terminal is refused: the bytes would scramble it."""
    if sys.stdout.isatty():
        raise _refuse("stdout is a terminal: redirect it (-o - > FILE, or | tar xz) or give a file name")
    sys.stdout.flush()
    stream = sys.stdout.buffer

    def write(chunk: bytes) -> None:
        try:
            stream.write(chunk)
        except BrokenPipeError:
            raise _ReaderGone("stdout was closed") from None
        except OSError as exc:
            raise ClientError(f"cannot write to stdout: {exc.strerror}") from None

    try:
        size = client.download(f"runs/{args.run}/exports/{args.id}/archive/", write)
        stream.flush()
    except _ReaderGone:  # the reader went away (`| head -c 100`): main() ends quietly, as for a list
        raise BrokenPipeError from None
    err(f"export {args.id} of run {args.run}: {size} bytes written to stdout")
    return 0


def cmd_exports_download(client: Client, args) -> int:
    if args.output == "-":
        return _to_stdout(client, args)
    dest = Path(args.output)
    if dest.is_dir():
        raise _refuse(f"{dest} is a folder: give a file name, e.g. {dest / f'run{args.run}-export{args.id}.tar.gz'}")
    if (dest.exists() or dest.is_symlink()) and not args.force:
        raise _refuse(f"{dest} exists: pass --force to overwrite it")
    tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.part")
    try:
        f = open(tmp, "xb")
    except OSError as exc:
        raise _refuse(f"cannot write in {dest.parent}: {exc.strerror}") from None
    try:
        with f:
            def write(chunk: bytes) -> None:
                try:
                    f.write(chunk)
                except OSError as exc:
                    raise ClientError(f"cannot write {dest}: {exc.strerror}") from None

            size = client.download(f"runs/{args.run}/exports/{args.id}/archive/", write)
        _place(tmp, dest, force=args.force)
    finally:
        tmp.unlink(missing_ok=True)
    out(f"export {args.id} of run {args.run}: {size} bytes written to {clean(str(dest))}")
    return 0
