"""The reward-model keys of ``reward_model`` (verl's section): the sequence-classification model that
scores whole trajectories, and the weights that combine its score with the reward function's and the
tools' rewards. The section itself (with DAPO's overlong buffer) is ``schema.RewardModelConfig``;
what the reward model does in the trainer is in trainer.workers.reward_model and trainer.scoring.

verl's names and defaults where verl has them (``enable``, ``model.path``, ``model.trust_remote_code``,
``micro_batch_size_per_gpu``, ``max_length``). The weights are ours: verl's reward manager returns
the reward model's scores *instead of* the rule reward when both exist; here the reward is

    rule_weight * rule score + rm_weight * rm score + tool_reward_weight * sum(tool rewards)
    (+ the overlong penalty)

so ``rule_weight=0`` is verl's behaviour and the defaults without a reward model keep the rule alone.

Standard library only (the web side imports trainer.config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from .fields import ConfigError, option

KEY = "reward_model"
MAX_WEIGHT = 1e6


@dataclass(frozen=True)
class RewardModelModelConfig:
    path: Union[str, None] = option(
        None,
        "A sequence-classification checkpoint (transformers AutoModelForSequenceClassification, "
        "num_labels=1) with its own tokenizer and chat template; required when enable. On the "
        "platform it comes from the catalog model chosen as the run's reward model.",
    )
    trust_remote_code: bool = option(
        False, "Allow model code from the reward model's folder (operator decision)."
    )


def check_reward_model(rm: Any) -> None:
    """Refuse reward-model settings that cannot run or give a reward that is always 0."""
    if rm.enable and not rm.model.path:
        raise ConfigError(f"{KEY}.model.path", "required with reward_model.enable: a sequence-classification "
                                               "model folder")
    if rm.micro_batch_size_per_gpu is not None and rm.micro_batch_size_per_gpu < 1:
        raise ConfigError(f"{KEY}.micro_batch_size_per_gpu", f"must be >= 1 or null, got {rm.micro_batch_size_per_gpu}")
    if rm.max_length is not None and rm.max_length < 2:
        raise ConfigError(f"{KEY}.max_length", f"must be >= 2 or null, got {rm.max_length}")
    for name in ("rm_weight", "rule_weight", "tool_reward_weight"):
        w = getattr(rm, name)
        if not -MAX_WEIGHT <= w <= MAX_WEIGHT:
            raise ConfigError(f"{KEY}.{name}", f"must be in [-{MAX_WEIGHT:g}, {MAX_WEIGHT:g}], got {w!r}")
    if rm.rule_weight == 0 and rm.tool_reward_weight == 0 and (not rm.enable or rm.rm_weight == 0):
        key = f"{KEY}.rm_weight" if rm.enable else f"{KEY}.rule_weight"
        raise ConfigError(key, "every part of the reward has weight 0: the reward would always be 0")


def micro_batch(rm: Any) -> int:
    """Trajectories per reward-model forward on one worker (None = 8)."""
    return int(rm.micro_batch_size_per_gpu or 8)
