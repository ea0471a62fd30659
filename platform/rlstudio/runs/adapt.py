"""A preset fitted to the resources a run is given: the CPU, one GPU, or N GPUs.

Presets are written for a machine (verl's GSM8K multi-turn example for 8 GPUs, `cpu_smoke` for one
CPU). The platform writes the resource keys themselves (device, nodes, GPUs per node, launcher) from
the run's `gpus` (`launch.platform_values`); this module fits the preset's keys that depend on them,
so that a preset validates on whatever the user picked:

- on the CPU, `rollout.name=sglang` or `vllm` becomes `hf` (SGLang and vLLM need a GPU; `hf` runs
  anywhere);
- with W workers (W = the GPUs, 1 on the CPU), `data.train_batch_size * rollout.n` and
  `actor.ppo_mini_batch_size * rollout.n` must split evenly over W: both batch sizes are raised to the
  next multiple of W / gcd(W, n) (the mini batch still dividing the train batch), and a preset's
  `data.gen_batch_size` (dynamic sampling's generation batch) keeps its ratio to the train batch;
- `actor.ppo_micro_batch_size_per_gpu` must divide each worker's share of a mini batch: it becomes
  the largest divisor of that share not above the preset's value.

Only a preset is adapted, before the user's own changes are applied: a value the user typed (a field,
an override, a whole config, a saved config) is never changed here, and when it does not fit, the
user gets the error. Every change is returned with its reason, and the form's preview lists them
("adapted for CPU: ..."). Pure functions of the config and the GPU count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainer.config import Config, apply_overrides

# Rollout engines that need a GPU, by the name a change's reason gives them.
GPU_ENGINES = {"sglang": "SGLang", "vllm": "vLLM"}


@dataclass(frozen=True)
class Adaptation:
    """One preset key changed to fit the resources: from `before` to `after`, and why."""

    key: str
    before: Any
    after: Any
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "before": self.before, "after": self.after, "reason": self.reason}


@dataclass(frozen=True)
class Adapted:
    """A preset's config fitted to `resources` ("CPU", "1 GPU", "4 GPUs"), with what changed."""

    config: Config
    changes: tuple[Adaptation, ...]
    resources: str


def resources_label(gpus: int) -> str:
    if gpus <= 0:
        return "CPU"
    return "1 GPU" if gpus == 1 else f"{gpus} GPUs"


def workers_for(gpus: int) -> int:
    """Workers of a run with `gpus` GPUs: one per GPU, one on the CPU (what `platform_values` sets)."""
    return max(int(gpus), 1)


def node_layout(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(trainer.nnodes, trainer.n_gpus_per_node) of a run with `gpus` GPUs on nodes of `gpus_per_node`
    GPUs: one node while they fit on one (the CPU: one worker), else whole nodes, one bundle each (the
    trainer's STRICT_SPREAD placement). ValueError when they do not fill whole nodes."""
    gpus, per_node = int(gpus), max(int(gpus_per_node), 1)
    if gpus <= per_node:
        return 1, workers_for(gpus)
    if gpus % per_node:
        raise ValueError(f"{gpus} GPUs do not fill whole nodes of {per_node} GPUs: ask for at most {per_node} "
                         f"or a multiple of {per_node}")
    return gpus // per_node, per_node


def driver_gpus(gpus: int) -> int:
    """GPUs the run's Ray job entrypoint (the trainer's driver) reserves. A run with one worker runs it
    in the driver's own process (trainer.launcher=auto -> local), so the driver takes the GPU; with
    several GPUs the workers are Ray actors whose placement group reserves them, and the driver only
    coordinates: reserving them for the driver as well would make the run wait for twice its GPUs."""
    return int(gpus) if workers_for(gpus) == 1 else 0


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def adapt_preset(cfg: Config, *, gpus: int) -> Adapted:
    """`cfg` (a preset's config) fitted to a run with `gpus` GPUs (0: the CPU); see the module doc."""
    world = workers_for(gpus)
    arr = cfg.actor_rollout_ref
    changes: list[Adaptation] = []
    where = resources_label(gpus)

    engine = arr.rollout.name
    if gpus <= 0 and engine in GPU_ENGINES:
        changes.append(Adaptation("actor_rollout_ref.rollout.name", engine, "hf",
                                  f"{GPU_ENGINES[engine]} needs a GPU; the hf engine runs on the CPU"))

    n = arr.rollout.n
    train, mini = cfg.data.train_batch_size, arr.actor.ppo_mini_batch_size
    step = world // math.gcd(world, n)  # batch sizes must be multiples of this for n * batch % world == 0
    new_mini = _round_up(max(mini, 1), step)
    new_train = _round_up(max(train, new_mini), new_mini)
    if new_mini != mini:
        changes.append(Adaptation("actor_rollout_ref.actor.ppo_mini_batch_size", mini, new_mini,
                                  f"ppo_mini_batch_size x rollout.n ({mini} x {n}) must split evenly over "
                                  f"{world} workers"))
    if new_train != train:
        changes.append(Adaptation("data.train_batch_size", train, new_train,
                                  f"train_batch_size x rollout.n must split evenly over {world} workers, "
                                  f"and ppo_mini_batch_size ({new_mini}) must divide it"))
        gen = cfg.data.gen_batch_size
        if gen is not None:
            new_gen = -(-gen * new_train // train)  # rounded up
            changes.append(Adaptation("data.gen_batch_size", gen, new_gen,
                                      f"kept at the preset's {gen} per {train} of data.train_batch_size"))

    micro = arr.actor.ppo_micro_batch_size_per_gpu
    if micro is not None and not arr.actor.use_dynamic_bsz:
        share = new_mini * n // world  # trajectories of one mini batch on one worker
        new_micro = _largest_divisor_at_most(share, micro)
        if new_micro != micro:
            changes.append(Adaptation("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro, new_micro,
                                      f"must divide each worker's share of a mini batch ({share} trajectories)"))

    if not changes:
        return Adapted(config=cfg, changes=(), resources=where)
    adapted = apply_overrides(cfg, {c.key: c.after for c in changes})
    return Adapted(config=adapted, changes=tuple(changes), resources=where)
