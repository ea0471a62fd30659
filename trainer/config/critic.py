"""The ``critic`` section (verl's name): the value model PPO with GAE trains beside the actor
(``algorithm.adv_estimator=gae``), its optimizer and its update, and the checks of its keys.

Keys left ``None`` take the actor's value when the config is resolved (verl interpolates them the
same way: ``critic.ppo_epochs: ${actor_rollout_ref.actor.ppo_epochs}``). ``critic.model.path`` is
written by the platform from the run's catalog model; ``None`` = the actor's model path (a copy of the
base with a scalar value head: trainer.workers.critic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from .actor_rollout_ref import OptimConfig
from .fields import ConfigError, option, section

CRITIC = "critic"


@dataclass(frozen=True)
class CriticModelConfig:
    path: Union[str, None] = option(
        None,
        "Hugging Face–format folder the value model starts from: its transformer body with a new "
        "scalar head, zero-initialised so that every first value is 0 (verl's is random), or the "
        "head a token-classification checkpoint has; None = "
        "actor_rollout_ref.model.path. It must use the actor's tokenizer.",
    )


@dataclass(frozen=True)
class CriticOptimConfig(OptimConfig):
    lr: float = option(1e-5, "AdamW learning rate of the value model (verl's default 1e-5).")


@dataclass(frozen=True)
class CriticConfig:
    model: CriticModelConfig = section(CriticModelConfig, "The value model.")
    optim: CriticOptimConfig = section(CriticOptimConfig, "The value model's optimizer and LR schedule.")
    ppo_mini_batch_size: Union[int, None] = option(
        None,
        "Prompts per critic optimizer step (times rollout.n trajectories); None = "
        "actor_rollout_ref.actor.ppo_mini_batch_size.",
    )
    ppo_micro_batch_size_per_gpu: Union[int, None] = option(
        None, "Trajectories per critic forward/backward; None = the whole mini batch."
    )
    forward_micro_batch_size_per_gpu: Union[int, None] = option(
        None, "Trajectories per forward when computing the values; None = ppo_micro_batch_size_per_gpu."
    )
    ppo_epochs: Union[int, None] = option(
        None, "Passes of the critic over each step's batch; None = actor_rollout_ref.actor.ppo_epochs."
    )
    shuffle: Union[bool, None] = option(
        None, "Shuffle trajectories before the critic's mini batches; None = the actor's shuffle."
    )
    cliprange_value: float = option(
        0.5,
        "Value clipping: the loss is the larger of (V - R)^2 and (clip(V, V_old +- cliprange_value) "
        "- R)^2, halved (verl's compute_value_loss).",
    )
    grad_clip: float = option(1.0, "Gradient-norm clip of the critic (a non-finite norm skips the step).")
    loss_agg_mode: Union[
        Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"], None
    ] = option(None, "How the value loss is aggregated; None = actor_rollout_ref.actor.loss_agg_mode.")


def uses_critic(adv_estimator: str) -> bool:
    """Whether the estimator needs a learned value (verl's need_critic: GAE only)."""
    return adv_estimator == "gae"


def _positive(key: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ConfigError(key, f"must be >= 1, got {value!r}")


def check_critic(critic: CriticConfig, *, train_batch_size: int, n: int, world: int,
                 actor_mini: int) -> None:
    """The critic's keys: learning rate, clips, and its batches against the data batch and the workers.
    Checked whatever the estimator (a saved config switched to gae later must already be sound)."""
    if critic.optim.lr <= 0:
        raise ConfigError(f"{CRITIC}.optim.lr", "must be > 0")
    if len(critic.optim.betas) != 2 or not all(0 <= b < 1 for b in critic.optim.betas):
        raise ConfigError(f"{CRITIC}.optim.betas", "must be two numbers in [0, 1)")
    for name in ("lr_warmup_steps_ratio", "min_lr_ratio"):
        if not 0 <= getattr(critic.optim, name) <= 1:
            raise ConfigError(f"{CRITIC}.optim.{name}", "must be in [0, 1]")
    if critic.cliprange_value <= 0:
        raise ConfigError(f"{CRITIC}.cliprange_value", f"must be > 0, got {critic.cliprange_value}")
    if critic.grad_clip <= 0:
        raise ConfigError(f"{CRITIC}.grad_clip", "must be > 0")
    for name in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "forward_micro_batch_size_per_gpu",
                 "ppo_epochs"):
        _positive(f"{CRITIC}.{name}", getattr(critic, name))
    mini = critic.ppo_mini_batch_size or actor_mini
    key = f"{CRITIC}.ppo_mini_batch_size"
    if critic.ppo_mini_batch_size is None:  # inherited from the actor: its own check reports a bad one
        if mini > train_batch_size or train_batch_size % mini or (mini * n) % world:
            return
    if mini > train_batch_size or train_batch_size % mini:
        raise ConfigError(key, f"must divide data.train_batch_size ({train_batch_size}), got {mini}")
    if (mini * n) % world:
        raise ConfigError(key, f"ppo_mini_batch_size * rollout.n ({mini * n}) must be divisible by the "
                               f"number of workers ({world})")
    micro = critic.ppo_micro_batch_size_per_gpu
    if micro is not None and (mini * n // world) % micro:
        raise ConfigError(f"{CRITIC}.ppo_micro_batch_size_per_gpu",
                          f"must divide the per-worker critic mini batch ({mini * n // world} trajectories)")
