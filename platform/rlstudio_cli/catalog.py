"""The catalog's commands: `rlstudio datasets list` and `datasets upload` (a multipart POST of the
file, optionally waiting while the platform validates it; exit 1 when it is invalid), `models list`
and `configs list` (the saved trainer configs): the lists of what a run is launched from.
"""
from __future__ import annotations

from pathlib import Path

from . import common
from .client import Client, ClientError
from .common import emit_json, err, error_line, footer, out, paged, when
from .output import clean, table

DATASET_COLUMNS = ("ID", "NAME", "STATUS", "FORMAT", "ROWS", "SPLIT", "OWNER", "VISIBILITY", "CREATED")


def _dataset_row(d: dict) -> list:
    return [d.get("id"), d.get("name"), d.get("status"), d.get("format"), d.get("num_rows"), d.get("split"),
            d.get("owner"), d.get("visibility"), when(d.get("created"))]


def cmd_datasets_list(client: Client, args) -> int:
    rows, count = paged(client, "datasets/", args)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(DATASET_COLUMNS, [_dataset_row(d) for d in rows])
    footer(len(rows), count, args)
    return 0


WAIT_POLL_S = 2.0  # between two looks at a dataset being validated (`upload --wait`)


def cmd_datasets_upload(client: Client, args) -> int:
    path = Path(args.file)
    try:  # readable, and a file: the upload streams it from the disk
        with open(path, "rb"):
            pass
        if not path.is_file():
            raise IsADirectoryError(21, "not a file")
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}", field="file", exit_code=2) from None
    fields = {"name": args.name or "", "preset": args.preset, "split": args.split}
    if args.stats_model is not None:
        fields["stats_model"] = str(args.stats_model)
    dataset = client.upload("datasets/", fields=fields, file_field="file", file=path)
    waited = 0.0
    while args.wait and dataset.get("status") == "validating":
        if waited >= args.timeout:
            raise ClientError(f"dataset {dataset.get('id')} is still validating after {args.timeout:g} s; "
                              f"`rlstudio datasets list` shows when it is done", exit_code=1)
        common.sleep(WAIT_POLL_S)
        waited += WAIT_POLL_S
        dataset = client.get(f"datasets/{dataset['id']}/")
    if args.json:
        emit_json(dataset)
    else:
        line = f"dataset {dataset.get('id')} {clean(dataset.get('name'))}: {clean(dataset.get('status'))}"
        if dataset.get("duplicate"):
            line += " (the same file was uploaded before: this is that dataset)"
        out(line)
        if dataset.get("status") == "invalid":
            err(error_line(dataset.get("error_field"), _invalid_message(dataset)))
    return 1 if dataset.get("status") == "invalid" else 0


def _invalid_message(dataset: dict) -> str:
    """An invalid dataset's error, with its line when the message does not already start by naming it
    (the validator's messages read "line 3, field 'answer': ...")."""
    message, line = str(dataset.get("error") or "invalid"), dataset.get("error_line")
    if line and not message.startswith(f"line {line}"):
        message += f" (line {line})"
    return message


def cmd_models_list(client: Client, args) -> int:
    rows, count = paged(client, "models/", args)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(("ID", "NAME", "KIND", "PARAMS", "CHAT", "OWNER", "VISIBILITY", "PATH"),
          [(m.get("id"), m.get("name"), m.get("kind"), m.get("num_parameters"), m.get("chat_family"),
            m.get("owner"), m.get("visibility"), m.get("path")) for m in rows], max_width=80)
    footer(len(rows), count, args)
    return 0


def cmd_configs_list(client: Client, args) -> int:
    rows, count = paged(client, "configs/", args)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(("ID", "NAME", "DESCRIPTION", "CREATED"),
          [(c.get("id"), c.get("name"), c.get("description"), when(c.get("created"))) for c in rows])
    footer(len(rows), count, args)
    return 0
