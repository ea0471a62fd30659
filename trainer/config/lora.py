"""LoRA's keys in ``actor_rollout_ref.model`` (verl's: ``lora_rank``, ``lora_alpha``,
``target_modules``, ``exclude_modules``): their checks and warnings. The fields themselves are in
``actor_rollout_ref.ModelConfig``; what LoRA does in the trainer is in trainer.workers.lora.

Standard library only (the web side imports trainer.config).
"""

from __future__ import annotations

from typing import Any

from .fields import ConfigError

KEY = "actor_rollout_ref.model"
MAX_RANK = 4096  # a rank above the hidden size of any model we run is a typo, not an adapter


def _check_modules(key: str, value: Any, *, allow_none: bool) -> None:
    if value is None:
        if allow_none:
            return
        raise ConfigError(key, 'required: "all-linear", module names, or a regular expression')
    items = [value] if isinstance(value, str) else list(value)
    if not items or any(not isinstance(v, str) or not v.strip() for v in items):
        raise ConfigError(key, "must be a non-empty string or a list of non-empty module names")


def check_lora(model: Any) -> None:
    """Refuse LoRA settings that cannot run (the model's own modules are checked when it loads)."""
    if not isinstance(model.lora_rank, int) or not 0 <= model.lora_rank <= MAX_RANK:
        raise ConfigError(f"{KEY}.lora_rank", f"must be 0 (off) or a rank in [1, {MAX_RANK}], got {model.lora_rank!r}")
    if model.lora_rank == 0:
        return
    if not model.lora_alpha > 0:
        raise ConfigError(f"{KEY}.lora_alpha", f"must be > 0 with LoRA on, got {model.lora_alpha!r}")
    _check_modules(f"{KEY}.target_modules", model.target_modules, allow_none=False)
    _check_modules(f"{KEY}.exclude_modules", model.exclude_modules, allow_none=True)


def lora_warnings(cfg: Any) -> list[tuple[str, str]]:
    """(key, message) pairs for LoRA settings that run but probably are not meant."""
    arr = cfg.actor_rollout_ref
    model = arr.model
    out: list[tuple[str, str]] = []
    if model.lora_rank == 0:
        if model.target_modules != "all-linear" or model.exclude_modules is not None or model.lora_alpha != 16:
            out.append((f"{KEY}.lora_rank", "lora_rank=0 turns LoRA off: lora_alpha, target_modules and "
                                            "exclude_modules do nothing (set a rank, e.g. 32, to train an adapter)."))
        return out
    if arr.actor.optim.lr <= 1e-6:
        out.append(("actor_rollout_ref.actor.optim.lr",
                    f"lr={arr.actor.optim.lr:g} is a full fine-tuning rate; a LoRA adapter usually needs about "
                    "10x more (e.g. 1e-5 to 3e-5) to move as far per step."))
    if arr.ref.fsdp_config.param_offload:
        out.append(("actor_rollout_ref.ref.fsdp_config.param_offload",
                    "with LoRA the reference is the actor's own base weights (adapter disabled), not a "
                    "separate model: there is nothing to offload."))
    return out
