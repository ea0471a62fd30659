"""`rlstudio`: RL Studio from a terminal or a CI job (docs/cli.md).

    rlstudio login --url https://rl.example.org --token rls_...
    rlstudio runs list --status running
    rlstudio runs launch --name lr-3e-6 --dataset 3 --model 2 --set actor_rollout_ref.actor.optim.lr=3e-6
    rlstudio runs watch 12 && echo trained

This module owns the command line and nothing behind it: the argument parser (every command, its
flags and which function runs it), the dispatch (login, or a `Client` from the resolved URL and token
handed to the command) and `main()`, which turns a `ClientError` into `error: ...` lines and an exit
status. The commands live in `runs`, `runs_actions`, `catalog`, `projects`, `evaluations`, `exports`,
`sweeps` and `login`; HTTP and settings in `client`.

Exit status: 0 done; 1 the platform could not be reached or failed (5xx), a watched run did not
succeed, or a deletion was not answered yes; 2 the request was refused (a 4xx, the API's error printed as `error: <field>: <message>`) or
the command line is wrong; 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .catalog import cmd_configs_list, cmd_datasets_list, cmd_datasets_upload, cmd_models_list
from .client import Client, ClientError, config_path, resolve
from .common import err, error_line, id_arg
from .evaluations import (SAMPLING, cmd_evaluations_delete, cmd_evaluations_list, cmd_evaluations_show,
                          cmd_evaluations_start, cmd_evaluations_stop, steps_arg)
from .exports import cmd_exports_delete, cmd_exports_download, cmd_exports_list, cmd_exports_show, cmd_exports_start
from .login import LOGIN_HINT, cmd_login
from .projects import cmd_projects_create, cmd_projects_delete, cmd_projects_edit, cmd_projects_list, cmd_projects_show
from .runs import (cmd_runs_launch, cmd_runs_list, cmd_runs_logs, cmd_runs_metrics, cmd_runs_resume,
                   cmd_runs_show, cmd_runs_stop, cmd_runs_watch)
from .runs_actions import cmd_runs_clone, cmd_runs_delete, cmd_runs_fork
from .sharing import add_share_flags, cmd_projects_share, cmd_runs_share
from .sweeps import cmd_sweeps_launch, cmd_sweeps_list, cmd_sweeps_show, cmd_sweeps_stop


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


def _yes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when stdin is not a terminal)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlstudio", description="RL Studio's command-line client (docs/cli.md).")
    parser.add_argument("--version", action="version", version=f"rlstudio {__version__}")
    _connection_flags(parser, top=True)
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    def command(group_parsers, name: str, help: str, func, **kw) -> argparse.ArgumentParser:
        p = group_parsers.add_parser(name, help=help, description=help, **kw)
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
    p.add_argument("--project", type=id_arg, help="a project id")
    p.add_argument("--tag")
    p.add_argument("--query", "-q", help="text in the name or note")
    p.add_argument("--scope", choices=("mine", "shared"))
    _list_flags(p)

    p = command(runs, "show", "one run", cmd_runs_show)
    p.add_argument("id", type=id_arg)
    p.add_argument("--all-metrics", action="store_true",
                   help="every metric of the last step (default: verl's headline ones it reported)")
    p.add_argument("--json", action="store_true")

    p = command(runs, "launch", "launch a run (POST /api/v1/runs/)", cmd_runs_launch)
    p.add_argument("--name", required=True)
    p.add_argument("--dataset", type=id_arg, help="a ready dataset's id (required: a saved config holds none)")
    p.add_argument("--model", type=id_arg, help="a model's id (required: a saved config holds none)")
    p.add_argument("--val-dataset", type=id_arg)
    p.add_argument("--reward-model", type=id_arg, help="a catalog reward model's id")
    config = p.add_mutually_exclusive_group()
    config.add_argument("--preset", help="a trainer recipe (default cpu_smoke)")
    config.add_argument("--config", metavar="FILE", help="a whole trainer config, .json or .yaml")
    config.add_argument("--config-id", type=id_arg, help="a saved config's id")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a dotted config key, e.g. actor_rollout_ref.rollout.n=8 (repeat it)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs (default 0: the CPU)")
    p.add_argument("--project", type=id_arg, help="one of your projects' id")
    p.add_argument("--tool-set", help="a registered tool set's name")
    p.add_argument("--json", action="store_true")

    p = command(runs, "stop", "stop a run (a queued one at once)", cmd_runs_stop)
    p.add_argument("id", type=id_arg)
    p.add_argument("--force", action="store_true", help="kill it now")
    p.add_argument("--no-checkpoint", action="store_true", help="do not save a checkpoint first")
    p.add_argument("--json", action="store_true")

    p = command(runs, "resume", "a new run from this run's last checkpoint", cmd_runs_resume)
    p.add_argument("id", type=id_arg)
    p.add_argument("--json", action="store_true")

    p = command(runs, "clone", "a new run with this run's dataset, model and config (POST .../clone/)",
                cmd_runs_clone)
    p.add_argument("id", type=id_arg)
    p.add_argument("--name", help="the new run's name (default: derived from the original)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a dotted config key (repeat it)")
    p.add_argument("--json", action="store_true")

    p = command(runs, "fork", "a new run from one kept checkpoint of this finished run (POST .../fork/)",
                cmd_runs_fork)
    p.add_argument("id", type=id_arg)
    p.add_argument("--step", type=int, help="a kept checkpoint's step (default: the newest)")
    p.add_argument("--name", help="the new run's name (default: '<name> (fork @ N)')")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change a key a fork may change, e.g. actor_rollout_ref.actor.optim.lr=1e-6 (repeat it)")
    p.add_argument("--json", action="store_true")

    p = command(runs, "delete", "delete finished runs and everything of them, for good (several: all or none)",
                cmd_runs_delete)
    p.add_argument("ids", type=id_arg, nargs="+", metavar="ID")
    _yes_flag(p)

    p = command(runs, "share", "who reads a run besides you and staff (read-only); change it with the flags",
                cmd_runs_share)
    p.add_argument("id", type=id_arg)
    add_share_flags(p, visibility=True)

    p = command(runs, "metrics", "every metric row of a run", cmd_runs_metrics)
    p.add_argument("id", type=id_arg)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV: step, time, then every metric")
    fmt.add_argument("--json", action="store_true")
    p.add_argument("--metric", "-m", action="append", help="metrics to show (repeat, or comma-separated)")

    p = command(runs, "logs", "the trainer's log events", cmd_runs_logs)
    p.add_argument("id", type=id_arg)
    p.add_argument("--tail", type=int, default=500, help="the last N (default 500, at most 10,000)")
    p.add_argument("--json", action="store_true")

    p = command(runs, "watch", "print new steps until the run ends; exit 0 when it succeeded", cmd_runs_watch)
    p.add_argument("id", type=id_arg)
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between looks when the run reports nothing (default 5)")
    p.add_argument("--poll", action="store_true",
                   help="only look every --interval seconds: no live stream (a websocket) of the run")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="give up (exit 1) when the run has not ended after this long (default: wait for it)")
    p.add_argument("--metric", "-m", action="append", help="metrics to show (repeat, or comma-separated)")

    sweeps = sub.add_parser("sweeps", help="list, show, launch and stop sweeps (a grid or random search)"
                            ).add_subparsers(dest="command", metavar="COMMAND", required=True)
    _list_flags(command(sweeps, "list", "your sweeps (staff: everyone's), newest first", cmd_sweeps_list))
    p = command(sweeps, "show", "one sweep: its mode, seed, axes and runs (the best marked)", cmd_sweeps_show)
    p.add_argument("id", type=id_arg)
    p.add_argument("--metric", help="what the best run is chosen by: reward or a held-out val-core metric "
                   "(default: the held-out metric most runs report, else reward)")
    p.add_argument("--json", action="store_true")
    p = command(sweeps, "launch", "launch a sweep: a run per combination of the axes' values, or with --random "
                "--runs N runs drawn from them (POST /api/v1/sweeps/)", cmd_sweeps_launch)
    p.add_argument("--name", required=True, help="each run is named <name>/<key=value,...>")
    p.add_argument("--dataset", type=id_arg, help="a ready dataset's id (required)")
    p.add_argument("--model", type=id_arg, help="a model's id (required)")
    p.add_argument("--val-dataset", type=id_arg)
    p.add_argument("--reward-model", type=id_arg, help="a catalog reward model's id")
    config = p.add_mutually_exclusive_group()
    config.add_argument("--preset", help="a trainer recipe (default cpu_smoke)")
    config.add_argument("--config", metavar="FILE", help="a whole trainer config, .json or .yaml")
    config.add_argument("--config-id", type=id_arg, help="a saved config's id")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a dotted config key for every run (repeat it)")
    p.add_argument("--axis", action="append", metavar="KEY=VALUES",
                   help="a config key and its values, KEY=V1,V2,... (read as the web form reads them); with "
                   "--random also a range KEY=MIN..MAX[:log][:int] (repeat it: 1 to 4 axes)")
    p.add_argument("--random", action="store_true", help="random search: --runs N runs drawn from the axes")
    p.add_argument("--runs", type=int, help="with --random: how many runs to draw")
    p.add_argument("--seed", type=int, help="with --random: the seed (default: the server picks one and shows it)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs of each run (default 0: the CPU)")
    p.add_argument("--tool-set", help="a registered tool set's name")
    p.add_argument("--json", action="store_true")
    p = command(sweeps, "stop", "stop every run of a sweep that has not ended (a queued one at once)",
                cmd_sweeps_stop)
    p.add_argument("id", type=id_arg)
    _yes_flag(p)
    p.add_argument("--json", action="store_true")

    datasets = sub.add_parser("datasets", help="list and upload datasets").add_subparsers(
        dest="command", metavar="COMMAND", required=True)
    p = command(datasets, "list", "your datasets and the shared ones", cmd_datasets_list)
    _list_flags(p)
    p = command(datasets, "upload", "upload a file (validated in the background)", cmd_datasets_upload)
    p.add_argument("file")
    p.add_argument("--name", help="default: the file's name")
    p.add_argument("--preset", default="auto", choices=("auto", "gsm8k", "messages", "verl"))
    p.add_argument("--split", default="train", choices=("train", "val"))
    p.add_argument("--stats-model", type=id_arg, help="a model whose tokenizer counts the prompts' tokens")
    p.add_argument("--wait", action="store_true", help="wait until validated; exit 1 when it is invalid")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="with --wait: give up (exit 1) after this long (default 600)")
    p.add_argument("--json", action="store_true")

    models = sub.add_parser("models", help="list models").add_subparsers(dest="command", metavar="COMMAND",
                                                                          required=True)
    _list_flags(command(models, "list", "your models and the shared ones", cmd_models_list))
    configs = sub.add_parser("configs", help="list saved configs").add_subparsers(dest="command", metavar="COMMAND",
                                                                                   required=True)
    _list_flags(command(configs, "list", "your saved configs", cmd_configs_list))

    projects = sub.add_parser("projects", help="list, create, show, edit, share and delete projects").add_subparsers(
        dest="command", metavar="COMMAND", required=True)
    p = command(projects, "list", "the projects you see, newest first", cmd_projects_list)
    p.add_argument("--scope", choices=("mine", "shared"))
    _list_flags(p)
    p = command(projects, "create", "a new project of yours", cmd_projects_create)
    p.add_argument("name")
    p.add_argument("--description")
    p.add_argument("--json", action="store_true")
    p = command(projects, "show", "one project (and whom it is shared with, for its owner)", cmd_projects_show)
    p.add_argument("id", type=id_arg)
    p.add_argument("--json", action="store_true")
    p = command(projects, "edit", "rename a project or change its description", cmd_projects_edit)
    p.add_argument("id", type=id_arg)
    p.add_argument("--name", help="the new name")
    p.add_argument("--description", help="the new description ('' clears it)")
    p.add_argument("--json", action="store_true")
    p = command(projects, "delete", "delete a project (its runs stay, in no project)", cmd_projects_delete)
    p.add_argument("id", type=id_arg)
    _yes_flag(p)
    p = command(projects, "share", "whom a project and its runs are shared with (read-only); change it with the "
                "flags", cmd_projects_share)
    p.add_argument("id", type=id_arg)
    add_share_flags(p, visibility=False)

    evaluations = sub.add_parser("evaluations", help="list, start, show, stop and delete evaluations of a run's "
                                 "checkpoints or of a catalog model").add_subparsers(dest="command", metavar="COMMAND",
                                                                                     required=True)
    model_flag = "a catalog model's evaluations, in place of RUN_ID"
    p = command(evaluations, "list", "a run's (or with --model a model's) evaluations, newest first",
                cmd_evaluations_list, usage="rlstudio evaluations list (RUN_ID | --model MODEL_ID) [--json]")
    p.add_argument("run", type=id_arg, nargs="?", metavar="RUN_ID")
    p.add_argument("--model", type=id_arg, metavar="MODEL_ID", help=model_flag)
    p.add_argument("--json", action="store_true")
    p = command(evaluations, "start", "evaluate checkpoints of a run (or with --model a catalog model) on a dataset "
                "(a job within your quota)", cmd_evaluations_start,
                usage="rlstudio evaluations start (RUN_ID | --model MODEL_ID) --dataset ID --k K [options]")
    p.add_argument("run", type=id_arg, nargs="?", metavar="RUN_ID")
    p.add_argument("--model", type=id_arg, metavar="MODEL_ID", help=model_flag)
    p.add_argument("--steps", type=steps_arg, action="append", metavar="S[,S...]",
                   help="checkpoint steps to evaluate (the API's `checkpoints`; repeat it or separate with commas)")
    p.add_argument("--include-base", action="store_true", help="evaluate the run's base model too (column base)")
    p.add_argument("--dataset", type=id_arg, required=True, help="a ready dataset's id")
    p.add_argument("--k", type=int, required=True, help="samples per prompt (1 to 16)")
    p.add_argument("--max-prompts", type=int, help="the dataset's first N rows (1 to 64; default 32)")
    p.add_argument("--gpus", type=int, help="0 (the default: the CPU) or 1")
    for key, kind in zip(SAMPLING, (float, float, int, int, int)):
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, dest=key, help=f"sampling.{key}")
    p.add_argument("--reward", help="with --model: the reward to score with (a built-in or registered name; "
                   "default: `default`, by each row's data_source)")
    p.add_argument("--json", action="store_true")
    one = "(RUN_ID | --model MODEL_ID) EVAL_ID"
    ids_help = "RUN_ID EVAL_ID, or with --model the EVAL_ID alone"
    p = command(evaluations, "show", "one evaluation: its figures per column, --prompts its matrix",
                cmd_evaluations_show, usage=f"rlstudio evaluations show {one} [--prompts] [--change C] [--json]")
    p.add_argument("ids", type=id_arg, nargs="+", metavar="ID", help=ids_help)
    p.add_argument("--model", type=id_arg, metavar="MODEL_ID", help=model_flag)
    p.add_argument("--prompts", action="store_true", help="also each prompt's mean@k per column")
    p.add_argument("--change", choices=("better", "worse", "same"), help="only the prompts that changed so")
    p.add_argument("--json", action="store_true")
    p = command(evaluations, "stop", "stop a queued or running evaluation", cmd_evaluations_stop,
                usage=f"rlstudio evaluations stop {one} [--json]")
    p.add_argument("ids", type=id_arg, nargs="+", metavar="ID", help=ids_help)
    p.add_argument("--model", type=id_arg, metavar="MODEL_ID", help=model_flag)
    p.add_argument("--json", action="store_true")
    p = command(evaluations, "delete", "delete a finished evaluation, its figures and transcripts, for good",
                cmd_evaluations_delete, usage=f"rlstudio evaluations delete {one} [--yes]")
    p.add_argument("ids", type=id_arg, nargs="+", metavar="ID", help=ids_help)
    p.add_argument("--model", type=id_arg, metavar="MODEL_ID", help=model_flag)
    _yes_flag(p)

    exports = sub.add_parser("exports", help="list, start, show, download and delete exports of a run's checkpoints"
                             ).add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = command(exports, "list", "a run's exports, newest first", cmd_exports_list)
    p.add_argument("run", type=id_arg, metavar="RUN_ID")
    p.add_argument("--json", action="store_true")
    p = command(exports, "start", "export a checkpoint as a Hugging Face folder (registered as a model)",
                cmd_exports_start)
    p.add_argument("run", type=id_arg, metavar="RUN_ID")
    p.add_argument("--step", type=int, required=True, help="a checkpoint's global step")
    p.add_argument("--json", action="store_true")
    p = command(exports, "show", "one export: its state, files and catalog model", cmd_exports_show)
    p.add_argument("run", type=id_arg, metavar="RUN_ID")
    p.add_argument("id", type=id_arg, metavar="EXPORT_ID")
    p.add_argument("--json", action="store_true")
    p = command(exports, "download", "a succeeded export's folder as a .tar.gz", cmd_exports_download)
    p.add_argument("run", type=id_arg, metavar="RUN_ID")
    p.add_argument("id", type=id_arg, metavar="EXPORT_ID")
    p.add_argument("--output", "-o", required=True, metavar="FILE",
                   help="where to write the .tar.gz; '-': to stdout (nothing else is written there)")
    p.add_argument("--force", action="store_true", help="overwrite FILE when it exists")
    p = command(exports, "delete", "delete an export: its catalog model, record and folder (the checkpoint stays)",
                cmd_exports_delete)
    p.add_argument("run", type=id_arg, metavar="RUN_ID")
    p.add_argument("id", type=id_arg, metavar="EXPORT_ID")
    _yes_flag(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # a bare `rlstudio`: what it can do, not a usage error
        parser.print_help()
        return 0
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
        err(error_line(exc.field, exc.message))
        for extra in exc.errors[1:]:
            err(error_line(extra.get("field"), str(extra.get("message", ""))))
        if exc.status == 401:
            err(f"hint: not logged in, or the token was revoked: {LOGIN_HINT}")
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
