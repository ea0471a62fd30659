"""How an evaluation becomes a Ray job and how its outcome is read back. Pure functions of the
evaluation's record (plus settings for folders and the interpreter); the services call them.

- `folder`: <the run's own folder>/evaluations/<id>/ (the platform's record of where the run writes,
  `rlstudio.runs.launch.run_folder`) for a run's evaluation, <STATE_DIR>/evaluations/<id>/ for a
  catalog model's (next to RUNS_DIR, both from settings): where the spec goes and the job writes its
  outcome. Never from user input.
- `build_spec`: the job's spec (trainer.evaluate_job) made from the run's config (`run_config`: made
  again from the run's record as a resume or clone's is, never the paths frozen at its submission), the step folders
  found again in the run's folder (`rlstudio.runs.checkpoints.checkpoint_steps`: never a path the user typed), the
  dataset's own file, and the evaluation's bounded settings. A catalog model's evaluation has one
  column ("base", step 0: the model itself) and the config a new run from that model would get
  (`model_config`: the default preset, the model's path, trust_remote_code and tool-call parser from
  its catalog record, the evaluation's reward by name, `rlstudio.runs.launch.build_config`).
- `entrypoint` / `job_env`: `cd <repo> && exec <venv python> -m trainer evaluate <spec> --output <dir>`.
  The job sends nothing over the network: it writes `results.json` / `samples.jsonl` / `error.json`
  into its folder and the platform reads them, so it holds no token and Ray's job API shows nothing
  secret (its env_vars name no credential).
- `read_outcome`: those files, bounded in size and checked in shape.
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from rlstudio.runs.errors import ConfigInvalid
from rlstudio.runs.launch import build_config, dataset_path, freeze_spec, run_folder
from trainer.evaluate_job import ERROR, RESULTS, SAMPLES

MAX_RESULTS_BYTES = 16 * 1024 * 1024  # results.json: the matrix of at most 64 prompts x 9 columns
MAX_SAMPLES_BYTES = 64 * 1024 * 1024  # samples.jsonl: every transcript, each turn cut by the trainer


def model_evaluations_dir() -> Path:
    """Where catalog models' evaluations write: the platform's state folder (settings.STATE_DIR, the
    folder RUNS_DIR is in), never a path from a request."""
    return Path(settings.STATE_DIR) / "evaluations"


def folder(ev) -> Path:
    if ev.run_id is None:
        return model_evaluations_dir() / str(int(ev.pk))
    return run_folder(ev.run) / "evaluations" / str(ev.pk)


def model_config(*, model, dataset, gpus: int, reward: str = "") -> dict[str, Any]:
    """The trainer config a catalog model is evaluated with: the one a new run from `model` on
    `dataset` with `gpus` would get without a preset (`launch.build_config`: the default preset fitted
    to the GPUs; the model's path, trust_remote_code and tool-call parser from its catalog record),
    with the one override `reward.name` = `reward` when given (else the reward `default`, which scores
    by each row's data_source). The override goes through the run form's gate (a built-in or a ready
    operator-registered reward function, by name) and `platform_values` writes a registered one's file
    from the registry (custom_reward_function.path). ConfigInvalid naming the key when it cannot be
    built (`reward.name` for a reward the gate refuses)."""
    overrides = {"reward.name": reward} if reward else None
    # an evaluation writes no checkpoint: the disk budget's check of one is not for it
    return build_config(dataset=dataset, model=model, gpus=gpus, overrides=overrides, checkpoints=False)


def run_config(run, *, out: Path | None = None) -> dict[str, Any]:
    """The trainer config a run's evaluation is scored with, made again from the run's record the way a
    resume's or a clone's is (`launch.freeze_spec`): the user's keys of its stored config (re-checked
    against their bounds), then the platform's keys from the catalog and the registries as they are now:
    the reward function re-resolved by `reward.name` (`registry.services.reward_function_resolve`: ready,
    inside a reward root, the SHA-256 its check recorded) and the run's tool set written again from the
    registry into `out`. Never the reward file or tool config frozen when the run was submitted.

    `out` None: checked only (the tool set must be ready now; nothing is written). ConfigInvalid naming
    the key (`reward.name`, `tool_set`, ...), its message starting with the key, when the run cannot
    be evaluated with what the registries hold now."""
    from rlstudio.registry.services import RegistryRefused, tool_set_names, tool_set_write

    try:
        tool_config = None
        if run.tool_set and out is None:
            if run.tool_set not in tool_set_names():
                raise ConfigInvalid("tool_set", f"the run's tool set {run.tool_set!r} is no longer a ready "
                                                "registered tool set")
        elif run.tool_set:
            try:
                tool_config = tool_set_write(name=run.tool_set, out_dir=out)
            except RegistryRefused as exc:
                raise ConfigInvalid("tool_set", str(exc)) from None
        return freeze_spec(run=run, out_dir=out if out is not None else run_folder(run), tool_config=tool_config)
    except ConfigInvalid as exc:
        raise ConfigInvalid(exc.key, f"{exc.key}: {exc.message}") from None


def submission_id_for(ev) -> str:
    """Derived from the evaluation (id + creation time): stable across retries of its submit task."""
    return f"rlstudio-eval-{ev.pk}-{ev.created.strftime('%Y%m%d%H%M%S%f')}"


def build_spec(ev, *, steps: dict[int, Path]) -> dict[str, Any]:
    """The job's spec. `steps`: the run's committed step folders (runs.checkpoints.checkpoint_steps; empty for
    a catalog model's evaluation); FileNotFoundError when a chosen step is no longer there."""
    gone = [s for s in ev.checkpoints if s not in steps]
    if gone:
        raise FileNotFoundError(f"the checkpoint of step {gone[0]} is no longer in the run's folder")
    columns = [{"key": "base", "step": 0, "path": None}] if ev.include_base else []
    columns += [{"key": str(s), "step": int(s), "path": str(steps[s])} for s in ev.checkpoints]
    if ev.run_id is None:
        config = model_config(model=ev.model, dataset=ev.dataset, gpus=ev.gpus, reward=ev.reward)
    else:
        config = run_config(ev.run, out=folder(ev))
    return {"config": config, "data_file": dataset_path(ev.dataset), "max_prompts": ev.max_prompts,
            "columns": columns, "k": ev.k, "sampling": dict(ev.sampling),
            "device": "cuda" if ev.gpus > 0 else "cpu",
            "torch_threads": settings.RLSTUDIO_RUN_TORCH_THREADS or None}


def entrypoint(*, spec_path: Path, out: Path) -> str:
    """The shell command Ray runs: from the repo, with this platform's interpreter (exec: Ray's SIGTERM
    on a stop reaches the job itself)."""
    repo, python = Path(settings.BASE_DIR), Path(sys.executable)
    return (f"cd {shlex.quote(str(repo))} && exec {shlex.quote(str(python))} -m trainer evaluate "
            f"{shlex.quote(str(spec_path))} --output {shlex.quote(str(out))}")


def job_env(ev) -> dict[str, str]:
    """The job's environment: no secret in it (the job reports through files, not the network)."""
    return {"PYTHONPATH": str(Path(settings.BASE_DIR)), "PYTHONUNBUFFERED": "1",
            "RLSTUDIO_EVALUATION_ID": str(ev.pk),
            "RAY_JOB_STOP_WAIT_TIME_S": str(int(settings.RLSTUDIO_STOP_GRACE_S))}


class OutcomeInvalid(ValueError):
    """The job's files are missing, too large or not of the expected shape."""


@dataclass
class Outcome:
    results: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def _read(path: Path, limit: int) -> str | None:
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size > limit:
        raise OutcomeInvalid(f"{path.name} is {size} bytes, more than the {limit} allowed")
    return path.read_text(encoding="utf-8", errors="replace")


def read_error(out: Path) -> str:
    """What the job wrote into error.json ('' when none)."""
    try:
        text = _read(out / ERROR, 64 * 1024)
        data = json.loads(text) if text else {}
    except (OutcomeInvalid, ValueError):
        return ""
    return str(data.get("error") or "")[:4000] if isinstance(data, dict) else ""


def _check_results(results: Any, columns: list[str]) -> dict[str, Any]:
    if not isinstance(results, dict) or not isinstance(results.get("checkpoints"), list) \
            or not isinstance(results.get("prompts"), list):
        raise OutcomeInvalid("results.json is not {checkpoints: [...], prompts: [...]}")
    keys = [c.get("key") for c in results["checkpoints"] if isinstance(c, dict)]
    if keys != columns:
        raise OutcomeInvalid(f"results.json has columns {keys[:10]}, not the evaluation's {columns}")
    for p in results["prompts"]:
        if not isinstance(p, dict) or not isinstance(p.get("cells"), dict):
            raise OutcomeInvalid("a prompt of results.json has no cells")
    return results


def read_outcome(out: Path, *, columns: list[str], n_prompts_max: int, k: int) -> Outcome:
    """The job's results and samples (OutcomeInvalid when absent or malformed)."""
    text = _read(out / RESULTS, MAX_RESULTS_BYTES)
    if text is None:
        raise OutcomeInvalid("the job wrote no results.json")
    try:
        results = _check_results(json.loads(text), columns)
    except ValueError as exc:
        raise OutcomeInvalid(f"results.json: {exc}") from None
    n_prompts = len(results["prompts"])
    if n_prompts > n_prompts_max:
        raise OutcomeInvalid(f"results.json has {n_prompts} prompts, more than the {n_prompts_max} asked")
    samples: list[dict[str, Any]] = []
    for line in (_read(out / SAMPLES, MAX_SAMPLES_BYTES) or "").splitlines():
        if not line.strip():
            continue
        try:
            s = json.loads(line)
        except ValueError:
            raise OutcomeInvalid("samples.jsonl has a line that is not JSON") from None
        if not (isinstance(s, dict) and s.get("column") in columns and isinstance(s.get("prompt"), int)
                and 0 <= s["prompt"] < n_prompts and isinstance(s.get("sample"), int) and 0 <= s["sample"] < k
                and isinstance(s.get("turns"), list)):
            raise OutcomeInvalid("samples.jsonl has a sample outside the evaluation's columns, prompts or k")
        samples.append(s)
    return Outcome(results=results, samples=samples)
