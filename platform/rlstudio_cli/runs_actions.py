"""`rlstudio runs clone`, `runs fork` and `runs delete`: a new run from a run (POST
/api/v1/runs/{id}/clone/ with `name` and `overrides`; POST .../fork/ with `step`, `name` and
`overrides`), and a finished run deleted for good (DELETE /api/v1/runs/{id}/), asked for on a
terminal unless `--yes` is given and refused without it when nobody can answer.
"""
from __future__ import annotations

import sys
from typing import Any

from .client import Client, ClientError
from .common import emit_json, err, out
from .output import clean
from .runs import overrides


def _new_run_body(args, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if args.name is not None:
        body["name"] = args.name
    if args.set:
        body["overrides"] = overrides(args.set)
    return body


def _print_new(run: dict, source: int, verb: str, args) -> None:
    if args.json:
        emit_json(run)
        return
    line = f"run {run.get('id')} {clean(run.get('name'))} {verb} run {source}: {clean(run.get('status'))}"
    if run.get("queue_reason"):
        line += f" ({clean(run.get('queue_reason'))})"
    out(line)


def cmd_runs_clone(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/clone/", _new_run_body(args))
    _print_new(run, args.id, "clones", args)
    return 0


def cmd_runs_fork(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/fork/", _new_run_body(args, step=args.step))
    _print_new(run, args.id, "forks", args)
    return 0


def _confirmed(client: Client, run_id: int) -> bool:
    """Asks on the terminal (the prompt on stderr, the answer from stdin) whether to delete the run,
    named as the API shows it; only `y` or `yes` deletes."""
    run = client.get(f"runs/{run_id}/")
    sys.stderr.write(f"delete run {run_id} {clean(run.get('name'))} ({clean(run.get('status'))}) with its "
                     "metrics, samples, evaluations, exports and folder? This cannot be undone. [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def cmd_runs_delete(client: Client, args) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            raise ClientError("deleting a run cannot be undone: pass --yes to delete it without being asked",
                              field="--yes", exit_code=2)
        if not _confirmed(client, args.id):
            err(f"run {args.id} not deleted")
            return 1
    client.delete(f"runs/{args.id}/")
    out(f"run {args.id} deleted")
    return 0
