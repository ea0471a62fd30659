"""`rlstudio runs clone`, `runs fork` and `runs delete`: a new run from a run (POST
/api/v1/runs/{id}/clone/ with `name` and `overrides`; POST .../fork/ with `step`, `name` and
`overrides`), and finished runs deleted for good (one: DELETE /api/v1/runs/{id}/; several: POST
/api/v1/runs/bulk-delete/, all or none), asked for on a terminal unless `--yes` is given and refused
without it when nobody can answer.
"""
from __future__ import annotations

from typing import Any

from .client import Client
from .common import confirmed, emit_json, err, out
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


def _question(client: Client, run_ids: list[int]) -> str:
    """The question asked before deleting: each run named as the API shows it."""
    named = []
    for run_id in run_ids:
        run = client.get(f"runs/{run_id}/")
        named.append(f"run {run_id} {clean(run.get('name'))} ({clean(run.get('status'))})")
    what = named[0] if len(named) == 1 else f"{len(named)} runs, " + ", ".join(named) + ","
    return f"delete {what} with {'its' if len(named) == 1 else 'their'} metrics, samples, evaluations, exports " \
           "and folder?"


def cmd_runs_delete(client: Client, args) -> int:
    """One run: DELETE /api/v1/runs/{id}/. Several: POST /api/v1/runs/bulk-delete/, all or none (the
    API names every run it cannot delete, and then deletes none)."""
    ids = list(dict.fromkeys(args.ids))  # the API refuses a repeated id; the same run twice is once
    what = "a run" if len(ids) == 1 else "runs"
    if not confirmed(args, lambda: _question(client, ids), what=what):
        err(f"{'run' if len(ids) == 1 else 'runs'} {', '.join(map(str, ids))} not deleted")
        return 1
    if len(ids) == 1:
        client.delete(f"runs/{ids[0]}/")
        out(f"run {ids[0]} deleted")
        return 0
    deleted = (client.post("runs/bulk-delete/", {"ids": ids}) or {}).get("deleted") or []
    out(f"runs {', '.join(str(i) for i in deleted)} deleted")
    return 0
