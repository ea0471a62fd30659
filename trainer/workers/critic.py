"""The critic (PPO with GAE): a value model trained beside the actor on each step's batch.

`CriticWorker` holds a Hugging Face token-classification model with one label: the transformer
body of `critic.model.path` (the actor's model unless set) and a scalar head `score` on every
position (verl's critic is the same AutoModelForTokenClassification, num_labels=1). A head the folder
does not have starts at zero, so the first values are 0 whatever the seed and the world size (a
checkpoint that has one, a trained critic, keeps it). Like the actor it is FSDP2-sharded by
trainer.parallel when the world size is > 1 (`load_value_model` then `shard_module`), float32
master weights, bf16 autocast on GPUs, dropout off.

  compute_values(batch)  -> values (B, R)           V of the state before each response token
  update_critic(batch)   -> metrics {name: [values]} ppo_epochs x mini-batches x micro-batches
  save_sharded(dir) / load_sharded(dir)             model + optimizer (DCP) + LR scheduler

Forward: rows of a micro-batch that share a prompt (GRPO's n samples) run it once, its keys and
values handed to each sample (`shared_values`, the actor's shared-prompt forward of
trainer.workers.prefix taken to the body's hidden states); otherwise, and under FSDP2, one padded
forward. Values are aligned as the actor's log-probs: position t is the head's output on the token before
response token t (the last prompt token for t = 0), so V_t is the value of the state the policy
acted in. The loss is verl's clipped value loss (trainer.algorithms.losses.value_loss) over the
loss mask (tool replies are not trained), normalised like the actor's: each micro-batch weighted by
its share of the whole mini-batch on every rank, so micro-batching and data parallelism give the
gradient of the full mini-batch loss. Metrics (verl's names): critic/vf_loss (per mini-batch, the
global loss), critic/vf_clipfrac and critic/vpred_mean (per micro-batch), critic/grad_norm (per
optimizer step), critic/lr.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from trainer.workers.collectives import all_reduce, dist_rank, dist_world, local_tensor
from trainer.workers.experience import ExperienceBatch, pack_micro_batch
from trainer.workers.micro import micro_chunks
from trainer.workers.model_setup import is_sharded, takes_cache, without_dropout
from trainer.workers.optim import make_optimizer, retune_optimizer
from trainer.workers.prefix import SharedInput, group_prompts, pack_shared


def load_value_model(path: str, *, dtype: torch.dtype, trust_remote_code: bool = False) -> torch.nn.Module:
    """The value model of `path`: its body with a one-output `score` head (zero when the folder has
    none), classifier dropout 0."""
    from transformers import AutoConfig, AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "lm_head not used / score newly initialized" is the intent here
    try:
        model, info = AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=dtype, trust_remote_code=trust_remote_code, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    head = getattr(model, "score", None)
    if head is None:
        raise ValueError(f"{type(model).__name__} has no `score` head: not usable as a value model")
    missing = set(info.get("missing_keys") or [])
    with torch.no_grad():
        for name, param in head.named_parameters():
            if f"score.{name}" in missing:
                param.zero_()
    return model


def shared_values(model: Any, inp: SharedInput) -> torch.Tensor:
    """Values (b, R_mb) from one body forward per distinct prompt (trainer.workers.prefix's shared-prompt
    forward, taken to the body's hidden states and the scalar head instead of the LM head)."""
    from transformers import DynamicCache

    body = getattr(model, model.base_model_prefix)
    cache = DynamicCache(config=getattr(model, "config", None))
    first = body(input_ids=inp.prompt_ids, attention_mask=inp.prompt_mask, position_ids=inp.prompt_pos,
                 cache=cache, use_cache=True).last_hidden_state[:, -1:, :]  # (U, 1, H)
    hidden = first.index_select(0, inp.select)  # (b, 1, H)
    if inp.response_width > 1:
        cache.batch_select_indices(inp.select)
        rest = body(input_ids=inp.feed_ids, attention_mask=inp.full_mask, position_ids=inp.feed_pos,
                    cache=cache, use_cache=True).last_hidden_state  # (b, R_mb - 1, H)
        hidden = torch.cat([hidden, rest], dim=1)
    return model.score(model.dropout(hidden))[..., 0]


class CriticWorker:
    """The value model on one device (a shard of it under FSDP2), its AdamW and LR schedule."""

    def __init__(self, *, model: torch.nn.Module, cfg: Any, device: torch.device, dtype: torch.dtype,
                 total_steps: int, pad_token_id: int, loss_scale_factor: float | None = None):
        self.model = model  # placed (and sharded) by its owner
        self.cfg = cfg  # the resolved critic section
        self.device = device
        self.compute_dtype = dtype
        self.pad_token_id = int(pad_token_id)
        self.loss_scale_factor = loss_scale_factor
        without_dropout(self.model)
        self.model.eval()
        # Rows sharing a prompt (GRPO's n samples) run it once, as the actor does: plain weights only
        # (under FSDP2 a second root forward per micro-batch would all-gather every parameter again).
        body = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
        self.share_prompts = bool(body is not None and hasattr(self.model, "score") and not is_sharded(self.model)
                                  and takes_cache(body))
        optim = cfg.optim
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer, self.scheduler, self._fused_optim = make_optimizer(params, optim, total_steps)

    # ---- forward -------------------------------------------------------------------------------
    def _autocast(self):
        use = self.compute_dtype in (torch.bfloat16, torch.float16)
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype, enabled=use)

    def _values(self, batch: ExperienceBatch, idx: list[int]) -> tuple[torch.Tensor, int]:
        """Values (b, R_mb) float32 of rows `idx`, and R_mb."""
        prompts, responses = [batch.prompt_ids[i] for i in idx], [batch.response_ids[i] for i in idx]
        groups = group_prompts(prompts) if self.share_prompts else None
        if groups is not None:
            inp = pack_shared(groups[0], groups[1], responses, pad_id=self.pad_token_id, device=self.device)
            with self._autocast():
                return shared_values(self.model, inp).float(), inp.response_width
        mb = pack_micro_batch(prompts, responses, pad_id=self.pad_token_id, device=self.device)
        r = mb.response_width
        with self._autocast():
            out = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                             position_ids=mb.position_ids, use_cache=False)
        # Output row t is the value of the prefix ending at token t: rows -(R+1)..-2 precede the response tokens.
        return out.logits[:, -(r + 1):-1, 0].float(), r

    def _chunks(self, batch: ExperienceBatch, idx: list[int], micro: int | None) -> list[list[int]]:
        return micro_chunks(batch, idx, micro, share_prompts=self.share_prompts)

    @torch.no_grad()
    def compute_values(self, batch: ExperienceBatch) -> torch.Tensor:
        """(B, R) values on the CPU, float32, zero past each response."""
        B, R = len(batch), batch.response_width
        out = torch.zeros(B, R)
        for chunk in self._chunks(batch, list(range(B)), self.cfg.forward_micro_batch_size_per_gpu):
            v, r = self._values(batch, chunk)
            out[torch.as_tensor(chunk), :r] = v.cpu()
        return out * batch.response_mask

    # ---- update --------------------------------------------------------------------------------
    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def update_critic(self, batch: ExperienceBatch, *, mini_batch_size: int, seed: int = 0) -> dict[str, list[float]]:
        """critic.ppo_epochs passes over `batch` (needs values: V_old, and returns) in mini-batches of
        `mini_batch_size` trajectories (this rank's share)."""
        from trainer.algorithms.losses import masked_mean, micro_batch_share, value_loss

        if batch.values is None or batch.returns is None:
            raise ValueError("update_critic needs batch.values and batch.returns")
        cfg = self.cfg
        B = len(batch)
        metrics: dict[str, list[float]] = {}

        def add(name: str, value: float) -> None:
            metrics.setdefault(name, []).append(float(value))

        gen = torch.Generator().manual_seed(int(seed))
        world = dist_world()
        for _epoch in range(int(cfg.ppo_epochs)):
            order = torch.randperm(B, generator=gen).tolist() if cfg.shuffle else list(range(B))
            for m0 in range(0, B, mini_batch_size):
                mini = order[m0:m0 + mini_batch_size]
                mmask = batch.loss_mask[torch.as_tensor(mini)]
                g_tokens, g_rows = all_reduce([float(mmask.sum()), float(len(mini))])
                self.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                for micro in self._chunks(batch, mini, cfg.ppo_micro_batch_size_per_gpu):
                    rows = torch.as_tensor(micro)
                    vpred, r = self._values(batch, micro)
                    mask = batch.loss_mask[rows, :r].to(self.device)
                    loss, clipfrac = value_loss(vpred, batch.returns[rows, :r].to(self.device),
                                                batch.values[rows, :r].to(self.device), mask, cfg.cliprange_value,
                                                cfg.loss_agg_mode, self.loss_scale_factor or batch.response_width)
                    weight = micro_batch_share(cfg.loss_agg_mode, mask, g_tokens, g_rows)
                    (loss * weight * world).backward()  # FSDP averages gradients over ranks
                    mini_loss += loss.item() * weight
                    add("critic/vf_clipfrac", clipfrac.item())
                    add("critic/vpred_mean", masked_mean(vpred.detach(), mask).item())
                add("critic/vf_loss", all_reduce([mini_loss])[0])
                grad_norm = local_tensor(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                                         max_norm=cfg.grad_clip))
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                else:  # a non-finite gradient would poison the weights and Adam's moments
                    self.optimizer.zero_grad(set_to_none=True)
                    add("critic/skipped_steps", 1.0)
                add("critic/grad_norm", grad_norm.item())
        add("critic/lr", self.current_lr())
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return metrics

    # ---- state ---------------------------------------------------------------------------------
    def _keep_fused(self) -> None:
        for group in self.optimizer.param_groups:  # see ActorWorker._keep_fused
            group["fused"] = self._fused_optim or None

    def retune_optimizer(self) -> float:
        """The config's lr, weight decay and schedule over the loaded optimizer state (a fork:
        trainer.workers.optim.retune_optimizer); the new lr."""
        return retune_optimizer(self.optimizer, self.scheduler, self.cfg.optim)

    def save_sharded(self, path: str) -> None:
        """Model + optimizer through torch.distributed.checkpoint (every rank its shards), the LR
        scheduler as scheduler.pt by rank 0."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        with warnings.catch_warnings():  # one worker saves without a process group, as intended
            warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
        if dist_rank() == 0:
            torch.save(self.scheduler.state_dict(), f"{path}/scheduler.pt")

    def load_sharded(self, path: str) -> None:
        """Inverse of save_sharded (every rank; the world size may differ from the saving run's)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
            dcp.load(state, checkpoint_id=path)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self._keep_fused()
        self.scheduler.load_state_dict(torch.load(f"{path}/scheduler.pt", weights_only=False))
