"""Interactions: the simulated user of a multi-turn rollout (verl's interaction system).

    base.py    BaseInteraction / InteractionReply, the registry (register_interaction, get_interaction)
    gsm8k.py   `gsm8k`: checks the answer against the ground truth and asks for another try

A run picks one by name with `actor_rollout_ref.rollout.multi_turn.interaction`; each row may pass it
arguments in `extra_info.interaction_kwargs` (verl's field). verl reads the interactions from a YAML
file of class paths (`interaction_config_path`); here a name selects a registered class, so no config
can make the trainer import code.
"""
from __future__ import annotations

from trainer.interactions import gsm8k as _gsm8k  # noqa: F401  (registers `gsm8k`)
from trainer.interactions.base import (
    BaseInteraction,
    InteractionReply,
    get_interaction,
    register_interaction,
    registered_interactions,
)

__all__ = ["BaseInteraction", "InteractionReply", "get_interaction", "register_interaction",
           "registered_interactions"]
