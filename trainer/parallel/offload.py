"""The actor kept in host memory between the phases that use it, as verl's
`actor_rollout_ref.actor.fsdp_config.param_offload` and `optimizer_offload` do.

- `param_offload`: the actor's parameters (its FSDP2 shards on several ranks) live in host memory and
  come to the GPU for the phases that compute with them: the old log-probs, the update, the weight
  sync to the rollout engine, checkpoints and exports. The rollout engine's weights and KV cache get
  the room meanwhile. They go to host memory as soon as the actor is built, before the reference and
  the engine (SGLang and vLLM size their pools from the memory free when they start). Not when the
  one-worker `hf` engine generates on the actor's own module: they stay on the GPU then.
- `optimizer_offload`: the optimizer's state (Adam's two moments: twice the trainable parameters in
  float32) lives in host memory and comes to the GPU for the update and checkpoints only.

Both are no-ops off a GPU (there is nowhere else to put them). Moving a module with `.to()` moves
FSDP2's sharded parameters too (each rank moves its own shard). The ref's `param_offload` is FSDP2's
own CPUOffloadPolicy when sharded (trainer.parallel.fsdp.shard_module: a layer at a time); on one
worker, without a process group, an `ActorOffload` of the reference brings it whole for its pass.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@torch.no_grad()
def module_to(model: torch.nn.Module, device: torch.device) -> None:
    """Every parameter and buffer of `model` (and any gradient it holds) on `device`."""
    model.to(device)
    for p in model.parameters():
        if p.grad is not None:
            p.grad = p.grad.to(device)


@torch.no_grad()
def optimizer_state_to(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Every tensor of `optimizer`'s per-parameter state (Adam's moments, its step counts) on `device`."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                state[key] = value.to(device, non_blocking=True)


class ActorOffload:
    """Where the actor's parameters and optimizer state are between phases: `resident()` brings what a
    phase needs to the device and, when offloading, sends it back to host memory after."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device,
                 *, params: bool, optimizer_state: bool):
        on_gpu = device.type == "cuda"
        self.model, self.optimizer, self.device = model, optimizer, device
        self.params = bool(params) and on_gpu
        self.optimizer_state = bool(optimizer_state) and on_gpu and optimizer is not None
        self.host = torch.device("cpu")
        self.depth = 0  # nested phases (a checkpoint during an update) move once

    @property
    def active(self) -> bool:
        return self.params or self.optimizer_state

    def offload(self) -> None:
        """Send what is offloaded to host memory (after the worker's init, and after each phase)."""
        if self.params:
            module_to(self.model, self.host)
        if self.optimizer_state:
            optimizer_state_to(self.optimizer, self.host)
        if self.active:
            torch.cuda.empty_cache()

    def load(self, *, optimizer: bool) -> None:
        if self.params:
            module_to(self.model, self.device)
        if optimizer and self.optimizer_state:
            optimizer_state_to(self.optimizer, self.device)

    @contextlib.contextmanager
    def resident(self, *, optimizer: bool = False) -> Iterator[None]:
        """The parameters (and, with `optimizer`, the optimizer state) on the device inside the block;
        back in host memory after it, when offloaded."""
        if not self.active:
            yield
            return
        self.depth += 1
        try:
            self.load(optimizer=optimizer)
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.offload()
