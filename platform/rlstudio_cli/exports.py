"""`rlstudio exports list RUN_ID`, `exports start RUN_ID --step S` and `exports download RUN_ID
EXPORT_ID -o FILE`: a run's exports of its checkpoints as Hugging Face folders, under
/api/v1/runs/{id}/exports/ (docs/api.md "Exports of a run's checkpoints"). An export belongs to its
run in the API, so `download` takes both ids. A download streams the archive
(.../{eid}/archive/, a .tar.gz) into a temporary file beside FILE a chunk at a time, and puts it in
place only once it is whole; an existing FILE is left alone unless `--force`.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from .client import Client, ClientError
from .common import emit_json, out, when
from .output import clean, table


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


def cmd_exports_download(client: Client, args) -> int:
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
