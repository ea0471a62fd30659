"""A fork: a new run that starts from a checkpoint of another run with some settings changed.

A fork restores everything an exact resume restores (the model's weights, the optimizer's moments
and step count, the LR scheduler's step, the RNG states, the prompt loader's epoch and position, the
KL controller's value) and then takes the new config's values of the keys below. Only keys that leave
the shapes and the meaning of what is restored alone may differ from the parent's config; each says
why it is safe and what happens when it changes (docs/runs.md "Fork from a checkpoint").

`FORK_CHANGEABLE` is the one list: the platform refuses any other difference (`not_changeable`), the
trainer applies the ones held in restored state (`trainer.resume`: the optimizer's LR and weight decay,
the KL controller's coefficient). Standard library only: the web side imports it.
"""
from __future__ import annotations

from typing import Any, Mapping

_OPTIM = ("the optimizer's param groups hold it: a fork sets it there (and the LR scheduler's base) after "
          "loading; Adam's moments and step count are kept")
_SCHEDULE = ("the LR schedule is a function of the step rebuilt from the config; it is evaluated at the "
             "restored scheduler step, so the LR jumps to where the new schedule is at that step")
_PER_STEP = "read from the config at every step; nothing restored holds it"
_SAMPLING = "a sampling setting of the rollout, read at every generation; nothing restored holds it"
_LENGTH = "how long the run trains; the restored step and loader position continue towards the new end"
_VAL = "a validation setting; validation restores nothing"
_REPORT = "what the run reports; reporting restores nothing"

FORK_CHANGEABLE: dict[str, str] = {
    # the actor's optimizer and schedule
    "actor_rollout_ref.actor.optim.lr": _OPTIM,
    "actor_rollout_ref.actor.optim.weight_decay": _OPTIM,
    "actor_rollout_ref.actor.optim.lr_warmup_steps": _SCHEDULE,
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": _SCHEDULE,
    "actor_rollout_ref.actor.optim.warmup_style": _SCHEDULE,
    "actor_rollout_ref.actor.optim.min_lr_ratio": _SCHEDULE,
    "actor_rollout_ref.actor.optim.total_training_steps": _SCHEDULE,
    "actor_rollout_ref.actor.grad_clip": _PER_STEP,
    # the critic's (algorithm.adv_estimator=gae), the same way
    "critic.optim.lr": _OPTIM,
    "critic.optim.weight_decay": _OPTIM,
    "critic.optim.lr_warmup_steps": _SCHEDULE,
    "critic.optim.lr_warmup_steps_ratio": _SCHEDULE,
    "critic.optim.warmup_style": _SCHEDULE,
    "critic.optim.min_lr_ratio": _SCHEDULE,
    "critic.optim.total_training_steps": _SCHEDULE,
    "critic.grad_clip": _PER_STEP,
    "critic.cliprange_value": _PER_STEP,
    # the loss
    "actor_rollout_ref.actor.clip_ratio": _PER_STEP,
    "actor_rollout_ref.actor.clip_ratio_low": _PER_STEP,
    "actor_rollout_ref.actor.clip_ratio_high": _PER_STEP,
    "actor_rollout_ref.actor.clip_ratio_c": _PER_STEP,
    "actor_rollout_ref.actor.entropy_coeff": _PER_STEP,
    "actor_rollout_ref.actor.kl_loss_coef": _PER_STEP + " (the KL loss must already be on: use_kl_loss is not changeable)",
    # KL in the reward: the controller's value is restored, a changed kl_coef replaces it
    "algorithm.kl_ctrl.kl_coef": ("the KL controller's value is restored from the checkpoint; when the fork "
                                  "changes kl_coef, the controller starts from the new value instead"),
    "algorithm.kl_ctrl.target_kl": _PER_STEP + " (the adaptive controller's target)",
    "algorithm.kl_ctrl.horizon": _PER_STEP + " (the adaptive controller's horizon)",
    # sampling
    "actor_rollout_ref.rollout.temperature": _SAMPLING,
    "actor_rollout_ref.rollout.top_p": _SAMPLING,
    "actor_rollout_ref.rollout.top_k": _SAMPLING,
    # how long, how often
    "trainer.total_training_steps": _LENGTH,
    "trainer.total_epochs": _LENGTH,
    "trainer.save_freq": "when checkpoints are written; nothing restored holds it",
    "trainer.max_actor_ckpt_to_keep": "how many of the fork's own checkpoints are kept; nothing restored holds it",
    "trainer.test_freq": _VAL,
    "trainer.val_before_train": _VAL + " (on a fork: a validation at the fork's step before it trains)",
    "trainer.export_hf": "whether the end of the run exports a Hugging Face folder; nothing restored holds it",
    # validation
    "data.val_batch_size": _VAL,
    "actor_rollout_ref.rollout.val_kwargs.n": _VAL,
    "actor_rollout_ref.rollout.val_kwargs.temperature": _VAL,
    "actor_rollout_ref.rollout.val_kwargs.top_p": _VAL,
    "actor_rollout_ref.rollout.val_kwargs.top_k": _VAL,
    "actor_rollout_ref.rollout.val_kwargs.do_sample": _VAL,
    # the reward
    "reward.name": "the reward function scores each sample (a built-in or one the operator registered); "
                   "nothing restored holds it",
    "reward.reward_kwargs": "the reward function's keyword arguments, given at every scoring",
    "reward.format_score": "the score of a well-formed wrong answer, given at every scoring",
    # reporting
    "report.samples_per_step": _REPORT,
    "report.token_view": _REPORT,
    "report.val_samples": _REPORT,
    "report.memory_interval_s": _REPORT,
    "report.heartbeat_interval_s": _REPORT,
}


def not_changeable(changed: list[str]) -> list[str]:
    """The keys of `changed` (dotted) a fork may not change, in the order given."""
    return [key for key in changed if key not in FORK_CHANGEABLE]


def dotted(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """The value of the dotted `key` in a nested config dict (`default` when a part is missing)."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node
