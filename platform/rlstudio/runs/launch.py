"""How a run becomes a trainer config and a Ray job: config building, freezing and the entrypoint.

Pure functions of their inputs (plus settings for folders and URLs); the services call them.

- `build_config`: a preset, a whole config a user typed, or a stored config, then dotted overrides;
  what the user changed goes through the config gate (the `gate` package), then the platform's own keys are
  written (`platform_values`: data and model paths, resources, the reward function's file); validated by
  the trainer's schema (`trainer.config.validate`), errors re-raised as `ConfigInvalid(key, message)`
  so that the API and the form name the key.
- `freeze_spec`: the exact config handed to the trainer, made again from the run's record: its
  folder under RLSTUDIO_STATE_DIR/runs/<id>/, the resume source the platform recorded, the tool set,
  the loggers (jsonl always: it is the heartbeat the reconcile falls back on).
- `entrypoint` / `job_env`: `cd <repo> && exec <venv python> -m trainer run <spec> --output <dir>`
  (exec: Ray's SIGTERM reaches the trainer itself, not a shell in between); the ingest token travels in
  a file of the run folder, never in the job's environment, and so do the operator's tracker secrets
  (`run_secrets`).
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from django.conf import settings

from trainer.config import LOGGERS, Config, ConfigError, apply_overrides, validate

from . import gate, trackers
from .adapt import adapt_preset, node_layout
from .errors import ConfigInvalid
from .reward_routing import check_default_reward

# The trainer's sinks the platform always adds (jsonl: the heartbeat the reconcile falls back on; http:
# the ingest API), each one of trainer.config.LOGGERS (tests/rlstudio/runs/test_loggers.py).
WANTED_LOGGERS = ("console", "jsonl", "http")
DEFAULT_PRESET = "cpu_smoke"


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
    """A whole config as YAML (JSON is YAML too), read by the user-YAML parser (`user_yaml`: no anchors
    or aliases, bounded size, node count and depth); errors carry the line."""
    import yaml

    from .user_yaml import YamlRefused, load_user_yaml

    try:
        data = load_user_yaml(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if isinstance(exc, YamlRefused):
            raise ConfigInvalid("config", f"{exc.problem}{where}") from None
        raise ConfigInvalid("config", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigInvalid("config", "the config must be a mapping of sections (data, actor_rollout_ref, …)")
    return data


def check_shape(field: str, value: Any) -> None:
    """ConfigInvalid(field) when a config the user gave as an object is past the user-YAML parser's
    bounds (`user_yaml.shape_problem`: node count and nesting), before anything walks it."""
    from .user_yaml import shape_problem

    problem = shape_problem(value)
    if problem is not None:
        raise ConfigInvalid(field, problem)


def reward_names() -> list[str]:
    """Reward functions a user may pick by `reward.name`: the trainer's built-ins and the operator's."""
    from rlstudio.registry.services import reward_function_names
    from trainer.rewards import registered_rewards

    return sorted(set(registered_rewards()) | set(reward_function_names()))


def _tool_names() -> list[str]:
    from trainer.tools import registered_tools

    return registered_tools()


def tracker_refusals() -> dict[str, str | None]:
    """Why each tracker may not be listed in trainer.logger now (None: it may; `trackers.refusal`)."""
    return {name: trackers.refusal(name) for name in gate.TRACKER_LOGGERS}


def _gate(before: Config, after: Config) -> None:
    gate.check(before=before.to_dict(), after=after.to_dict(), reward_names=reward_names(),
               tool_names=_tool_names(), trackers=tracker_refusals())


_DEFAULT_PARSER = Config().actor_rollout_ref.rollout.multi_turn.format


def platform_values(*, dataset=None, val_dataset=None, model=None, gpus: int = 0, reward_name: str = "default",
                    out_dir: Path | None = None, resume_from: str = "", tool_config: Path | None = None,
                    loggers: Sequence[str] = (), reward_model=None, fork: bool = False) -> dict[str, Any]:
    """The keys only the platform sets (gate.PLATFORM_KEYS), from catalog objects and the run's record.

    Paths come from the dataset and model records (the reward model's from the catalog reward model the
    run chose, which also turns reward_model.enable on), the run's folder and a checkpoint the platform
    recorded (a `fork` starts from it with the config's fork-changeable keys: trainer.resume_fork);
    code from the operator's reward registry; resources from the run's GPUs and settings
    (more GPUs than one node has, RLSTUDIO_GPUS_PER_NODE: whole nodes, trainer.nnodes > 1); the run's
    disk from settings (the cap on checkpoints kept, the folder's budget).
    """
    try:
        nnodes, per_node = node_layout(gpus, settings.RLSTUDIO_GPUS_PER_NODE)
    except ValueError as exc:
        raise ConfigInvalid("gpus", f"{exc} (RLSTUDIO_GPUS_PER_NODE={settings.RLSTUDIO_GPUS_PER_NODE})") from None
    values: dict[str, Any] = {
        "data.train_files": dataset_path(dataset) if dataset is not None else "",
        "data.val_files": dataset_path(val_dataset) if val_dataset is not None else None,
        "actor_rollout_ref.model.path": str(model.path) if model is not None else "",
        "actor_rollout_ref.model.tokenizer_path": None,
        # PPO with GAE: the value model is a copy of the run's model with a scalar head
        "critic.model.path": str(model.path) if model is not None else None,
        "actor_rollout_ref.model.trust_remote_code": bool(getattr(model, "trust_remote_code", False)),
        # The parser the registration check proved reads this model's tool calls (the schema's default
        # for a model registered before the check, or one whose template renders no tool calls).
        "actor_rollout_ref.rollout.multi_turn.format": getattr(model, "tool_parser", "") or _DEFAULT_PARSER,
        "reward_model.model.path": str(reward_model.path) if reward_model is not None else None,
        "reward_model.model.trust_remote_code": bool(getattr(reward_model, "trust_remote_code", False)),
        "custom_reward_function.path": None,
        "custom_reward_function.name": "compute_score",
        "tools.config_path": str(tool_config) if tool_config is not None else None,
        "trainer.default_local_dir": str(out_dir) if out_dir is not None else "outputs/run",
        "trainer.resume_mode": "resume_path" if resume_from else "auto",
        "trainer.resume_from_path": resume_from or None,
        "trainer.resume_fork": bool(fork and resume_from),
        "trainer.device": "cuda" if gpus > 0 else "cpu",
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": per_node,
        "trainer.launcher": "auto",
        "trainer.torch_threads": settings.RLSTUDIO_RUN_TORCH_THREADS or None,
        "trainer.max_ckpt_to_keep_cap": checkpoint_cap(),
        "trainer.disk_budget_gb": disk_budget_gb(),
    }
    if reward_name:
        from trainer.rewards import registered_rewards

        if reward_name not in registered_rewards():
            from rlstudio.registry.services import RegistryRefused, reward_function_resolve

            try:
                resolved = reward_function_resolve(name=reward_name)
            except RegistryRefused as exc:
                raise ConfigInvalid("reward.name", str(exc)) from None
            values["custom_reward_function.path"] = resolved.path
            values["custom_reward_function.name"] = resolved.function
    if loggers:
        values["trainer.logger"] = list(loggers)
    if reward_model is not None:
        values["reward_model.enable"] = True
    return values


def step_limits() -> gate.StepLimits:
    """The operator's bounds on one step (settings; `gate.check_step_size` applies them)."""
    return gate.StepLimits(trajectories=int(settings.RLSTUDIO_MAX_TRAJECTORIES_PER_STEP),
                           tokens=int(settings.RLSTUDIO_MAX_TOKENS_PER_STEP),
                           reported_samples=int(settings.RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP))


def check_sizes(config: Mapping[str, Any], val_dataset=None, model=None, dataset=None, *,
                resume: bool = False) -> None:
    """One batch of the training `dataset` (`gate.check_train_size` with its rows; None: not checked),
    the operator's bounds on one step, on one validation, on the checkpoints a run keeps and on
    one checkpoint's size (`gate.check_step_size`, `gate.check_validation_size` with the validation
    dataset's rows, `gate.check_checkpoints_kept`, `gate.check_checkpoint_size` with `model`'s
    estimate; a `resume`'s is refused on `run`: it sets no key); GateRefused names the key to lower."""
    gate.check_train_size(config, getattr(dataset, "num_rows", None))
    limits = step_limits()
    gate.check_step_size(config, limits)
    gate.check_validation_size(config, limits, getattr(val_dataset, "num_rows", None))
    gate.check_checkpoints_kept(config, checkpoint_cap())
    gate.check_checkpoint_size(config, checkpoint_size(model, config), disk_budget_gb(), resume=resume)


def checkpoint_size(model, config: Mapping[str, Any]):
    """`checkpoint_estimate.CheckpointEstimate` of one checkpoint of a run of `config` on the catalog
    `model`; None without a model, or when its config.json cannot be read (no estimate: the trainer's
    own measure after each checkpoint still holds the run to the budget)."""
    if model is None:
        return None
    from .checkpoint_estimate import estimate_for
    from .memory_estimate import ModelConfigUnreadable

    try:
        return estimate_for(model=model, cfg=config)
    except ModelConfigUnreadable:
        return None


def checkpoint_cap() -> int | None:
    """The operator's cap on checkpoints kept per run (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN; 0: None, no cap)."""
    cap = int(settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN)
    return cap if cap > 0 else None


def disk_budget_gb() -> float | None:
    """GiB a run's folder may hold after a checkpoint (RLSTUDIO_RUN_DISK_BUDGET_GB; 0: None, no budget)."""
    budget = float(settings.RLSTUDIO_RUN_DISK_BUDGET_GB)
    return budget if budget > 0 else None


def check_reward_model(cfg: Config, reward_model, *, require: bool) -> None:
    """reward_model.enable without a catalog reward model: refused on reward_model_id (the path is the
    platform's to write), when a run is being made (`require`)."""
    if require and cfg.reward_model.enable and reward_model is None:
        raise ConfigInvalid("reward_model_id", "reward_model.enable needs a reward model: choose a catalog "
                                               "reward model (kind reward) by reward_model_id")


def build_config(
    *,
    preset: str | None = None,
    config: Mapping[str, Any] | None = None,
    base: Mapping[str, Any] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    dataset=None,
    val_dataset=None,
    model=None,
    gpus: int = 0,
    adapt: bool | None = None,
    reward_model=None,
    checkpoints: bool = True,
    resume: bool = False,
) -> dict[str, Any]:
    """The validated config of a new run, as the nested dict stored on it.

    Where it starts: `base` (a stored config: a saved one, or the run a clone or resume comes from;
    its platform keys are reset and its values re-checked against their bounds), else `config` (a
    whole config the user typed: every key changed from the schema's defaults goes through the gate),
    else `preset` (the default preset when none), fitted to the run's GPUs (or CPU) by
    `adapt.adapt_preset` when `adapt` (None: when a run's config is built, i.e. a dataset is given;
    a saved config keeps the preset as written). The user's `overrides` go through the gate too.
    Then the platform's own keys are written from the dataset, model and GPUs (`platform_values`), and
    the whole is checked by the trainer's schema and against the operator's bounds on one step
    (`check_sizes`: one training batch within the dataset's rows, trajectories, tokens and reported
    samples per step and per validation, the cap
    on checkpoints kept, and one checkpoint's size against the disk budget per run, unless the config
    is not for a run: `checkpoints` False, an evaluation's, which writes none). A `resume`'s config
    (`base` alone, the run's own) is refused over that budget on `run`, not on a key it cannot set.
    """
    try:
        if base is not None:
            if not isinstance(base, Mapping):
                raise ConfigInvalid("config", "must be an object")
            cfg = Config.from_dict(gate.user_view(base))
            gate.check_bounds(cfg.to_dict())
        elif config:
            if not isinstance(config, Mapping):
                raise ConfigInvalid("config", "must be an object")
            check_shape("config", config)
            cfg = Config.from_dict(dict(config))
            _gate(Config(), cfg)
        else:
            cfg = preset_config(preset or DEFAULT_PRESET)
            if adapt or (adapt is None and dataset is not None):
                cfg = adapt_preset(cfg, gpus=gpus).config
        if overrides:
            if isinstance(overrides, str) or not isinstance(overrides, (Mapping, list, tuple)):
                raise ConfigInvalid("overrides", "must be an object of dotted keys or a list of key=value")
            check_shape("overrides", overrides)
            changed = apply_overrides(cfg, overrides)
            _gate(cfg, changed)
            cfg = changed
        cfg = apply_overrides(cfg, platform_values(
            dataset=dataset, val_dataset=val_dataset, model=model, gpus=gpus,
            reward_name=cfg.reward.name, reward_model=reward_model))
        check_reward_model(cfg, reward_model, require=dataset is not None)
        # a stored config (clone, resume, saved) listing a tracker the operator has since disabled
        gate.check_trackers(cfg.to_dict(), tracker_refusals())
        check_default_reward(cfg, dataset=dataset, val_dataset=val_dataset)
        validate(cfg, require_paths=dataset is not None)
        # an evaluation (`checkpoints` False) draws no training batches from its dataset
        check_sizes(cfg.to_dict(), val_dataset, model if checkpoints else None,
                    dataset=dataset if checkpoints else None, resume=resume)
    except ConfigError as exc:
        raise ConfigInvalid(exc.key, exc.message) from None
    except gate.GateRefused as exc:
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
    """The loggers of WANTED_LOGGERS the trainer has (its schema's one list, trainer.config.LOGGERS)."""
    return tuple(name for name in WANTED_LOGGERS if name in LOGGERS)


def freeze_spec(*, run, out_dir: Path, tool_config: Path | None = None) -> dict[str, Any]:
    """The config the trainer runs, made again from the run's record: the user's keys of its stored
    config (re-checked against their bounds), then every platform key from the run's dataset, model,
    GPUs, reward choice, tool set, resume source (a fork's: with trainer.resume_fork) and its own folder,
    and the platform's sinks."""
    try:
        cfg = Config.from_dict(gate.user_view(run.config))
        gate.check_bounds(cfg.to_dict())
        gate.check_trackers(cfg.to_dict(), tracker_refusals())
        loggers = [name for name in cfg.trainer.logger if name in gate.USER_LOGGERS + gate.TRACKER_LOGGERS]
        for name in _allowed_loggers():
            if name not in loggers:
                loggers.append(name)
        cfg = apply_overrides(cfg, platform_values(
            dataset=run.dataset, val_dataset=run.val_dataset, model=run.model, gpus=run.gpus,
            reward_name=cfg.reward.name, out_dir=out_dir, resume_from=resume_source(run),
            tool_config=tool_config, loggers=loggers, reward_model=run.reward_model,
            fork=run.parent_kind == "fork"))
        check_reward_model(cfg, run.reward_model, require=True)
        validate(cfg)
    except ConfigError as exc:
        raise ConfigInvalid(exc.key, exc.message) from None
    except gate.GateRefused as exc:
        raise ConfigInvalid(exc.key, exc.message) from None
    return cfg.to_dict()


def inside(path: str | Path, folder: Path) -> bool:
    """Whether `path` (symlinks resolved) lies inside `folder`."""
    try:
        Path(path).resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def run_folder(run) -> Path:
    """The folder a run's job writes to: the one `freeze_spec` wrote into its spec when it was
    submitted (the submitting worker's runs folder), else where it will be (`run_dir`).

    Only a submitted run's spec is read, and only a folder named after the run: what the platform
    froze, never a config a user typed."""
    if run.ray_submission_id:
        frozen = (run.config.get("trainer") or {}).get("default_local_dir") or ""
        if frozen and Path(frozen).is_absolute() and Path(frozen).name == str(run.pk):
            return Path(frozen)
    return run_dir(run.pk)


# The kinds of run that start from a checkpoint of their parent (`Run.resume_from`).
FROM_CHECKPOINT_KINDS = ("resume", "fork")


def resume_source(run) -> str:
    """The checkpoint a resumed or forked run starts from: the one recorded on it, and only when it lies
    in the folder of its parent run of the same owner (the platform's own record, never user input)."""
    if run.parent_kind not in FROM_CHECKPOINT_KINDS or not run.resume_from or run.parent is None:
        return ""
    if run.parent.owner_id != run.owner_id:
        return ""
    return run.resume_from if inside(run.resume_from, run_folder(run.parent)) else ""


def latest_checkpoint_of(run) -> Path | None:
    """A run's newest checkpoint in its own folder: the trainer's commit marker, else the path it
    reported (when inside the folder)."""
    folder = run_folder(run)
    ckpt = read_latest_checkpoint(folder)
    if ckpt is None and run.checkpoint_path and inside(run.checkpoint_path, folder):
        path = Path(run.checkpoint_path)
        ckpt = path if path.is_dir() else None
    return ckpt


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


def job_env(*, run_id: int, token_file: Path) -> dict[str, str]:
    """Environment of the job (also of Ray's job supervisor, which reads the stop grace period).

    Holds no secret: the ingest token is in `token_file`, in the run's folder."""
    repo = str(Path(settings.BASE_DIR))
    return {
        "RLSTUDIO_INGEST_URL": ingest_url(run_id),
        "RLSTUDIO_INGEST_TOKEN_FILE": str(token_file),
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
