"""Run again with changes: the launch form's initial values from an existing run (`/runs/new/?from=<id>`).

A reader, as the selectors are: the run comes through `run_get_for` (a run the user may not read is a
404), and only what its reader may see goes into the form: the run's config as `gate.user_view` gives
it (every platform key, such as the data and model paths and the run's folder, reset to the schema's
default, so left out), written as the form's whole-config YAML with only the keys that differ from the
schema's defaults; the important fields from the same view; the dataset, validation dataset, model,
reward model, tool set and project only when the user may choose them on the form (`choices`);
the name "<name> (again)", the tags, the GPUs and the sample retention. Submitting the form is an
ordinary launch, checked as any other.
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ObjectDoesNotExist

from .forms import IMPORTANT_FIELDS
from .gate.changes import user_view
from .gate.flat import DEFAULTS, flatten, unflatten
from .models import Run
from .selectors import run_get_for


def user_config_yaml(config: dict[str, Any]) -> str:
    """`config` (a run's frozen config) as YAML: its user keys that differ from the schema's defaults,
    none of the platform's."""
    import yaml

    flat = flatten(user_view(config or {}))
    own = {k: v for k, v in flat.items() if k in DEFAULTS and v != DEFAULTS[k]}
    return yaml.safe_dump(unflatten(own), sort_keys=False, default_flow_style=False, width=100) if own else ""


def _retention_of(run: Run) -> tuple[str, int] | None:
    """The run's sample retention row's (mode, k), read through the reverse relation the telemetry app's
    RunRetention declares (so runs imports nothing of telemetry); None when it has none (keep all)."""
    try:
        r = run.retention
    except ObjectDoesNotExist:
        return None
    return r.mode, r.k


def relaunch_initial(*, user: AbstractBaseUser, run_id: Any, choices: dict[str, Any]) -> dict[str, Any]:
    """The launch form's initial values from run `run_id` as `user` may read it (Http404 otherwise).

    `choices` are the form's own: "datasets", "models" (policies), "reward_models" (querysets),
    "tool_sets" and "projects" (ids as strings); a reference the user may not choose is left out."""
    run = run_get_for(user=user, run_id=run_id)
    flat = flatten(user_view(run.config or {}))
    initial: dict[str, Any] = {"name": f"{run.name} (again)"[:200], "gpus": run.gpus,
                               "tags": " ".join(run.tags or []), "config_yaml": user_config_yaml(run.config)}
    for field, queryset in (("dataset", "datasets"), ("val_dataset", "datasets"), ("model", "models"),
                            ("reward_model", "reward_models")):
        pk = getattr(run, f"{field}_id")
        if pk is not None and choices[queryset].filter(pk=pk).exists():
            initial[field] = pk
    if run.tool_set and run.tool_set in choices["tool_sets"]:
        initial["tool_set"] = run.tool_set
    if run.project_id is not None and str(run.project_id) in choices["projects"]:
        initial["project"] = str(run.project_id)
    for name, key, _label, _tp in IMPORTANT_FIELDS:
        value = flat.get(key)
        if value is not None and not isinstance(value, bool):
            initial[name] = value
    retention = _retention_of(run)
    if retention is not None:
        initial["retention_mode"], initial["retention_k"] = retention
    return initial
