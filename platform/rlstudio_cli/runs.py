"""The `rlstudio runs ...` commands: list, show (the last step's headline metrics, or every one),
launch (a `--config` file read as JSON or YAML, `--set` overrides checked for `key=value`, the
dataset and model asked for by name when missing), stop, resume, logs, metrics (every step-keyed page of
/api/v1/runs/<id>/metrics/, as a table, CSV or JSON) and watch (new steps until the run ends, woken by
the run's live stream (`live`) where the platform gives one, riding out up to WATCH_RETRIES failed
polls in a row). Also which metrics they show by default and which
statuses end a watch.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from . import common, live
from .client import Client, ClientError
from .common import emit_json, err, footer, out, paged, when
from .output import cell, clean, fmt_number, pairs, table

FINAL_OK = ("succeeded",)
FINAL_BAD = ("failed", "stopped", "lost")
# What `runs watch` and `runs metrics` show by default (verl's names), those the run reports.
DEFAULT_METRICS = ("critic/score/mean", "actor/entropy", "actor/pg_loss", "actor/kl_loss",
                   "response_length/mean", "timing_s/step")
# What `runs show` prints of the last step's metrics (`--all-metrics`: every one): verl's headline
# names, reward first, then the held-out `val-core/...` ones it reported.
SHOW_METRICS = ("critic/score/mean", "critic/rewards/mean", "response_length/mean", "response_length/clip_ratio",
                "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm", "actor/lr", "critic/vf_loss",
                "perf/throughput", "timing_s/step")
SHOW_FALLBACK = 12  # names shown when the step reported none of SHOW_METRICS
VAL_CORE = "val-core/"  # verl's held-out metrics, reported on validation steps only (step 0 and every test_freq)
METRICS_PAGE = 5000  # rows a metrics page asks for (the API's most)
LIVE_GAP_S = 1.0  # the shortest time between two looks the live stream wakes
WATCH_RETRIES = 5  # consecutive failed polls (connection, 5xx) `runs watch` rides out


def _steps(run: dict) -> str:
    step, total = run.get("step"), run.get("total_steps")
    return f"{step if step is not None else '-'}/{total}" if total else cell(step)


def _metric_names(rows: list[dict], wanted: list[str] | None) -> list[str]:
    """`wanted`, else the headline metrics the rows report and their held-out ones (`val-core/...`, the
    validation steps' rewards: the curve a run is judged by), else the first six they report."""
    present = sorted({k for r in rows for k in (r.get("metrics") or {})})
    if wanted:
        return wanted
    chosen = [m for m in DEFAULT_METRICS if m in present] + [m for m in present if m.startswith(VAL_CORE)]
    return chosen or present[:6]


def _split_metrics(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [m.strip() for v in values for m in v.split(",") if m.strip()]


def _all_metric_rows(client: Client, run_id: int, *, after: int | None = None) -> list[dict]:
    """Every metric row of the run after step `after`, page after page (`next_after_step` until null)."""
    rows: list[dict] = []
    while True:
        page = client.get(f"runs/{run_id}/metrics/", limit=METRICS_PAGE, after_step=after)
        rows += page.get("steps") or []
        after = page.get("next_after_step")
        if after is None:
            return rows


def _load_config_file(path: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}", field="--config", exit_code=2) from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml  # optional: the client needs only the standard library
        except ImportError:
            raise ClientError("reading YAML needs PyYAML (pip install pyyaml); or give the config as JSON",
                              field="--config", exit_code=2) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ClientError(f"{path} is not valid YAML: {exc}", field="--config", exit_code=2) from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ClientError(f"{path} is not valid JSON: {exc}", field="--config", exit_code=2) from None
    if not isinstance(data, dict):
        raise ClientError(f"{path} must hold one object (a trainer config)", field="--config", exit_code=2)
    return data


def overrides(items: list[str]) -> list[str]:
    """`--set key=value` items as the API's `overrides` list, each checked for a key and an `=`."""
    for item in items:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ClientError(f"expected key=value, got {item!r}", field="--set", exit_code=2)
    return list(items)


RUN_COLUMNS = ("ID", "NAME", "STATUS", "STEP", "REWARD", "GPUS", "PROJECT", "CREATED")


def cmd_runs_list(client: Client, args) -> int:
    rows, count = paged(client, "runs/", args, status=args.status, project=args.project, q=args.query,
                         tag=args.tag, scope=args.scope)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(RUN_COLUMNS, [(r.get("id"), r.get("name"), r.get("status"), _steps(r), r.get("latest_reward"),
                         r.get("gpus"), r.get("project"), when(r.get("created"))) for r in rows])
    footer(len(rows), count, args)
    return 0


def _show_run(run: dict, checkpoints: list | None = None, *, all_metrics: bool = False) -> None:
    items = [("id", run.get("id")), ("name", run.get("name")), ("owner", run.get("owner")),
             ("status", run.get("status"))]
    if run.get("queue_reason"):
        items.append(("queue reason", run.get("queue_reason")))
    items += [("step", _steps(run)), ("reward", run.get("latest_reward")), ("gpus", run.get("gpus")),
              ("dataset", run.get("dataset")), ("model", run.get("model")), ("project", run.get("project")),
              ("created", when(run.get("created"))), ("started", when(run.get("started"))),
              ("finished", when(run.get("finished")))]
    if run.get("val_dataset"):
        items.insert(items.index(("model", run.get("model"))), ("val dataset", run.get("val_dataset")))
    if checkpoints is not None:  # the steps `evaluations start --steps`, `exports start --step` and `fork --step` take
        items.append(("checkpoints", checkpoints or "-"))
    if run.get("parent"):
        items.append(("parent", f"{run.get('parent')} ({clean(run.get('parent_kind'))})"))
    if run.get("tags"):
        items.append(("tags", run.get("tags")))
    if run.get("note"):
        items.append(("note", run.get("note")))
    if run.get("error"):
        items.append(("error", run.get("error")))
    pairs(items)
    metrics = run.get("latest_metrics") or {}
    if not metrics:
        return
    names = sorted(metrics) if all_metrics else summary_metrics(metrics)
    out("\nlatest metrics:" if all_metrics or len(names) == len(metrics) else
        f"latest metrics ({len(names)} of {len(metrics)}; --all-metrics for every one):")
    width = max(len(clean(k)) for k in names)
    for key in names:
        out(f"  {clean(key):<{width}}  {fmt_number(metrics[key])}")


def summary_metrics(metrics: dict) -> list[str]:
    """The names `runs show` prints of a step's metrics: SHOW_METRICS in that order and the held-out
    `val-core/...` ones, those the step reported; else (a trainer reporting none of verl's headline
    names) the first SHOW_FALLBACK in name order."""
    chosen = [m for m in SHOW_METRICS if m in metrics] + sorted(m for m in metrics if m.startswith(VAL_CORE))
    return chosen or sorted(metrics)[:SHOW_FALLBACK]


def cmd_runs_show(client: Client, args) -> int:
    run = client.get(f"runs/{args.id}/")
    if args.json:
        emit_json(run)
    else:
        _show_run(run, (client.get(f"runs/{args.id}/checkpoints/") or {}).get("steps") or [],
                  all_metrics=args.all_metrics)
    return 0


def cmd_runs_launch(client: Client, args) -> int:
    for flag, value, kind in (("--dataset", args.dataset, "dataset"), ("--model", args.model, "model")):
        if value is None:  # asked here: the API would only say the field is required
            saved = " (a saved config, --config-id, holds the trainer's settings only, not its dataset or model)" \
                if args.config_id is not None else ""
            raise ClientError(f"a run needs a {kind}: give {flag} ID (`rlstudio {kind}s list`){saved}",
                              field=flag, exit_code=2)
    body: dict[str, Any] = {"name": args.name, "dataset": args.dataset, "model": args.model, "gpus": args.gpus}
    for key, value in (("val_dataset", args.val_dataset), ("reward_model_id", args.reward_model),
                       ("preset", args.preset), ("config_id", args.config_id), ("project", args.project),
                       ("tool_set", args.tool_set)):
        if value is not None:
            body[key] = value
    if args.config:
        body["config"] = _load_config_file(args.config)
    if args.set:
        body["overrides"] = overrides(args.set)
    run = client.post("runs/", body)
    for warning in run.get("warnings") or []:
        err(f"warning: {clean(warning.get('field'))}: {clean(warning.get('message'))}")
    if args.json:
        emit_json(run)
        return 0
    line = f"run {run.get('id')} {clean(run.get('name'))}: {clean(run.get('status'))}"
    if run.get("queue_reason"):
        line += f" ({clean(run.get('queue_reason'))})"
    out(line)
    return 0


def cmd_runs_stop(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/stop/", {"force": args.force, "checkpoint": not args.no_checkpoint})
    if args.json:
        emit_json(run)
    else:
        out(f"run {run.get('id')} {clean(run.get('name'))}: {clean(run.get('status'))}")
    return 0


def cmd_runs_resume(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/resume/")
    if args.json:
        emit_json(run)
    else:
        out(f"run {run.get('id')} {clean(run.get('name'))} resumes run {args.id}: {clean(run.get('status'))}")
    return 0


def cmd_runs_metrics(client: Client, args) -> int:
    rows = _all_metric_rows(client, args.id)
    if args.json:
        emit_json(rows)
        return 0
    if args.csv:
        import csv

        names = sorted({k for r in rows for k in (r.get("metrics") or {})})
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["step", "time"] + [clean(n) for n in names])
        for r in rows:
            m = r.get("metrics") or {}
            # As the server's metrics.csv: empty where the step did not report it, nan where it was
            # not finite (the JSON pages give null for nan and inf alike).
            writer.writerow([r.get("step"), clean(r.get("time"))]
                            + [("" if n not in m else "nan" if m[n] is None else m[n]) for n in names])
        return 0
    if not rows:
        err(f"run {args.id} has reported no metrics yet")
        return 0
    names = _metric_names(rows, _split_metrics(args.metric))
    table(["STEP", "TIME"] + names,
          [[r.get("step"), when(r.get("time"))] + [(r.get("metrics") or {}).get(n) for n in names] for r in rows])
    return 0


def cmd_runs_logs(client: Client, args) -> int:
    body = client.get(f"runs/{args.id}/logs/", tail=args.tail)
    lines = body.get("lines") or []
    if args.json:
        emit_json(lines)
        return 0
    for line in lines:
        out(f"{when(line.get('time'))}  {clean(line.get('level')).upper():<7} {clean(line.get('message'), lines=True)}")
    return 0


def _watch_line(row: dict, wanted: list[str] | None, total: Any) -> str:
    """One step: the metrics named with -m, else this row's headline and held-out ones (a validation
    step, step 0 before training included, has its val-core metrics; a training step its own)."""
    metrics = row.get("metrics") or {}
    names = _metric_names([row], wanted)
    step = f"step {row.get('step')}" + (f"/{total}" if total else "")
    shown = [f"{clean(n)}={fmt_number(metrics[n])}" for n in names if n in metrics]
    return "  ".join([step] + shown)


def cmd_runs_watch(client: Client, args) -> int:
    """New steps as they come, one line each; 0 when the run succeeds, 1 when it fails, is stopped or
    is lost. After its first look it opens the run's live stream (`live.RunStream`, unless --poll), so
    a step is fetched as soon as the run reports it; between reports, and without the stream, it looks
    every --interval seconds. A poll the platform fails (unreachable, a 5xx: a restart) is tried again,
    up to WATCH_RETRIES times in a row; a refusal (4xx: the run is gone, the token revoked) ends the
    watch, and so does `--timeout` (exit 1; the time counted is the waits between looks)."""
    wanted = _split_metrics(args.metric)
    after: int | None = None
    status = None
    failures = 0
    waited = 0.0
    stream: live.RunStream | None = None
    live_tried = bool(args.poll)
    try:
        while True:
            if args.timeout is not None and waited >= args.timeout:
                raise ClientError(f"run {args.id} is still {status} after {args.timeout:g} s (--timeout)", exit_code=1)
            try:  # the run before its metrics: once it reads final, every row it reported is stored
                run = client.get(f"runs/{args.id}/")
                rows = _all_metric_rows(client, args.id, after=after)
            except ClientError as exc:
                if exc.exit_code == 2 or failures >= WATCH_RETRIES:
                    raise
                failures += 1
                err(f"warning: {clean(exc.message)}; trying again ({failures} of {WATCH_RETRIES})")
                common.sleep(args.interval)
                waited += args.interval
                continue
            failures = 0
            if rows:
                for row in rows:
                    out(_watch_line(row, wanted, run.get("total_steps")))
                after = rows[-1].get("step")
            if run.get("status") != status:
                status = run.get("status")
                note = f" ({clean(run.get('queue_reason'))})" if status == "queued" and run.get("queue_reason") else ""
                err(f"run {args.id} {clean(run.get('name'))}: {clean(status)}{note}")
            if status in FINAL_OK:
                return 0
            if status in FINAL_BAD:
                if run.get("error"):
                    err(f"error: {clean(run.get('error'))}")
                return 1
            if not live_tried:
                live_tried = True
                stream = _open_stream(client, args)
                if stream is not None:
                    continue  # look once more: what came before the stream opened is fetched now
            if stream is None:
                common.sleep(args.interval)
                waited += args.interval
                continue
            started = time.monotonic()
            try:
                if stream.wait(args.interval):
                    # A run reporting many times a second is looked at at most once per LIVE_GAP_S; a
                    # report that arrives during the gap is in the look that follows it.
                    common.sleep(max(0.0, LIVE_GAP_S - (time.monotonic() - started)))
            except live.StreamClosed as exc:
                err(f"note: live updates stopped ({clean(str(exc))}); looking every {args.interval:g} s")
                stream.close()
                stream = None
            waited += time.monotonic() - started
    finally:
        if stream is not None:
            stream.close()


def _open_stream(client: Client, args) -> live.RunStream | None:
    """The run's live stream, or None (said on stderr) where the platform does not give one."""
    try:
        return live.RunStream(client.settings.url, client.settings.token, args.id)
    except live.StreamClosed as exc:
        err(f"note: no live updates ({clean(str(exc))}); looking every {args.interval:g} s")
        return None
