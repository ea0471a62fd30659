"""The operator's disk bounds on a run's checkpoints: how many it keeps (`check_checkpoints_kept`,
RLSTUDIO_MAX_CHECKPOINTS_PER_RUN) and the size of one (`check_checkpoint_size`,
RLSTUDIO_RUN_DISK_BUDGET_GB)."""
from __future__ import annotations

from typing import Any, Mapping

from .bounds import GateRefused
from .flat import flatten, int_at

GIB = 2**30  # the "GB" of RLSTUDIO_RUN_DISK_BUDGET_GB (trainer.disk_budget_gb)


def check_checkpoints_kept(config: Mapping[str, Any], cap: int | None) -> None:
    """Refuse trainer.max_actor_ckpt_to_keep above the operator's cap on checkpoints kept per run
    (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN; None: no cap). Unset, the trainer keeps the cap's number."""
    keep = int_at(flatten(config), "trainer.max_actor_ckpt_to_keep")
    if cap is not None and keep is not None and keep > cap:
        raise GateRefused("trainer.max_actor_ckpt_to_keep",
                          f"{keep} checkpoints kept, more than this platform's {cap} per run "
                          f"(RLSTUDIO_MAX_CHECKPOINTS_PER_RUN); give at most {cap}, or leave it unset to keep "
                          f"the newest {cap}")


def check_checkpoint_size(config: Mapping[str, Any], estimate: Any, budget_gb: float | None, *,
                          resume: bool = False) -> None:
    """Refuse a run one checkpoint of which is over the operator's disk budget per run
    (RLSTUDIO_RUN_DISK_BUDGET_GB; None: no budget): `estimate` is its
    `checkpoint_estimate.CheckpointEstimate` (None: unknown, nothing refused). Every run checkpoints
    at its last step (and when stopped) whatever trainer.save_freq says, so such a run would write a
    checkpoint over the budget after all its training. GateRefused names the key that shrinks it: the
    critic's (algorithm.adv_estimator) when the actor's part alone would fit, else LoRA's. A `resume`
    sets no key (it continues the run's own config): its refusal is on `run`, saying the run cannot
    resume until an admin raises the budget, and that a clone with the key changed is the way out."""
    if estimate is None or budget_gb is None or estimate.bytes <= budget_gb * GIB:
        return
    # What shrinks it: (the key, what a new run should do, what a clone of a resumed run should change).
    if estimate.critic_bytes and estimate.actor_bytes <= budget_gb * GIB:
        key, fix, clone = ("algorithm.adv_estimator",
                           f": the critic of gae ({estimate.critic_bytes / GIB:.2f} GB, float32 weights and AdamW's "
                           "moments) is what does not fit; use an estimator without a critic (e.g. grpo), or a "
                           "smaller model",
                           "an estimator without a critic (algorithm.adv_estimator, e.g. grpo) fits instead")
    elif estimate.lora:
        key, fix, clone = ("actor_rollout_ref.model.lora_rank", ": lower the LoRA rank, or choose a smaller model",
                           "a lower LoRA rank (actor_rollout_ref.model.lora_rank) writes a smaller checkpoint "
                           "(the new-run form's preview says whether it fits)")
    else:
        key, fix, clone = ("actor_rollout_ref.model.lora_rank",
                           " (float32 weights and AdamW's two moments, 12 bytes a parameter): train with LoRA "
                           "(actor_rollout_ref.model.lora_rank > 0: a checkpoint then holds the adapter alone), or "
                           "choose a smaller model",
                           "LoRA (actor_rollout_ref.model.lora_rank > 0: a checkpoint then holds the adapter alone) "
                           "writes a smaller checkpoint (the new-run form's preview says whether it fits)")
    if resume:
        raise GateRefused("run", f"one checkpoint of this run is about {estimate.bytes / GIB:.2f} GB, over this "
                                 f"deployment's per-run disk budget of {budget_gb:g} GB, so it cannot resume until an "
                                 f"admin raises RLSTUDIO_RUN_DISK_BUDGET_GB; a clone of it with {clone}")
    raise GateRefused(key, f"one checkpoint of this model is about {estimate.bytes / GIB:.2f} GB, over this "
                           f"deployment's per-run disk budget of {budget_gb:g} GB (RLSTUDIO_RUN_DISK_BUDGET_GB); a "
                           f"run always checkpoints its last step, whatever trainer.save_freq says{fix}")
