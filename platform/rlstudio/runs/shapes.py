"""The shapes of a run's training step and validation batch, worked out from its config before it starts.

One copy of the rules that both the launch gate (`gate.sizes.check_step_size`, `gate.sizes.check_validation_size`:
the operator's bounds) and the memory estimate (`memory_estimate.estimate`) read, as the trainer
applies them:

- a step's prompts: data.train_batch_size; with dynamic sampling (algorithm.filter_groups.enable) the
  loader hands out generation batches of data.gen_batch_size (None: train_batch_size) until
  train_batch_size groups are kept (trainer/loop.py). The step's largest batch at once is the larger of
  the two; each prompt makes actor_rollout_ref.rollout.n trajectories. The loader's batch (the
  generation batch, else train_batch_size) is drawn from the training set without repeats
  (trainer/data/loader.py, drop_last): the set must hold one;
- the response length: actor_rollout_ref.rollout.response_length, None = data.max_response_length
  (`trainer.config.resolve`). A multi-turn rollout spends that one budget over all its turns and tool
  replies (trainer/rollout/agent.py), so the width of a trajectory is the same with or without tools;
- validation: only with a validation set (data.val_files); data.val_batch_size prompts at a time
  (None: the whole set at once; a batch larger than the set is the set), each making
  actor_rollout_ref.rollout.val_kwargs.n trajectories (`Trainer.validate`);
- report budgets (report.samples_per_step, report.val_samples): `trainer.step_report.pick_groups`,
  -1 every trajectory, 0 none, else whole groups, at least one.

Pure: a config as stored (nested dicts; a missing key is the schema's default) and the validation
set's row count in, numbers out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from trainer.config import Config

_DEFAULTS = Config().to_dict()
_MISSING = object()


class ShapeUnknown(ValueError):
    """A key the shapes need (data.train_batch_size, actor_rollout_ref.rollout.n) is not an integer;
    `key` names it (the trainer's schema check says what is wrong with it)."""

    def __init__(self, key: str):
        super().__init__(f"{key}: not an integer")
        self.key = key


def _get(cfg: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key of a nested config; the schema's default where the config lacks it."""
    for source in (cfg, _DEFAULTS):
        node: Any = source
        for part in key.split("."):
            node = node.get(part, _MISSING) if isinstance(node, Mapping) else _MISSING
        if node is not _MISSING:
            return node
    return None


def _int(cfg: Mapping[str, Any], key: str) -> int | None:
    value = _get(cfg, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reported(budget: int, total: int | None, group: int) -> int | None:
    """Samples a report budget reports at most (`trainer.step_report.pick_groups`): -1 every one of
    `total`, 0 none, else whole groups of `group` trajectories, at least one, never more than `total`
    (None: `total` unknown, only for -1)."""
    if budget == 0:
        return 0
    if budget < 0:
        return total
    most = max(budget, group)
    return most if total is None else min(total, most)


@dataclass(frozen=True)
class StepShapes:
    """What a run's config makes of one training step and one validation batch (see the module)."""

    train_prompts: int
    """data.train_batch_size: the prompts whose groups a step trains on."""
    prompts: int
    """Prompts of the step's largest batch at once: train_prompts, or data.gen_batch_size with dynamic
    sampling when larger."""
    prompts_key: str
    """The key that sets `prompts` (the one to lower)."""
    n: int
    """actor_rollout_ref.rollout.n: trajectories per prompt."""
    prompt_length: int
    """data.max_prompt_length."""
    response_length: int
    """The response budget of a trajectory (every turn of a multi-turn one together)."""
    response_key: str
    """The key that sets `response_length`: rollout.response_length when given, else data.max_response_length."""
    validates: bool
    """Whether the run has a validation set (data.val_files)."""
    val_n: int | None
    """actor_rollout_ref.rollout.val_kwargs.n (None: not an integer)."""
    val_batch_size: int | None
    """data.val_batch_size as given (None: the whole set in one batch)."""
    val_rows: int | None
    """The validation set's rows (None: unknown, e.g. a saved config on its own)."""
    draw_prompts: int
    """Prompts the loader draws from the training set at once (trainer/data/loader.py's batch):
    data.gen_batch_size with dynamic sampling when set, else data.train_batch_size."""
    draw_key: str
    """The key that sets `draw_prompts`."""

    @classmethod
    def of(cls, cfg: Mapping[str, Any], val_rows: int | None = None) -> "StepShapes":
        """The shapes of `cfg` (nested dicts) with a validation set of `val_rows` rows; ShapeUnknown
        when data.train_batch_size or actor_rollout_ref.rollout.n is not an integer."""
        batch, n = _int(cfg, "data.train_batch_size"), _int(cfg, "actor_rollout_ref.rollout.n")
        for key, value in (("data.train_batch_size", batch), ("actor_rollout_ref.rollout.n", n)):
            if value is None:
                raise ShapeUnknown(key)
        prompts_key, prompts = "data.train_batch_size", batch
        gen = _int(cfg, "data.gen_batch_size")
        dynamic = _get(cfg, "algorithm.filter_groups.enable") is True
        if dynamic and gen is not None and gen > batch:
            prompts_key, prompts = "data.gen_batch_size", gen
        draw_key, draw = ("data.gen_batch_size", gen) if dynamic and gen else ("data.train_batch_size", batch)
        response_key = "actor_rollout_ref.rollout.response_length"
        response = _int(cfg, response_key)
        if not response:
            response_key, response = "data.max_response_length", _int(cfg, "data.max_response_length") or 0
        return cls(train_prompts=batch, prompts=prompts, prompts_key=prompts_key, n=n,
                   prompt_length=_int(cfg, "data.max_prompt_length") or 0, response_length=response,
                   response_key=response_key, validates=bool(_get(cfg, "data.val_files")),
                   val_n=_int(cfg, "actor_rollout_ref.rollout.val_kwargs.n"),
                   val_batch_size=_int(cfg, "data.val_batch_size"), val_rows=val_rows,
                   draw_prompts=draw, draw_key=draw_key)

    @property
    def sequence_length(self) -> int:
        """Prompt + response tokens of one trajectory at most."""
        return self.prompt_length + self.response_length

    @property
    def trajectories(self) -> int:
        """Trajectories of the step's largest batch: prompts x n."""
        return self.prompts * self.n

    @property
    def train_trajectories(self) -> int:
        """Trajectories a step trains on: train_prompts x n."""
        return self.train_prompts * self.n

    @property
    def tokens(self) -> int:
        """Tokens of the step's largest batch at most: trajectories x sequence_length."""
        return self.trajectories * self.sequence_length

    @property
    def val_prompts(self) -> int | None:
        """Prompts of one validation batch: data.val_batch_size (at most the set) or the whole set; 0
        without a validation set; None when neither the batch size nor the set's rows are known."""
        if not self.validates:
            return 0
        if self.val_batch_size is None:
            return self.val_rows
        return self.val_batch_size if self.val_rows is None else min(self.val_batch_size, self.val_rows)

    @property
    def val_trajectories(self) -> int | None:
        """Trajectories of one validation batch: val_prompts x val_kwargs.n (0 without validation)."""
        prompts = self.val_prompts
        if prompts == 0:
            return 0
        return None if prompts is None or self.val_n is None else prompts * self.val_n

    @property
    def val_tokens(self) -> int | None:
        """Tokens of one validation batch at most."""
        trajectories = self.val_trajectories
        return None if trajectories is None else trajectories * self.sequence_length

    def step_reported(self, budget: int) -> int:
        """Samples report.samples_per_step = `budget` reports per step at most."""
        return reported(budget, self.trajectories, self.n)

    def val_reported(self, budget: int) -> int | None:
        """Samples report.val_samples = `budget` reports per validation at most (over the whole set;
        None when that is every one and the set's rows are unknown)."""
        if not self.validates or self.val_n is None:
            return 0
        total = self.val_rows * self.val_n if self.val_rows is not None else None
        return reported(budget, total, self.val_n)
