"""The disk one checkpoint of a run takes, estimated before it starts: from the model's config.json and the run's config.

What the trainer's checkpoint holds (trainer/resume.py `save_run`, trainer/workers/actor.py and
critic.py `save_sharded`: torch.distributed.checkpoint of model + optimizer), for P parameters:

- the actor: its float32 weights (the trainer trains float32 master weights whatever
  actor_rollout_ref.model.dtype says), 4 P bytes, and AdamW's two float32 moments, 8 P: 12 bytes a
  parameter. A model with tied embeddings (tie_word_embeddings) writes the shared matrix twice in the
  model's state (as the embedding and as lm_head), vocab x hidden x 4 bytes more;
- with LoRA (actor_rollout_ref.model.lora_rank > 0): the adapter alone, its A parameters
  (`memory_estimate.lora_parameters`) x 12; the frozen base is the model folder's, never written;
- with algorithm.adv_estimator=gae the critic beside it, trained in full whatever LoRA does: the
  model's body (no LM head) with a scalar head, 12 bytes a parameter;
- small files besides (scheduler, RNG and loader states, the config; DCP's metadata, about 2 KiB a
  tensor): not counted, so the estimate is a little under what is written, never over.

There is no key that leaves the optimizer out (verl's checkpoint.save_contents): a checkpoint is always
resumable. The final Hugging Face export (trainer.export_hf: huggingface/ in the run's folder, the
float32 weights, 4 P; with LoRA the merged model and the adapter) is written once after the last
checkpoint and is not measured against the run's disk budget; `export_bytes` says its size.

`estimate` is pure (unit-tested, and measured against a real tiny run's checkpoint); `estimate_for`
reads a catalog model's config.json.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .memory_estimate import (GIB, ModelShape, config_section, lora_parameters, read_model_config,
                              shape_from_config)

ADAM = 12  # bytes a trained parameter: float32 weights + AdamW's two float32 moments


@dataclass(frozen=True)
class CheckpointEstimate:
    """Bytes of one checkpoint (the actor's part, the critic's) and of the final export; `lora`: the
    actor's part is the adapter's alone."""

    actor_bytes: int
    critic_bytes: int
    export_bytes: int
    lora: bool

    @property
    def bytes(self) -> int:
        return self.actor_bytes + self.critic_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "gib": round(self.bytes / GIB, 3),
                "actor_gib": round(self.actor_bytes / GIB, 3), "critic_gib": round(self.critic_bytes / GIB, 3),
                "export_gib": round(self.export_bytes / GIB, 3), "lora": self.lora}


def estimate(shape: ModelShape, cfg: Mapping[str, Any], *, tied_embeddings: bool) -> CheckpointEstimate:
    """One checkpoint of a run of `cfg` (a config as stored: nested dicts; a missing key is the
    schema's default) on a model of `shape`; `tied_embeddings`: the model's config.json ties its
    LM head to the embedding."""
    model = config_section(cfg, "actor_rollout_ref.model")
    p = shape.num_parameters
    embedding = shape.vocab_size * shape.hidden_size
    rank = model.get("lora_rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else 0
    adapter = 0
    if rank:
        adapter = lora_parameters(shape, rank=rank, target_modules=model.get("target_modules", "all-linear"),
                                  exclude_modules=model.get("exclude_modules"))
        actor = ADAM * adapter
    else:
        actor = ADAM * p + (4 * embedding if tied_embeddings else 0)
    critic = 0
    if config_section(cfg, "algorithm").get("adv_estimator") == "gae":
        body = p if tied_embeddings else p - embedding  # the LM head is not the value model's
        critic = ADAM * (body + shape.hidden_size + 1)  # + the scalar head (weight and bias)
    trainer = config_section(cfg, "trainer")
    export = 4 * (p + adapter) if trainer.get("export_hf", True) else 0
    return CheckpointEstimate(actor_bytes=actor, critic_bytes=critic, export_bytes=export, lora=bool(rank))


def estimate_for(*, model, cfg: Mapping[str, Any]) -> CheckpointEstimate:
    """The estimate of a run of `cfg` on a catalog model (its folder's config.json; the catalog's
    parameter count when it has one). memory_estimate.ModelConfigUnreadable when it cannot be read."""
    shape = shape_from_config(read_model_config(model.path), num_parameters=getattr(model, "num_parameters", None))
    return estimate(shape, cfg, tied_embeddings=shape.tie_word_embeddings)
