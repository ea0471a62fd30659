"""How a run becomes a trainer config and a Ray job: config building, freezing and the entrypoint.

Pure functions of their inputs (plus settings for folders and URLs); the services call them.

- `build_config`: preset (a trainer recipe) or a whole config object, then dotted overrides, then the
  dataset / model paths; validated by the trainer's own schema (`trainer.config.validate`), errors
  re-raised as `ConfigInvalid(key, message)` so that the API and the form name the key.
- `freeze_spec`: the exact config handed to the trainer: run dir under RLSTUDIO_STATE_DIR/runs/<id>/,
  the loggers (jsonl always: it is the heartbeat the reconcile falls back on).
- `entrypoint` / `job_env`: `cd <repo> && exec <venv python> -m trainer run <spec> --output <dir>`
  (exec: Ray's SIGTERM reaches the trainer itself, not a shell in between).
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from django.conf import settings

from trainer.config import Config, ConfigError, apply_overrides, validate

# The trainer's sinks the platform always wants; "http" only once the trainer knows it (LIVE adds it).
WANTED_LOGGERS = ("console", "jsonl", "http")
DEFAULT_PRESET = "cpu_smoke"


class ConfigInvalid(ValueError):
    """The config a user gave does not pass the trainer's schema; `key` names the culprit."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def dataset_path(dataset) -> str:
    """The file the trainer reads for a dataset: the converted rows when the catalog made them."""
    for name in ("converted_path", "rows_path", "converted_file_path"):
        value = getattr(dataset, name, "")
        if value:
            return str(value)
    return str(dataset.file_path)


def preset_config(name: str) -> Config:
    from trainer.recipes import REGISTRY, get_recipe

    if name not in REGISTRY:
        raise ConfigInvalid("preset", f"unknown preset {name!r}; one of: {', '.join(sorted(REGISTRY))}")
    return get_recipe(name)


def parse_config_text(text: str) -> dict[str, Any]:
    """A whole config as YAML (JSON is YAML too); errors carry the line."""
    import yaml

    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigInvalid("config", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigInvalid("config", "the config must be a mapping of sections (data, actor_rollout_ref, …)")
    return data


def build_config(
    *,
    preset: str | None = None,
    config: Mapping[str, Any] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    dataset=None,
    val_dataset=None,
    model=None,
) -> dict[str, Any]:
    """The validated config of a new run, as the nested dict stored on it.

    `config` (a whole config) wins over `preset`; neither means the default preset. Dataset and model
    paths are set last: they belong to the catalog objects, not to what the user typed.
    """
    try:
        if config:
            if not isinstance(config, Mapping):
                raise ConfigInvalid("config", "must be an object")
            cfg = Config.from_dict(dict(config))
        else:
            cfg = preset_config(preset or DEFAULT_PRESET)
        if overrides:
            if isinstance(overrides, str) or not isinstance(overrides, (Mapping, list, tuple)):
                raise ConfigInvalid("overrides", "must be an object of dotted keys or a list of key=value")
            cfg = apply_overrides(cfg, overrides)
        paths: dict[str, Any] = {}
        if dataset is not None:
            paths["data.train_files"] = dataset_path(dataset)
        if val_dataset is not None:
            paths["data.val_files"] = dataset_path(val_dataset)
        if model is not None:
            paths["actor_rollout_ref.model.path"] = str(model.path)
        if paths:
            cfg = apply_overrides(cfg, paths)
        validate(cfg, require_paths=dataset is not None)
    except ConfigError as exc:
        raise ConfigInvalid(exc.key, exc.message) from None
    return cfg.to_dict()


def total_steps_of(config: Mapping[str, Any]) -> int | None:
    steps = (config.get("trainer") or {}).get("total_training_steps")
    return int(steps) if isinstance(steps, int) else None


def runs_dir() -> Path:
    return Path(settings.RUNS_DIR)


def run_dir(run_id: int) -> Path:
    return runs_dir() / str(run_id)


def _allowed_loggers() -> tuple[str, ...]:
    """The loggers of WANTED_LOGGERS the installed trainer accepts (validate names what it allows)."""
    out = []
    for name in WANTED_LOGGERS:
        try:
            validate(Config.from_dict({"trainer": {"logger": [name]}}), require_paths=False)
        except ConfigError as exc:
            if exc.key == "trainer.logger":
                continue
        out.append(name)
    return tuple(out)


def freeze_spec(*, run_id: int, config: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    """The config the trainer runs: the run's own, with its output folder and the platform's sinks."""
    loggers = list((config.get("trainer") or {}).get("logger") or [])
    for name in _allowed_loggers():
        if name not in loggers:
            loggers.append(name)
    try:
        cfg = apply_overrides(
            Config.from_dict(dict(config)),
            {"trainer.default_local_dir": str(out_dir), "trainer.logger": loggers},
        )
        validate(cfg)
    except ConfigError as exc:
        raise ConfigInvalid(exc.key, exc.message) from None
    return cfg.to_dict()


def write_spec(spec: Mapping[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "spec.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(spec, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path


def entrypoint(*, spec_path: Path, out_dir: Path) -> str:
    """The shell command Ray runs: from the repo, with this platform's interpreter."""
    repo = Path(settings.BASE_DIR)
    python = Path(sys.executable)
    return (f"cd {shlex.quote(str(repo))} && exec {shlex.quote(str(python))} -m trainer run "
            f"{shlex.quote(str(spec_path))} --output {shlex.quote(str(out_dir))}")


def ingest_url(run_id: int) -> str:
    return f"{settings.RLSTUDIO_PUBLIC_URL.rstrip('/')}/api/v1/runs/{run_id}/events/"


def job_env(*, run_id: int, token: str) -> dict[str, str]:
    """Environment of the job (also of Ray's job supervisor, which reads the stop grace period)."""
    repo = str(Path(settings.BASE_DIR))
    return {
        "RLSTUDIO_INGEST_URL": ingest_url(run_id),
        "RLSTUDIO_INGEST_TOKEN": token,
        "RLSTUDIO_RUN_ID": str(run_id),
        "PYTHONPATH": repo,
        "PYTHONUNBUFFERED": "1",
        # Ray sends SIGTERM on stop_job and SIGKILLs after this many seconds: our grace period.
        "RAY_JOB_STOP_WAIT_TIME_S": str(int(settings.RLSTUDIO_STOP_GRACE_S)),
        # The http sink's last flush at exit must fit well inside that grace: what it cannot send
        # stays in events.jsonl / its spool, and the platform learns the outcome from Ray anyway.
        "RLSTUDIO_INGEST_CLOSE_TIMEOUT": str(int(settings.RLSTUDIO_INGEST_CLOSE_TIMEOUT_S)),
    }


def submission_id_for(run) -> str:
    """Derived from the run (id + creation time): stable across retries, unique across databases."""
    return f"rlstudio-run-{run.pk}-{run.created.strftime('%Y%m%d%H%M%S%f')}"


def read_latest_checkpoint(out_dir: Path) -> Path | None:
    """<out_dir>/global_step_N named by the trainer's commit marker, if any."""
    marker = out_dir / "latest_checkpointed_iteration.txt"
    try:
        step = int(marker.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    path = out_dir / f"global_step_{step}"
    return path if path.is_dir() else None


def read_events_tail(path: Path, *, max_bytes: int = 256 * 1024) -> list[dict[str, Any]]:
    """The last events of an events.jsonl (the part of it in its last `max_bytes`), oldest first."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            chunk = f.read()
    except FileNotFoundError:
        return []
    lines = chunk.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first is probably cut
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written right now
        if isinstance(event, dict):
            out.append(event)
    return out
