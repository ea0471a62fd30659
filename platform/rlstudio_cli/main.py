"""`rlstudio`: RL Studio from a terminal or a CI job (docs/cli.md).

    rlstudio login --url https://rl.example.org --token rls_...
    rlstudio runs list --status running
    rlstudio runs launch --name lr-3e-6 --dataset 3 --model 2 --set actor_rollout_ref.actor.optim.lr=3e-6
    rlstudio runs watch 12 && echo trained

Exit status: 0 done; 1 the platform could not be reached or failed (5xx), or a watched run did not
succeed; 2 the request was refused (a 4xx, the API's error printed as `error: <field>: <message>`) or
the command line is wrong; 130 interrupted.
"""
from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from . import __version__
from .client import ApiError, Client, ClientError, Settings, config_path, normalize_url, resolve, write_config_file
from .output import cell, clean, fmt_number, pairs, table, to_json

FINAL_OK = ("succeeded",)
FINAL_BAD = ("failed", "stopped", "lost")
# What `runs watch` and `runs metrics` show by default (verl's names), those the run reports.
DEFAULT_METRICS = ("critic/score/mean", "actor/entropy", "actor/pg_loss", "actor/kl_loss",
                   "response_length/mean", "timing_s/step")
METRICS_PAGE = 5000  # rows a metrics page asks for (the API's most)
LOGIN_HINT = ("run `rlstudio login --url URL --token KEY` with a token from your profile page "
              "(/accounts/profile/), or set RLSTUDIO_URL and RLSTUDIO_TOKEN")


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _json(data: Any) -> None:
    _out(to_json(data))


def _error_line(field: str | None, message: str) -> str:
    message = clean(message)
    field = clean(field) if field else ""
    if field and not message.startswith(f"{field}:"):
        return f"error: {field}: {message}"
    return f"error: {message}"


# --- helpers --------------------------------------------------------------------------------------


def _paged(client: Client, path: str, args, **filters: Any) -> tuple[list[dict], int]:
    """A paginated list's rows (`--limit`/`--offset`, or every page with `--all`) and its count."""
    offset, rows = args.offset, []
    while True:
        page = client.get(path, limit=500 if args.all else args.limit, offset=offset, **filters)
        results, count = page.get("results") or [], int(page.get("count") or 0)
        rows += results
        offset += len(results)
        if not args.all or not results or offset >= count:
            return rows, count


def _footer(shown: int, count: int, args) -> None:
    if shown < count and not args.json:
        _err(f"({shown} of {count}; --all for every one, or --limit/--offset)")


def _id(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an id is a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"an id is 1 or more, got {value}")
    return number


def _when(value: Any) -> str:
    """An ISO time as `YYYY-MM-DD HH:MM` (the API gives it with a zone; shown as it is)."""
    if not value:
        return "-"
    text = clean(value)
    return text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] == "T" else text


def _steps(run: dict) -> str:
    step, total = run.get("step"), run.get("total_steps")
    return f"{step if step is not None else '-'}/{total}" if total else cell(step)


def _metric_names(rows: list[dict], wanted: list[str] | None) -> list[str]:
    present = sorted({k for r in rows for k in (r.get("metrics") or {})})
    if wanted:
        return wanted
    chosen = [m for m in DEFAULT_METRICS if m in present]
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


# --- commands -------------------------------------------------------------------------------------


def cmd_login(args) -> int:
    if not (args.url or os.environ.get("RLSTUDIO_URL")):
        raise ClientError("give the platform's address: --url https://...", field="url", exit_code=2)
    url = normalize_url(args.url or os.environ["RLSTUDIO_URL"])
    token = args.token or os.environ.get("RLSTUDIO_TOKEN")
    if token in (None, "-"):
        if sys.stdin.isatty() and token is None:
            token = getpass.getpass("API token (from your profile page, /accounts/profile/): ")
        else:
            token = sys.stdin.readline()
    token = (token or "").strip()
    if not token:
        raise ClientError("no token given: --token KEY, or type it when asked", field="token", exit_code=2)
    client = Client(Settings(url=url, token=token))
    try:
        client.get("runs/", limit=1)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise ClientError(f"the platform refused this token ({clean(exc.message)}); nothing was saved",
                              field="token", exit_code=2) from None
        raise
    host = urllib.parse.urlsplit(url).hostname or ""
    if url.startswith("http://") and host not in ("localhost", "127.0.0.1", "::1"):
        _err(f"warning: {url} is plain HTTP: the token travels unencrypted")
    path = config_path()
    write_config_file(path, url=url, token=token)
    _out(f"logged in to {url}; saved to {path} (readable by you only)")
    return 0


RUN_COLUMNS = ("ID", "NAME", "STATUS", "STEP", "REWARD", "GPUS", "PROJECT", "CREATED")


def cmd_runs_list(client: Client, args) -> int:
    rows, count = _paged(client, "runs/", args, status=args.status, project=args.project, q=args.query,
                         tag=args.tag, scope=args.scope)
    if args.json:
        _json({"count": count, "results": rows})
        return 0
    table(RUN_COLUMNS, [(r.get("id"), r.get("name"), r.get("status"), _steps(r), r.get("latest_reward"),
                         r.get("gpus"), r.get("project"), _when(r.get("created"))) for r in rows])
    _footer(len(rows), count, args)
    return 0


def _show_run(run: dict) -> None:
    items = [("id", run.get("id")), ("name", run.get("name")), ("owner", run.get("owner")),
             ("status", run.get("status"))]
    if run.get("queue_reason"):
        items.append(("queue reason", run.get("queue_reason")))
    items += [("step", _steps(run)), ("reward", run.get("latest_reward")), ("gpus", run.get("gpus")),
              ("dataset", run.get("dataset")), ("model", run.get("model")), ("project", run.get("project")),
              ("created", _when(run.get("created"))), ("started", _when(run.get("started"))),
              ("finished", _when(run.get("finished")))]
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
    if metrics:
        _out("\nlatest metrics:")
        width = max(len(clean(k)) for k in metrics)
        for key in sorted(metrics):
            _out(f"  {clean(key):<{width}}  {fmt_number(metrics[key])}")


def cmd_runs_show(client: Client, args) -> int:
    run = client.get(f"runs/{args.id}/")
    if args.json:
        _json(run)
    else:
        _show_run(run)
    return 0


def cmd_runs_launch(client: Client, args) -> int:
    body: dict[str, Any] = {"name": args.name, "dataset": args.dataset, "model": args.model, "gpus": args.gpus}
    for key, value in (("val_dataset", args.val_dataset), ("reward_model_id", args.reward_model),
                       ("preset", args.preset), ("config_id", args.config_id), ("project", args.project),
                       ("tool_set", args.tool_set)):
        if value is not None:
            body[key] = value
    if args.config:
        body["config"] = _load_config_file(args.config)
    if args.set:
        for item in args.set:
            if "=" not in item or not item.split("=", 1)[0].strip():
                raise ClientError(f"expected key=value, got {item!r}", field="--set", exit_code=2)
        body["overrides"] = list(args.set)
    run = client.post("runs/", body)
    for warning in run.get("warnings") or []:
        _err(f"warning: {clean(warning.get('field'))}: {clean(warning.get('message'))}")
    if args.json:
        _json(run)
        return 0
    line = f"run {run.get('id')} {clean(run.get('name'))}: {clean(run.get('status'))}"
    if run.get("queue_reason"):
        line += f" ({clean(run.get('queue_reason'))})"
    _out(line)
    return 0


def cmd_runs_stop(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/stop/", {"force": args.force, "checkpoint": not args.no_checkpoint})
    if args.json:
        _json(run)
    else:
        _out(f"run {run.get('id')} {clean(run.get('name'))}: {clean(run.get('status'))}")
    return 0


def cmd_runs_resume(client: Client, args) -> int:
    run = client.post(f"runs/{args.id}/resume/")
    if args.json:
        _json(run)
    else:
        _out(f"run {run.get('id')} {clean(run.get('name'))} resumes run {args.id}: {clean(run.get('status'))}")
    return 0


def cmd_runs_metrics(client: Client, args) -> int:
    rows = _all_metric_rows(client, args.id)
    if args.json:
        _json(rows)
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
        _err(f"run {args.id} has reported no metrics yet")
        return 0
    names = _metric_names(rows, _split_metrics(args.metric))
    table(["STEP", "TIME"] + names,
          [[r.get("step"), _when(r.get("time"))] + [(r.get("metrics") or {}).get(n) for n in names] for r in rows])
    return 0


def cmd_runs_logs(client: Client, args) -> int:
    body = client.get(f"runs/{args.id}/logs/", tail=args.tail)
    lines = body.get("lines") or []
    if args.json:
        _json(lines)
        return 0
    for line in lines:
        _out(f"{_when(line.get('time'))}  {clean(line.get('level')).upper():<7} {clean(line.get('message'), lines=True)}")
    return 0


def _watch_line(row: dict, names: list[str], total: Any) -> str:
    metrics = row.get("metrics") or {}
    step = f"step {row.get('step')}" + (f"/{total}" if total else "")
    shown = [f"{clean(n)}={fmt_number(metrics[n])}" for n in names if n in metrics]
    return "  ".join([step] + shown)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)  # one name for the tests to replace (the server thread keeps time.sleep)


WATCH_RETRIES = 5  # consecutive failed polls (connection, 5xx) `runs watch` rides out


def cmd_runs_watch(client: Client, args) -> int:
    """New steps as they come, one line each; 0 when the run succeeds, 1 when it fails, is stopped or
    is lost. A poll the platform fails (unreachable, a 5xx: a restart) is tried again, up to
    WATCH_RETRIES times in a row; a refusal (4xx: the run is gone, the token revoked) ends the watch."""
    wanted = _split_metrics(args.metric)
    after: int | None = None
    status = None
    names: list[str] | None = wanted
    failures = 0
    while True:
        try:  # the run before its metrics: once it reads final, every row it reported is stored
            run = client.get(f"runs/{args.id}/")
            rows = _all_metric_rows(client, args.id, after=after)
        except ClientError as exc:
            if exc.exit_code == 2 or failures >= WATCH_RETRIES:
                raise
            failures += 1
            _err(f"warning: {clean(exc.message)}; trying again ({failures} of {WATCH_RETRIES})")
            _sleep(args.interval)
            continue
        failures = 0
        if rows:
            if names is None:
                names = _metric_names(rows, None)
            for row in rows:
                _out(_watch_line(row, names, run.get("total_steps")))
            after = rows[-1].get("step")
        if run.get("status") != status:
            status = run.get("status")
            note = f" ({clean(run.get('queue_reason'))})" if status == "queued" and run.get("queue_reason") else ""
            _err(f"run {args.id} {clean(run.get('name'))}: {clean(status)}{note}")
        if status in FINAL_OK:
            return 0
        if status in FINAL_BAD:
            if run.get("error"):
                _err(f"error: {clean(run.get('error'))}")
            return 1
        _sleep(args.interval)


DATASET_COLUMNS = ("ID", "NAME", "STATUS", "FORMAT", "ROWS", "SPLIT", "OWNER", "VISIBILITY", "CREATED")


def _dataset_row(d: dict) -> list:
    return [d.get("id"), d.get("name"), d.get("status"), d.get("format"), d.get("num_rows"), d.get("split"),
            d.get("owner"), d.get("visibility"), _when(d.get("created"))]


def cmd_datasets_list(client: Client, args) -> int:
    rows, count = _paged(client, "datasets/", args)
    if args.json:
        _json({"count": count, "results": rows})
        return 0
    table(DATASET_COLUMNS, [_dataset_row(d) for d in rows])
    _footer(len(rows), count, args)
    return 0


def cmd_datasets_upload(client: Client, args) -> int:
    path = Path(args.file)
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}", field="file", exit_code=2) from None
    fields = {"name": args.name or "", "preset": args.preset, "split": args.split}
    if args.stats_model is not None:
        fields["stats_model"] = str(args.stats_model)
    dataset = client.upload("datasets/", fields=fields, file_field="file", filename=path.name, content=content)
    while args.wait and dataset.get("status") == "validating":
        _sleep(2.0)
        dataset = client.get(f"datasets/{dataset['id']}/")
    if args.json:
        _json(dataset)
    else:
        line = f"dataset {dataset.get('id')} {clean(dataset.get('name'))}: {clean(dataset.get('status'))}"
        if dataset.get("duplicate"):
            line += " (the same file was uploaded before: this is that dataset)"
        _out(line)
        if dataset.get("status") == "invalid":
            where = f" (line {dataset.get('error_line')})" if dataset.get("error_line") else ""
            _err(_error_line(dataset.get("error_field"), f"{dataset.get('error')}{where}"))
    return 1 if dataset.get("status") == "invalid" else 0


def cmd_models_list(client: Client, args) -> int:
    rows, count = _paged(client, "models/", args)
    if args.json:
        _json({"count": count, "results": rows})
        return 0
    table(("ID", "NAME", "KIND", "PARAMS", "CHAT", "OWNER", "VISIBILITY", "PATH"),
          [(m.get("id"), m.get("name"), m.get("kind"), m.get("num_parameters"), m.get("chat_family"),
            m.get("owner"), m.get("visibility"), m.get("path")) for m in rows], max_width=80)
    _footer(len(rows), count, args)
    return 0


def cmd_configs_list(client: Client, args) -> int:
    rows, count = _paged(client, "configs/", args)
    if args.json:
        _json({"count": count, "results": rows})
        return 0
    table(("ID", "NAME", "DESCRIPTION", "CREATED"),
          [(c.get("id"), c.get("name"), c.get("description"), _when(c.get("created"))) for c in rows])
    _footer(len(rows), count, args)
    return 0


# --- the command line -----------------------------------------------------------------------------


def _connection_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS  # a subcommand's flag wins over the top-level one
    parser.add_argument("--url", default=default, help="the platform's address (else RLSTUDIO_URL, else login's)")
    parser.add_argument("--token", default=default,
                        help="a personal API token (else RLSTUDIO_TOKEN, else login's; never printed)")


def _list_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="the API's answer as JSON")
    parser.add_argument("--limit", type=int, default=50, help="rows per page (1 to 500, default 50)")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--all", action="store_true", help="every row, page after page")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlstudio", description="RL Studio's command-line client (docs/cli.md).")
    parser.add_argument("--version", action="version", version=f"rlstudio {__version__}")
    _connection_flags(parser, top=True)
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    def command(group_parsers, name: str, help: str, func) -> argparse.ArgumentParser:
        p = group_parsers.add_parser(name, help=help, description=help)
        _connection_flags(p, top=False)
        p.set_defaults(func=func)
        return p

    login = sub.add_parser("login", help="check a token against the platform and save it with its URL",
                           description=f"Saves the URL and token to {config_path()} (mode 0600) once the "
                           "platform accepts the token.")
    login.add_argument("--url", default=argparse.SUPPRESS, help="the platform's address, e.g. https://rl.example.org")
    login.add_argument("--token", default=argparse.SUPPRESS,
                       help="a personal API token (profile page); '-' or none: read it from stdin")
    login.set_defaults(func=None, login=True)

    runs = sub.add_parser("runs", help="list, show, launch, stop, resume and watch runs").add_subparsers(
        dest="command", metavar="COMMAND", required=True)
    p = command(runs, "list", "the runs you see, newest first", cmd_runs_list)
    p.add_argument("--status", help="one state: queued, submitting, running, stopping, stopped, succeeded, "
                   "failed, lost")
    p.add_argument("--project", type=_id, help="a project id")
    p.add_argument("--tag")
    p.add_argument("--query", "-q", help="text in the name or note")
    p.add_argument("--scope", choices=("mine", "shared"))
    _list_flags(p)

    p = command(runs, "show", "one run", cmd_runs_show)
    p.add_argument("id", type=_id)
    p.add_argument("--json", action="store_true")

    p = command(runs, "launch", "launch a run (POST /api/v1/runs/)", cmd_runs_launch)
    p.add_argument("--name", required=True)
    p.add_argument("--dataset", type=_id, required=True, help="a ready dataset's id")
    p.add_argument("--model", type=_id, required=True, help="a model's id")
    p.add_argument("--val-dataset", type=_id)
    p.add_argument("--reward-model", type=_id, help="a catalog reward model's id")
    config = p.add_mutually_exclusive_group()
    config.add_argument("--preset", help="a trainer recipe (default cpu_smoke)")
    config.add_argument("--config", metavar="FILE", help="a whole trainer config, .json or .yaml")
    config.add_argument("--config-id", type=_id, help="a saved config's id")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a dotted config key, e.g. actor_rollout_ref.rollout.n=8 (repeat it)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs (default 0: the CPU)")
    p.add_argument("--project", type=_id, help="one of your projects' id")
    p.add_argument("--tool-set", help="a registered tool set's name")
    p.add_argument("--json", action="store_true")

    p = command(runs, "stop", "stop a run (a queued one at once)", cmd_runs_stop)
    p.add_argument("id", type=_id)
    p.add_argument("--force", action="store_true", help="kill it now")
    p.add_argument("--no-checkpoint", action="store_true", help="do not save a checkpoint first")
    p.add_argument("--json", action="store_true")

    p = command(runs, "resume", "a new run from this run's last checkpoint", cmd_runs_resume)
    p.add_argument("id", type=_id)
    p.add_argument("--json", action="store_true")

    p = command(runs, "metrics", "every metric row of a run", cmd_runs_metrics)
    p.add_argument("id", type=_id)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV: step, time, then every metric")
    fmt.add_argument("--json", action="store_true")
    p.add_argument("--metric", "-m", action="append", help="metrics to show (repeat, or comma-separated)")

    p = command(runs, "logs", "the trainer's log events", cmd_runs_logs)
    p.add_argument("id", type=_id)
    p.add_argument("--tail", type=int, default=500, help="the last N (default 500, at most 10,000)")
    p.add_argument("--json", action="store_true")

    p = command(runs, "watch", "print new steps until the run ends; exit 0 when it succeeded", cmd_runs_watch)
    p.add_argument("id", type=_id)
    p.add_argument("--interval", type=float, default=5.0, help="seconds between polls (default 5)")
    p.add_argument("--metric", "-m", action="append", help="metrics to show (repeat, or comma-separated)")

    datasets = sub.add_parser("datasets", help="list and upload datasets").add_subparsers(
        dest="command", metavar="COMMAND", required=True)
    p = command(datasets, "list", "your datasets and the shared ones", cmd_datasets_list)
    _list_flags(p)
    p = command(datasets, "upload", "upload a file (validated in the background)", cmd_datasets_upload)
    p.add_argument("file")
    p.add_argument("--name", help="default: the file's name")
    p.add_argument("--preset", default="auto", choices=("auto", "gsm8k", "messages", "verl"))
    p.add_argument("--split", default="train", choices=("train", "val"))
    p.add_argument("--stats-model", type=_id, help="a model whose tokenizer counts the prompts' tokens")
    p.add_argument("--wait", action="store_true", help="wait until validated; exit 1 when it is invalid")
    p.add_argument("--json", action="store_true")

    models = sub.add_parser("models", help="list models").add_subparsers(dest="command", metavar="COMMAND",
                                                                          required=True)
    _list_flags(command(models, "list", "your models and the shared ones", cmd_models_list))
    configs = sub.add_parser("configs", help="list saved configs").add_subparsers(dest="command", metavar="COMMAND",
                                                                                   required=True)
    _list_flags(command(configs, "list", "your saved configs", cmd_configs_list))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, a usage error (argparse printed it)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        if getattr(args, "login", False):
            return cmd_login(args)
        client = Client(resolve(url=args.url, token=args.token))
        return args.func(client, args)
    except ClientError as exc:
        _err(_error_line(exc.field, exc.message))
        for extra in exc.errors[1:]:
            _err(_error_line(extra.get("field"), str(extra.get("message", ""))))
        if exc.status == 401:
            _err(f"hint: not logged in, or the token was revoked: {LOGIN_HINT}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rlstudio runs list | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
