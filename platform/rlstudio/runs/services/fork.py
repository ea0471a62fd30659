"""A fork: a new run that starts from one kept checkpoint of a finished run with some settings changed.

It restores everything a resume restores (weights, the optimizer's moments and step, the scheduler,
the RNG and the data loader's position, the KL controller) and trains on with the new values of the
keys `trainer.config.fork.FORK_CHANGEABLE` lists (lr, KL coefficient, sampling temperature, total
steps, ...): its frozen spec carries `trainer.resume_fork` (`launch.freeze_spec`). Any other key that
differs from the parent's config would not match what the checkpoint holds: a clone is the way to
change it. docs/runs.md "Fork from a checkpoint".
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from trainer.config.fork import FORK_CHANGEABLE

from ..checkpoints import checkpoint_steps
from ..config_diff import ConfigChange, config_changes
from ..errors import RunInputInvalid, RunRefused
from ..models import Run
from .lineage import _check_gpus, _check_still_visible, _config_or_invalid, _create_and_launch, clean_retention


def run_fork(*, run: Run, by: AbstractBaseUser, step: int | None = None, overrides=None,
             name: str | None = None, retention=None) -> Run:
    """A new queued run (parent = `run`, kind fork) that starts from `run`'s checkpoint at `step` (None:
    its newest) with `overrides` (dotted keys, through the config gate as a clone's), then is admitted as
    a launch is.

    Only its owner or staff (RunNotPermitted for a user it is shared with); only a finished run
    (RunRefused, as a run with no checkpoint kept); `step` must be one of its committed checkpoints
    (`checkpoint_steps`, its own folder only: RunInputInvalid on `step` naming them). Every user key the
    overrides change must be fork-changeable (RunInputInvalid on that key: a clone changes it), and
    a known trainer.total_training_steps must leave a step to train past `step`. The fork keeps the
    run's dataset, model, reward model, tool set, GPUs and project; audited `run.fork` with the parent,
    the step and the keys changed. The changes, old and new values, are kept on the fork
    (`Run.fork_changes`): its page lists them after the parent is gone. Its sample retention is
    `retention` ({"mode", "k"}, checked as a launch's) or, None, `run`'s."""
    from .sharing import check_can_manage

    check_can_manage(user=by, run=run, action="fork")
    retention = clean_retention(retention)
    if not run.is_terminal:
        raise RunRefused(f"the run is {run.status}: only a finished run can be forked (stop it first)")
    steps = checkpoint_steps(run)
    if not steps:
        raise RunRefused("the run has no checkpoint to fork from")
    step = _clean_step(step, steps)
    _check_still_visible(run)
    _check_gpus(owner=run.owner, gpus=run.gpus, kind="fork", by=by)
    config = _config_or_invalid(base=run.config, overrides=overrides, dataset=run.dataset,
                                val_dataset=run.val_dataset, model=run.model, gpus=run.gpus,
                                reward_model=run.reward_model, resume=True)
    changes = check_fork_changes(parent=run.config, fork=config, step=step)
    return _create_and_launch(
        owner=run.owner, by=by, name=(name or f"{run.name} (fork @ {step})")[:200], dataset=run.dataset,
        model=run.model, reward_model=run.reward_model, val_dataset=run.val_dataset, config=config,
        gpus=run.gpus, parent=run, parent_kind="fork", tool_set=run.tool_set, resume_from=str(steps[step]),
        project_id=run.project_id, fork_changes=[c.as_dict() for c in changes], retention=retention,
        audit=("run.fork", {"parent": run.pk, "step": step, "changed": [c.key for c in changes]}))


def _clean_step(step: Any, steps: dict) -> int:
    """`step` as one of `steps` (None: the newest); RunInputInvalid on `step` naming the ones kept."""
    if isinstance(step, str):
        step = step.strip()
        if step.isascii() and step.isdigit() and len(step) <= 18:
            step = int(step)
    if step is None or step == "":
        return max(steps)
    if isinstance(step, bool) or not isinstance(step, int):
        raise RunInputInvalid(f"step must be a checkpoint step number, got {str(step)[:40]!r}", field="step")
    if step not in steps:
        kept = ", ".join(str(s) for s in steps)
        raise RunInputInvalid(f"the run has no checkpoint at step {step}; it keeps steps {kept}", field="step")
    return step


def check_fork_changes(*, parent: dict[str, Any], fork: dict[str, Any], step: int) -> list[ConfigChange]:
    """The user keys `fork` changes from `parent` (both stored configs), each one a fork may
    change (RunInputInvalid on the first that is not), and a known total of steps past `step`
    (RunInputInvalid on trainer.total_training_steps: nothing left to train)."""
    changes = config_changes(before=parent, after=fork)
    for key in (c.key for c in changes):
        if key not in FORK_CHANGEABLE:
            raise RunInputInvalid(f"a fork cannot change {key}: the checkpoint was trained with the parent's "
                                  "value and holds state that depends on it; clone the run to change it "
                                  "(a clone starts afresh from the model)", field=key)
    total = (fork.get("trainer") or {}).get("total_training_steps")
    if isinstance(total, int) and total <= step:
        raise RunInputInvalid(f"trainer.total_training_steps is {total}, not past the fork's step {step}: "
                              "nothing would be left to train; set it higher", field="trainer.total_training_steps")
    return changes
