"""The operator's experiment trackers (W&B, MLflow) for platform runs: which are enabled, and what a run's
job is given to report to them.

A tracker is enabled only where the operator configured it (settings from the environment: W&B by
RLSTUDIO_WANDB_API_KEY, MLflow by RLSTUDIO_MLFLOW_TRACKING_URI); only then may a user list it in
`trainer.logger` (the gate refuses it otherwise). The address and every secret come from the operator,
never from a user: a user sets only names (`trainer.project_name`, `trainer.experiment_name`).

How it reaches the job (`run_secrets.write_tracker_files`): each secret in an owner-only file of the run's
folder, whose path is in the job's environment (`secret_files`); the non-secret settings (W&B's server
and entity, MLflow's URI without credentials, its user name) in the environment (`plain_env`), with the
run's lineage id, display name and tags (`run_env`) and the user's view of the config in a file of the
run folder. Ray's job API shows a job's `runtime_env.env_vars` to anyone who can reach it: no secret is
ever put there. The files go when the run ends (`run_secrets.remove_token`).
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any, Iterable
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

WANDB, MLFLOW = "wandb", "mlflow"
NAMES = (WANDB, MLFLOW)
# What enables each tracker (the refusal and the docs name it).
ENABLED_BY = {WANDB: "RLSTUDIO_WANDB_API_KEY", MLFLOW: "RLSTUDIO_MLFLOW_TRACKING_URI"}
# The file of the run folder each secret travels in, and the job's variable that names the file:
# (setting, file name, job variable).
SECRETS = {
    WANDB: (("RLSTUDIO_WANDB_API_KEY", "wandb_api_key", "RLSTUDIO_WANDB_API_KEY_FILE"),),
    MLFLOW: (
        (
            "RLSTUDIO_MLFLOW_TRACKING_TOKEN",
            "mlflow_tracking_token",
            "RLSTUDIO_MLFLOW_TRACKING_TOKEN_FILE",
        ),
        (
            "RLSTUDIO_MLFLOW_TRACKING_PASSWORD",
            "mlflow_tracking_password",
            "RLSTUDIO_MLFLOW_TRACKING_PASSWORD_FILE",
        ),
    ),
}
SECRET_FILES = tuple(name for group in SECRETS.values() for _setting, name, _var in group)
# Non-secret settings passed to the job as they are (setting = job variable).
PLAIN = {
    WANDB: ("RLSTUDIO_WANDB_BASE_URL", "RLSTUDIO_WANDB_ENTITY"),
    MLFLOW: ("RLSTUDIO_MLFLOW_TRACKING_URI", "RLSTUDIO_MLFLOW_TRACKING_USERNAME"),
}
CONFIG_FILE = "tracker_config.json"


def _setting(name: str) -> str:
    return str(getattr(settings, name, "") or "")


def enabled() -> tuple[str, ...]:
    """The trackers the operator configured, in NAMES' order."""
    return tuple(name for name in NAMES if _setting(ENABLED_BY[name]))


def installed(name: str) -> bool:
    """Whether the tracker's package imports in this interpreter (the one a run's job runs:
    `launch.entrypoint` uses sys.executable)."""
    return importlib.util.find_spec(name) is not None


def listed(loggers: Iterable[str]) -> list[str]:
    """The trackers among `loggers`."""
    return [name for name in NAMES if name in set(loggers)]


def secret_files(loggers: Iterable[str]) -> dict[str, tuple[str, str]]:
    """{job variable: (file name in the run folder, secret)} for the listed trackers' secrets that are set."""
    out = {}
    for tracker in listed(loggers):
        for setting, file_name, variable in SECRETS[tracker]:
            value = _setting(setting)
            if value:
                out[variable] = (file_name, value)
    return out


def plain_env(loggers: Iterable[str]) -> dict[str, str]:
    """The listed trackers' non-secret settings that are set, for the job's environment."""
    return {
        name: _setting(name)
        for tracker in listed(loggers)
        for name in PLAIN[tracker]
        if _setting(name)
    }


def lineage_root(run) -> Any:
    """The first run of `run`'s resume chain (itself when it is no resume): resumes of one owner's run
    continue its tracker run. Bounded, in case of a cycle in hand-edited records."""
    root, seen = run, {run.pk}
    for _ in range(1000):
        parent = root.parent if root.parent_kind == "resume" else None
        if parent is None or parent.owner_id != run.owner_id or parent.pk in seen:
            break
        seen.add(parent.pk)
        root = parent
    return root


def lineage_id(run) -> str:
    """The tracker run id of `run`'s resume chain: its first run's id and creation time (stable across
    resumes, unique across databases, as `launch.submission_id_for`)."""
    root = lineage_root(run)
    return f"rlstudio-{root.pk}-{root.created.strftime('%Y%m%d%H%M%S%f')}"


def fork_env(run) -> dict[str, str]:
    """For the chain of a fork (its first run forked from a run still recorded): the tracker run id of
    the parent's chain (RLSTUDIO_TRACKER_FORK_OF) and the checkpoint's step (RLSTUDIO_TRACKER_FORK_STEP,
    "" when its folder names none), which the sinks record on the fork's new tracker run; else {}."""
    from trainer.step_dirs import step_of

    root = lineage_root(run)
    if root.parent_kind != "fork" or root.parent is None:
        return {}
    step = step_of(root.resume_from)
    return {"RLSTUDIO_TRACKER_FORK_OF": lineage_id(root.parent),
            "RLSTUDIO_TRACKER_FORK_STEP": "" if step is None else str(step)}


def run_env(run, loggers: Iterable[str]) -> dict[str, str]:
    """What the trainer's tracker sinks name the run by: the lineage id, the platform run's name, tags,
    and for a fork what it was forked from (`fork_env`)."""
    if not listed(loggers):
        return {}
    return {
        "RLSTUDIO_TRACKER_RUN_ID": lineage_id(run),
        "RLSTUDIO_TRACKER_RUN_NAME": run.name or f"run-{run.pk}",
        "RLSTUDIO_TRACKER_TAGS": json.dumps(list(run.tags or [])),
        **fork_env(run),
    }


def uri_has_credentials(uri: str) -> bool:
    """Whether a URI carries a user name or password (user:pass@host), which must not go to Ray's job API."""
    try:
        parts = urlsplit(uri)
        return bool(parts.username or parts.password)
    except ValueError:
        return False


def refusal(name: str) -> str | None:
    """Why a run may not list tracker `name` now (None: it may)."""
    if name not in enabled():
        return (
            f"{name!r} is not enabled on this platform: the operator has not configured it "
            f"({ENABLED_BY[name]}); ask them, or choose from console, jsonl, tensorboard"
        )
    if not installed(name):
        return (
            f"{name!r} is enabled by the operator but its package is not installed where runs start "
            f"(pip install '.[trackers]'); ask the operator"
        )
    return None


@checks.register()
def check_trackers(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A tracker the operator enabled whose package does not import (every run listing it would be
    refused), and credentials put in a setting that travels in Ray's job environment."""
    found: list[checks.CheckMessage] = []
    for name in enabled():
        if not installed(name):
            found.append(
                checks.Error(
                    f"{ENABLED_BY[name]} enables {name} for platform runs, but the {name!r} package does not "
                    f"import in this environment, which is the one runs start with",
                    hint="pip install '.[trackers]' (it is not in requirements.txt), or unset the variable",
                    id="runs.E101",
                )
            )
    for name in ("RLSTUDIO_MLFLOW_TRACKING_URI", "RLSTUDIO_WANDB_BASE_URL"):
        if uri_has_credentials(_setting(name)):
            found.append(
                checks.Error(
                    f"{name} holds credentials (user:password@); it is passed to the run's job in Ray's job "
                    f"environment, which anyone on Ray's dashboard can read",
                    hint="put the user in RLSTUDIO_MLFLOW_TRACKING_USERNAME and the secret in "
                    "RLSTUDIO_MLFLOW_TRACKING_PASSWORD or _TOKEN, which travel in files",
                    id="runs.E102",
                )
            )
    if _setting("RLSTUDIO_MLFLOW_TRACKING_TOKEN") and not _setting("RLSTUDIO_MLFLOW_TRACKING_URI"):
        found.append(
            checks.Warning(
                "RLSTUDIO_MLFLOW_TRACKING_TOKEN is set without RLSTUDIO_MLFLOW_TRACKING_URI: "
                "MLflow stays disabled",
                id="runs.W101",
            )
        )
    return found
