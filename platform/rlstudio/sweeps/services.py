"""Writes of the sweeps app: launching a sweep (its grid of runs, or its runs drawn at random; all or
none), stopping its runs and deleting it.

A sweep's runs are launched through the runs app's own path (`run_new`, then `run_launch_admit` once
the sweep commits), so the config gate, the trainer's schema, the owner's queued-runs cap, the quota,
admission, the one queue and the audit apply to each exactly as to a run launched by hand. What this
module adds: the axes (each key one the gate lets a user set), the grid's size cap or the random
sweep's `runs` (RLSTUDIO_MAX_SWEEP_RUNS), every run's config checked before any run is made, and one transaction
around the sweep and all its runs, so that one bad value, or a run past the owner's queued-runs cap,
leaves no sweep and no run behind. Errors are the runs app's (`RunInputInvalid` naming the field,
`RunRefused`), which the API and the pages already turn into 400 and 409.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record
from rlstudio.runs import launch
from rlstudio.runs.gate.changes import user_view
from rlstudio.runs.gate.keys import PLATFORM_KEYS, USER_KEYS
from rlstudio.runs.errors import ConfigInvalid, RunInputInvalid, RunRefused
from rlstudio.runs.models import TERMINAL_STATUSES
from rlstudio.runs.services import clean_retention, run_annotate, run_launch_admit, run_new, run_stop

from .grid import AxesInvalid, GridPoint, clean_axes, expand_grid, grid_size, run_name, sweep_tag, value_text
from .models import MAX_SWEEP_NAME_LENGTH, Sweep, SweepMode, SweepRun
from .sample import SweepAxis, clean_random_axes, clean_runs, clean_seed, draw_points, new_seed


def max_sweep_runs() -> int:
    """The most runs one sweep may make (RLSTUDIO_MAX_SWEEP_RUNS)."""
    return int(settings.RLSTUDIO_MAX_SWEEP_RUNS)


def clean_sweep_name(name: Any) -> str:
    """The sweep's name stripped; RunInputInvalid on `name` when empty, too long, or holding a control
    character (it starts every run's name)."""
    if not isinstance(name, str) or not name.strip():
        raise RunInputInvalid("give the sweep a name", field="name")
    name = name.strip()
    if len(name) > MAX_SWEEP_NAME_LENGTH:
        raise RunInputInvalid(f"at most {MAX_SWEEP_NAME_LENGTH} characters, got {len(name)}", field="name")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise RunInputInvalid("a name without control characters", field="name")
    return name


def check_axes(raw: Any, *, mode: str = SweepMode.GRID) -> list[SweepAxis]:
    """The axes of a sweep as Axis (and, random search only, RangeAxis) objects, or RunInputInvalid
    naming the field: their shape (`grid.clean_axes`, `sample.clean_random_axes`), each key one a user
    may set (the config gate's `USER_KEYS`: a key the platform writes, or one not on the list, is
    refused here even when a value equals the base config's, where the gate would not see a change),
    and a grid within RLSTUDIO_MAX_SWEEP_RUNS."""
    try:
        axes = clean_random_axes(raw) if mode == SweepMode.RANDOM else clean_axes(raw)
    except AxesInvalid as exc:
        raise RunInputInvalid(str(exc), field=exc.field) from None
    for i, axis in enumerate(axes):
        if axis.key in PLATFORM_KEYS:
            raise RunInputInvalid(f"{axis.key} is set by the platform from {PLATFORM_KEYS[axis.key]}; "
                                  "a sweep cannot vary it", field=f"axes[{i}].key")
        if axis.key not in USER_KEYS:
            raise RunInputInvalid(f"{axis.key} is not a key users may set (docs/security.md lists the ones "
                                  "they may)", field=f"axes[{i}].key")
    if mode == SweepMode.RANDOM:
        return axes
    size, cap = grid_size(axes), max_sweep_runs()
    if size > cap:
        raise RunInputInvalid(f"the grid makes {size} runs ({' x '.join(str(len(a.values)) for a in axes)}); a "
                              f"sweep makes at most {cap} (RLSTUDIO_MAX_SWEEP_RUNS)", field="axes")
    return axes


def sweep_points(axes: list[SweepAxis], *, mode: Any, runs: Any, seed: Any) -> tuple[list[GridPoint], int | None]:
    """The runs' points and the seed they were drawn with: a grid's every combination (seed None; `runs`
    and `seed` must not be given), or a random sweep's `runs` points drawn with `seed` (the server picks
    one when it is None). RunInputInvalid on `runs` / `seed`."""
    try:
        if mode != SweepMode.RANDOM:
            for field, value in (("runs", runs), ("seed", seed)):
                if value is not None:
                    raise AxesInvalid(f'{field} is for random search ("mode": "random"); a grid makes one run '
                                      "per combination", field=field)
            return expand_grid(axes), None
        count = clean_runs(runs, cap=max_sweep_runs())
        seed = clean_seed(seed)
        seed = new_seed() if seed is None else seed
        return draw_points(axes, count, seed), seed
    except AxesInvalid as exc:
        raise RunInputInvalid(str(exc), field=exc.field) from None


def _point_error(exc: ConfigInvalid, point: GridPoint, axes: list[SweepAxis], total: int) -> RunInputInvalid:
    """A grid point's refused config as a RunInputInvalid on the axis whose key the error names (or on
    `axes` when it names another key: a value that does not fit the rest of the config), saying the
    axis, its value, the run and the key."""
    params = ", ".join(f"{k}={value_text(v)}" for k, v in point.params.items())
    where = f"run {point.index + 1} of {total} ({params})"
    for i, axis in enumerate(axes):
        if axis.key == exc.key:
            return RunInputInvalid(f"axes[{i}] {axis.key} = {value_text(point.params[axis.key])}: {exc.message} "
                                   f"[{where}]; no run was launched", field=f"axes[{i}]")
    return RunInputInvalid(f"{exc.key}: {exc.message} [{where}]; no run was launched", field="axes")


@dataclass(frozen=True)
class SweepInputs:
    """What a sweep's runs train on and with: the catalog objects (the caller checked the owner may see
    them), the GPUs of each run, where the base config comes from (as a run launch's: `preset`,
    `config` a whole config, `saved` a stored one) and the user's overrides of it, the tool set, and
    each run's sample retention ({"mode", "k"} as a run launch takes it; None: keep every sample)."""

    dataset: Any
    model: Any
    gpus: int = 0
    val_dataset: Any = None
    preset: str | None = None
    config: dict[str, Any] | None = None
    saved: dict[str, Any] | None = None
    overrides: Any = None
    tool_set: str = ""
    reward_model: Any = None
    retention: Any = None


def sweep_launch(*, owner: AbstractBaseUser, name: str, axes: Any, inputs: SweepInputs, mode: Any = SweepMode.GRID,
                 runs: Any = None, seed: Any = None) -> Sweep:
    """Launch a sweep: one run per combination of the axes' values (`mode` grid), or `runs` points drawn
    from the axes with `seed` (`mode` random, `sample.draw_points`; no seed: the server picks one and
    stores it), on top of the base config.

    The base config is built and checked as a run launch's (the gate, the schema, the sizes), then
    every run's config (the base with its axis values as overrides) is checked, before anything is
    written; then the sweep and its runs are created in one transaction (each through `run_new`, so
    a run past the owner's queued-runs cap refuses the whole sweep: RunRefused, nothing left), and
    once it commits each run gets the queue pass a launched run gets (`run_launch_admit`): those the
    quota and the cluster let start now start, the others wait queued. Each run is named
    `<sweep name>/<key=value,...>` and tagged with the sweep's name (`grid.sweep_tag`)."""
    name = clean_sweep_name(name)
    if mode not in SweepMode.values:
        raise RunInputInvalid(f"mode is grid or random, not {value_text(mode)[:40]}", field="mode")
    checked = check_axes(axes, mode=mode)
    points, seed = sweep_points(checked, mode=mode, runs=runs, seed=seed)
    retention = clean_retention(inputs.retention)  # RunInputInvalid on retention.mode / .k before anything
    common = dict(dataset=inputs.dataset, val_dataset=inputs.val_dataset, model=inputs.model, gpus=inputs.gpus,
                  reward_model=inputs.reward_model)
    base = user_view(launch.build_config(preset=inputs.preset, config=inputs.config, base=inputs.saved,
                                              overrides=inputs.overrides, **common))
    for point in points:
        try:
            launch.build_config(base=base, overrides=point.params, **common)
        except ConfigInvalid as exc:
            raise _point_error(exc, point, checked, len(points)) from None
    tag = sweep_tag(name)
    made = []
    with transaction.atomic():
        sweep = Sweep.objects.create(owner=owner, name=name, dataset=inputs.dataset, val_dataset=inputs.val_dataset,
                                     model=inputs.model, gpus=inputs.gpus, base_config=base, mode=mode, seed=seed,
                                     axes=[a.as_dict() for a in checked])
        for point in points:
            try:
                run = run_new(owner=owner, name=run_name(name, point.params), saved=base, overrides=point.params,
                              tool_set=inputs.tool_set, admit=False, retention=retention, **common)
            except RunRefused as exc:
                raise RunRefused(f"run {point.index + 1} of the sweep's {len(points)}: {exc}; no run of the "
                                 "sweep was launched") from None
            run_annotate(run=run, by=owner, tags=[tag])
            SweepRun.objects.create(sweep=sweep, run=run, index=point.index, params=point.params)
            made.append(run)
        audit_record(actor=owner, action="sweep.launch", obj=sweep,
                     data={"name": name, "mode": mode, "seed": seed, "axes": sweep.axes, "runs": [r.pk for r in made]})
    for run in made:
        run_launch_admit(run=run, by=owner)
    return sweep


@dataclass(frozen=True)
class SweepStopped:
    """What "stop all" did: the runs it stopped (or cancelled, queued) and, per run it could not stop
    now, why (a run being submitted: stop it in a moment)."""

    stopped: list[int]
    refused: dict[int, str]


def sweep_stop(*, sweep: Sweep, by: AbstractBaseUser) -> SweepStopped:
    """Stop every run of the sweep that has not ended, each through the runs' stop service (a queued
    one is cancelled, a running one checkpoints and stops); owner or staff (the caller's selector
    already narrowed the sweep to them). Audited as `sweep.stop`."""
    stopped: list[int] = []
    refused: dict[int, str] = {}
    for link in sweep.sweep_runs.select_related("run", "run__owner").order_by("index"):
        run = link.run
        if run.status in TERMINAL_STATUSES:
            continue
        try:
            run_stop(run=run, by=by)
        except RunRefused as exc:
            refused[run.pk] = str(exc)
        else:
            stopped.append(run.pk)
    audit_record(actor=by, action="sweep.stop", obj=sweep, data={"stopped": stopped, "refused": refused})
    return SweepStopped(stopped=stopped, refused=refused)


def sweep_delete(*, sweep: Sweep, by: AbstractBaseUser) -> int:
    """Delete the sweep: its base config, axes and the links to its runs. The runs stay, as runs of
    their own (their names and tags say where they came from), and the sweep no longer holds
    its dataset and model, which may then be deleted. Owner or staff (the caller's selector already
    narrowed the sweep to them); refused (RunRefused) while a run of it has not ended. Returns how many
    runs it grouped. Audited as `sweep.delete`."""
    with transaction.atomic():
        locked = Sweep.objects.select_for_update().filter(pk=sweep.pk).first()
        if locked is None:
            return 0  # already deleted by another request
        links = locked.sweep_runs.select_related("run")
        live = sum(1 for link in links if link.run.status not in TERMINAL_STATUSES)
        if live:
            raise RunRefused(f"sweep {locked.name!r} has {live} run(s) that have not ended: stop them first")
        grouped = len(links)
        audit_record(actor=by, action="sweep.delete", obj=locked,
                     data={"name": locked.name, "runs": [link.run_id for link in links]})
        locked.delete()
    return grouped
