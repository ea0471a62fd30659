"""The operator's bounds on one training step as a whole (`StepLimits`) and the cross-key checks of a
config against them: the step's trajectories, tokens and reported samples (`check_step_size`), a
validation batch's (`check_validation_size`), and the loader batch against the training set's rows
(`check_train_size`). The shapes are `shapes.StepShapes`'."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..shapes import ShapeUnknown, StepShapes
from .bounds import GateRefused
from .flat import flatten, int_at


@dataclass(frozen=True)
class StepLimits:
    """The operator's bounds on one training step as a whole (settings RLSTUDIO_MAX_TRAJECTORIES_PER_STEP,
    RLSTUDIO_MAX_TOKENS_PER_STEP, RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP): each key within its own
    bound can still multiply into a step no machine finishes, or a flood of sample events. The step's
    and a validation batch's trajectories, tokens and reported samples are `shapes.StepShapes`'."""

    trajectories: int
    """Trajectories of a step's largest batch, and of one validation batch, at most."""
    tokens: int
    """Their tokens (prompt + response length each) at most."""
    reported_samples: int
    """Samples a step, or a validation, reports at most."""


def check_step_size(config: Mapping[str, Any], limits: StepLimits) -> None:
    """Refuse a config whose one step is larger than the operator allows (GateRefused naming the key
    to lower; the message gives the product and the limit). Cross-key: run on the whole config after
    each key passed its own bound and the trainer's schema."""
    try:
        s = StepShapes.of(config)
    except ShapeUnknown:
        return  # the schema's check names a missing or mistyped key
    key = s.prompts_key
    if s.trajectories > limits.trajectories:
        raise GateRefused(key, f"{key} x actor_rollout_ref.rollout.n = {s.prompts} x {s.n} = {s.trajectories:,} "
                               f"trajectories per step, more than this platform's {limits.trajectories:,} "
                               f"(RLSTUDIO_MAX_TRAJECTORIES_PER_STEP); lower either")
    if s.tokens > limits.tokens:
        raise GateRefused(s.response_key, f"{s.trajectories:,} trajectories x (data.max_prompt_length + "
                                          f"{s.response_key} = {s.prompt_length} + {s.response_length}) = "
                                          f"{s.tokens:,} tokens per step, more than this platform's "
                                          f"{limits.tokens:,} (RLSTUDIO_MAX_TOKENS_PER_STEP); lower the lengths, "
                                          f"{key} or actor_rollout_ref.rollout.n")
    budget = int_at(flatten(config), "report.samples_per_step")
    if budget:
        _check_reported("report.samples_per_step", budget, s.step_reported(budget), limits, per="step",
                        group=f"actor_rollout_ref.rollout.n = {s.n}")


def _check_reported(key: str, budget: int, reported: int, limits: StepLimits, *, per: str, group: str) -> None:
    """Refuse `key` (a report budget, -1 = all) when it reports more samples than the operator allows."""
    if reported > limits.reported_samples:
        said = "-1 (all)" if budget < 0 else str(budget)
        raise GateRefused(key, f"{said} reports {reported:,} samples per {per}, more than this platform's "
                               f"{limits.reported_samples:,} (RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP); give a "
                               f"number of samples up to that (whole groups of {group} are reported)")


def check_validation_size(config: Mapping[str, Any], limits: StepLimits, val_rows: int | None) -> None:
    """Refuse a config whose validation is larger than the operator allows one step to be (GateRefused
    naming the key to lower): one validation batch's trajectories and tokens, and the samples
    report.val_samples reports of the whole set (`shapes.StepShapes`). Without a validation set there
    is no validation; with `val_rows` unknown only a given data.val_batch_size is checked."""
    try:
        s = StepShapes.of(config, val_rows)
    except ShapeUnknown:
        return
    if not s.validates or s.val_n is None:
        return
    key, trajectories = "data.val_batch_size", s.val_trajectories
    if trajectories is not None:
        said = (f"data.val_batch_size = {s.val_batch_size}" if s.val_batch_size is not None
                else f"the validation set's {s.val_rows:,} rows")
        if trajectories > limits.trajectories:
            raise GateRefused(key, f"a validation batch of {said} x actor_rollout_ref.rollout.val_kwargs.n = "
                                   f"{s.val_prompts:,} x {s.val_n} = {trajectories:,} trajectories, more than this "
                                   f"platform's {limits.trajectories:,} per step (RLSTUDIO_MAX_TRAJECTORIES_PER_STEP); "
                                   f"set data.val_batch_size lower, or lower val_kwargs.n")
        if s.val_tokens > limits.tokens:
            raise GateRefused(key, f"a validation batch of {trajectories:,} trajectories x {s.sequence_length} tokens "
                                   f"(prompt + response length) = {s.val_tokens:,} tokens, more than this "
                                   f"platform's {limits.tokens:,} per step (RLSTUDIO_MAX_TOKENS_PER_STEP); set "
                                   f"data.val_batch_size lower")
    budget = int_at(flatten(config), "report.val_samples")
    reported = s.val_reported(budget) if budget else None
    if reported is not None:
        _check_reported("report.val_samples", budget, reported, limits, per="validation",
                        group=f"val_kwargs.n = {s.val_n}")


def check_train_size(config: Mapping[str, Any], train_rows: int | None) -> None:
    """Refuse a config whose loader batch (`shapes.StepShapes.draw_prompts`: data.train_batch_size, or
    data.gen_batch_size with dynamic sampling) is larger than the training set's `train_rows` (None:
    unknown, nothing refused): the trainer draws whole batches without repeats and would stop at once
    ("fewer than one batch"). The catalog's row count is an upper bound of the prompts the trainer
    uses (data.filter_overlong_prompts can drop more), so a set that passes here may still be short."""
    if train_rows is None:
        return
    try:
        s = StepShapes.of(config)
    except ShapeUnknown:
        return
    if s.draw_prompts > train_rows:
        key, n = s.draw_key, s.draw_prompts
        raise GateRefused(key, f"{key} = {n} prompts, more than the training dataset's {train_rows:,} rows: the "
                               f"trainer draws whole batches of {n} prompts from it, so not one batch fits; set "
                               f"{key} to at most {train_rows:,}, or train on a larger dataset")
