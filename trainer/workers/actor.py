"""The policy worker (and the frozen reference worker): log-probs, the PPO update, state, weights.

`ActorWorker` is a plain class called with an `ExperienceBatch`; it holds the HF causal LM (plain,
or FSDP2-sharded by trainer.parallel when the world size is > 1), and, when trainable, AdamW and the
LR schedule. Each rank's `trainer.parallel.worker.RankWorker` owns one and calls the same methods on
its share of the batch, whether the group is the in-process one (world 1) or Ray actors.

  compute_log_prob(batch)  -> (log_probs (B, R), entropy (B, R))   no grad, length-bucketed micro-batches
  update_policy(batch)     -> metrics {name: [values]}             ppo_epochs x mini-batches x micro-batches
  state_dict() / load_state_dict()                                 model + optimizer + scheduler (in memory)
  save_sharded(dir) / load_sharded(dir)                            the same through torch.distributed.checkpoint
  named_tensors()                                                  (HF name, tensor) pairs for weight sync

Forward: rows of a micro-batch that share a prompt (GRPO's n samples of one prompt) take the
shared-prompt forward of trainer.workers.prefix (each distinct prompt computed once, its keys/values
handed to every sample; gradients flow back through them), the others one padded forward. With
`use_torch_compile` (actor/ref.use_torch_compile) that forward is `torch.compile(model.forward,
dynamic=True)` (see `model_setup.compiled_forward`); the rollout engine keeps the eager module.

Precision: weights stay float32 for the trainable actor (master weights); `model.dtype=bfloat16` runs
forward/backward under bf16 autocast. The reference worker is loaded directly in the compute dtype.
Dropout is off in every pass (eval mode; with gradient checkpointing the update runs in training mode,
which transformers needs to checkpoint, with every dropout rate set to 0): RL recomputes log-probs and
expects the update's first forward to equal them, which dropout would break.

The policy loss is the one `actor.policy_loss.loss_mode` names (trainer.algorithms.policy_losses:
vanilla, gspo, cispo, gpg, geo_mean, sapo, clip_cov, kl_cov; the last two also take their
actor.policy_loss keys, sapo the actor's tau_pos / tau_neg, and clip_cov draws its tokens from the
update's seeded generator); the KL and entropy terms are the same whatever it is. Rollout correction
(algorithm.rollout_correction, trainer.algorithms.rollout_correction.corrected_policy_loss): the
batch's importance weights multiply it, or in bypass mode weights and rejection are computed per
micro-batch against the rollout's log-probs.

Loss normalisation is global: each micro-batch's loss is weighted by its share of the WHOLE
mini-batch (all micro-batches of all ranks): tokens for token-mean, rows for the seq-mean modes (the
policy term by the aggregation its loss used: gspo's and sapo's are seq-mean-token-mean, geo_mean's a
mean over rows); the
counts are all-reduced once per mini-batch; seq-mean-token-sum-norm divides by a constant
(actor.loss_scale_factor, which resolve sets to the rollout's response length when unset), never by a
micro-batch's cut width. So micro-batching and data parallelism give the gradient of the full
mini-batch loss (verl HEAD's global token normalisation; verl 76f63 averaged per micro-batch
token-means, which differs when micro-batches hold different token counts). FSDP
averages gradients over ranks, so each rank scales its backward by the world size. `actor/pg_loss`
and `actor/kl_loss` are reported per mini-batch as that global loss; clipfrac / ppo_kl per micro-batch
(those the loss reports: gpg reports none, as verl's).
Under FSDP every rank must run the same number of forwards: micro-batch counts are equalised
(all-reduce max, then the largest chunks split: trainer.workers.micro).
"""
from __future__ import annotations

import warnings
from typing import Any, Iterable

import torch

from trainer.workers.collectives import all_reduce, dist_rank, dist_world, local_tensor
from trainer.workers.experience import ExperienceBatch, pack_micro_batch
from trainer.workers.micro import micro_chunks
from trainer.workers.model_setup import compiled_forward, is_sharded, takes_cache, without_dropout
from trainer.workers.optim import make_optimizer, retune_optimizer
from trainer.workers.prefix import group_prompts, pack_shared, shared_response_logits


class ActorWorker:
    """Policy (trainable=True) or reference (trainable=False) model on one device."""

    def __init__(self, *, model_path: str, device: torch.device, dtype: torch.dtype, actor_cfg: Any = None,
                 trainable: bool = True, temperature: float = 1.0, total_steps: int = 1,
                 log_prob_micro_batch_size: int | None = None, trust_remote_code: bool = False,
                 gradient_checkpointing: bool = False, pad_token_id: int = 0, model: Any = None,
                 use_torch_compile: bool = False, share_prompts: bool = True, rollout_correction: Any = None):
        from transformers import AutoModelForCausalLM

        self.device = device
        self.compute_dtype = dtype
        self.trainable = trainable
        self.cfg = actor_cfg
        self.rollout_correction = rollout_correction  # algorithm.rollout_correction (None: not configured)
        self.temperature = float(temperature) if temperature and temperature > 0 else 1.0
        self.log_prob_micro = log_prob_micro_batch_size
        self.pad_token_id = int(pad_token_id)
        load_dtype = torch.float32 if trainable else dtype
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=load_dtype,
                                                         trust_remote_code=trust_remote_code).to(device)
        # A module passed in is placed by its owner (FSDP2 sharding, CPU offload of the reference).
        self.model = model
        self.model.eval()  # dropout off everywhere (see module docstring)
        self.checkpointing = bool(trainable and gradient_checkpointing)
        if self.checkpointing:
            self.model.gradient_checkpointing_enable()
            self.model.config.use_cache = False
            # transformers recomputes activations only in training mode (`self.gradient_checkpointing
            # and self.training`): in eval mode the option did nothing. Training mode with every
            # dropout probability at 0 is the same forward as eval mode, and checkpoints.
            without_dropout(self.model)
        plain = not is_sharded(self.model)
        # The shared-prompt forward (trainer.workers.prefix) needs plain weights, no checkpointing and
        # a module that takes transformers' `cache` argument.
        self.share_prompts = bool(share_prompts and plain and not self.checkpointing
                                  and takes_cache(self.model))
        self._call = compiled_forward(self.model) if use_torch_compile and plain else self.model
        self.compiled = self._call is not self.model
        self.optimizer = None
        self.scheduler = None
        if trainable:
            if actor_cfg is None:
                raise ValueError("a trainable ActorWorker needs actor_cfg (actor_rollout_ref.actor)")
            optim = actor_cfg.optim
            # Only what trains: with LoRA (trainer.workers.lora) the base weights are frozen and
            # the optimizer, its state and the checkpoints hold the adapter alone.
            params = [p for p in self.model.parameters() if p.requires_grad]
            self.frozen_params = len(params) < sum(1 for _ in self.model.parameters())
            self.optimizer, self.scheduler, self._fused_optim = make_optimizer(params, optim, total_steps)
            self.optim_cfg = optim
        else:
            for p in self.model.parameters():
                p.requires_grad_(False)

    # ---- forward -------------------------------------------------------------------------------
    def _autocast(self):
        use = self.trainable and self.compute_dtype in (torch.bfloat16, torch.float16)
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype, enabled=use)

    def _response_logits(self, prompts: list[list[int]], responses: list[list[int]]
                         ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Logits (b, R_mb, V) predicting each response token, the labels (b, R_mb) and R_mb.

        Rows sharing a prompt (GRPO's n samples) take the shared-prompt forward (trainer.workers.prefix:
        each distinct prompt computed once) where it applies; otherwise one padded forward.
        """
        groups = group_prompts(prompts) if self.share_prompts else None
        with self._autocast():
            if groups is not None:
                inp = pack_shared(groups[0], groups[1], responses, pad_id=self.pad_token_id, device=self.device)
                return shared_response_logits(self.model, inp, self._call), inp.responses, inp.response_width
            mb = pack_micro_batch(prompts, responses, pad_id=self.pad_token_id, device=self.device)
            r = mb.response_width
            out = self._call(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                             position_ids=mb.position_ids, use_cache=False, logits_to_keep=r + 1)
        # Logit row t predicts token t+1: the last R_mb+1 rows minus the final one cover the response.
        return out.logits[:, -(r + 1):-1, :], mb.responses, r

    def _forward(self, batch: ExperienceBatch, idx: list[int], *, with_entropy: bool,
                 entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Log-probs (b, R_mb) of the response tokens of rows `idx` (and entropy), from their logits.

        The entropy is graph-free unless `entropy_grad` (an entropy bonus in the loss): as a metric it
        must not make autograd keep a second (b, R_mb, V) tensor alive through the backward.
        """
        from trainer.algorithms.losses import entropy_from_log_probs

        logits, labels, r = self._response_logits([batch.prompt_ids[i] for i in idx],
                                                  [batch.response_ids[i] for i in idx])
        if logits.dtype != torch.float32:
            logits = logits.float()
        if self.temperature != 1.0:  # dividing by 1 would only copy (b, R_mb, V)
            logits = logits / self.temperature
        log_probs = torch.log_softmax(logits, dim=-1)
        logp = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        ent = None
        if with_entropy:
            if entropy_grad:
                ent = entropy_from_log_probs(log_probs)
            else:
                with torch.no_grad():
                    ent = entropy_from_log_probs(log_probs.detach())
        return logp, ent, r

    def _micro_chunks(self, batch: ExperienceBatch, idx: list[int], micro_size: int | None) -> list[list[int]]:
        budget = None
        if self.cfg is not None and getattr(self.cfg, "use_dynamic_bsz", False):
            budget = int(self.cfg.ppo_max_token_len_per_gpu)
        return micro_chunks(batch, idx, micro_size, share_prompts=self.share_prompts, token_budget=budget)

    @torch.no_grad()
    def compute_log_prob(self, batch: ExperienceBatch, *, with_entropy: bool = True
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log_probs (B, R), entropy (B, R) or None) on CPU float32, zero past each response."""
        B, R = len(batch), batch.response_width
        logp_all = torch.zeros(B, R)
        ent_all = torch.zeros(B, R) if with_entropy else None
        for chunk in self._micro_chunks(batch, list(range(B)), self.log_prob_micro):
            logp, ent, r = self._forward(batch, chunk, with_entropy=with_entropy)
            rows = torch.as_tensor(chunk)
            logp_all[rows, :r] = logp.cpu()
            if with_entropy:
                ent_all[rows, :r] = ent.cpu()
        logp_all *= batch.response_mask
        if ent_all is not None:
            ent_all *= batch.response_mask
        return logp_all, ent_all

    # ---- update --------------------------------------------------------------------------------
    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"]) if self.optimizer else 0.0

    def update_policy(self, batch: ExperienceBatch, *, mini_batch_size: int, seed: int = 0,
                      capture: bool = False) -> dict[str, list[float]]:
        """PPO update over `batch` (needs advantages; old_log_probs may be None, see below).

        `mini_batch_size` is in trajectories (ppo_mini_batch_size x n). With `old_log_probs=None` the
        batch must be a single mini-batch and a single epoch: every micro-batch then runs on the
        unchanged parameters, so the detached current log-prob IS the old log-prob (ratio exactly 1)
        and the recompute pass is skipped. `capture=True` stores that log-prob and entropy (B, R) in
        `batch.old_log_probs` / `self.last_entropy` for reporting.
        """
        from trainer.algorithms.losses import agg_loss, kl_penalty, micro_batch_share
        from trainer.algorithms.policy_losses import get_policy_loss, loss_mode_options
        from trainer.algorithms.rollout_correction import corrected_policy_loss

        if not self.trainable:
            raise RuntimeError("update_policy called on a frozen (reference) worker")
        cfg = self.cfg
        compute_policy_loss = get_policy_loss(cfg.policy_loss.loss_mode)
        B, R = len(batch), batch.response_width
        if batch.advantages is None:
            raise ValueError("update_policy needs batch.advantages")
        on_policy_skip = batch.old_log_probs is None
        if on_policy_skip and (cfg.ppo_epochs != 1 or mini_batch_size < B):
            raise ValueError("old_log_probs may only be skipped with ppo_epochs=1 and one mini-batch")
        if cfg.use_kl_loss and batch.ref_log_probs is None:
            raise ValueError("actor.use_kl_loss needs batch.ref_log_probs")
        captured_logp = torch.zeros(B, R) if (capture or on_policy_skip) else None
        captured_ent = torch.zeros(B, R) if capture else None
        need_entropy = capture or cfg.entropy_coeff != 0
        # seq-mean-token-sum-norm's constant: the rollout's padded response length (resolve fills
        # actor.loss_scale_factor with it when unset), never a micro-batch's cut width.
        scale = getattr(cfg, "loss_scale_factor", None) or R
        metrics: dict[str, list[float]] = {}

        def add(name: str, value: float) -> None:
            metrics.setdefault(name, []).append(float(value))

        gen = torch.Generator().manual_seed(int(seed))
        world = dist_world()
        self.model.train(self.checkpointing)  # eval, or train with no dropout when checkpointing
        for _epoch in range(int(cfg.ppo_epochs)):
            order = torch.randperm(B, generator=gen).tolist() if cfg.shuffle else list(range(B))
            for m0 in range(0, B, mini_batch_size):
                mini = order[m0:m0 + mini_batch_size]
                rows_mini = torch.as_tensor(mini)
                mmask = batch.loss_mask[rows_mini]
                g_tokens, g_rows = all_reduce([float(mmask.sum()), float(len(mini))])
                self.optimizer.zero_grad(set_to_none=True)
                mini_pg = mini_kl = 0.0
                for micro in self._micro_chunks(batch, mini, cfg.ppo_micro_batch_size_per_gpu):
                    rows = torch.as_tensor(micro)
                    logp, ent, r = self._forward(batch, micro, with_entropy=need_entropy,
                                                  entropy_grad=cfg.entropy_coeff != 0)
                    mask = batch.loss_mask[rows, :r].to(self.device)
                    adv = batch.advantages[rows, :r].to(self.device)
                    old = logp.detach() if on_policy_skip else batch.old_log_probs[rows, :r].to(self.device)
                    if captured_logp is not None:
                        captured_logp[rows, :r] = logp.detach().cpu()
                    if captured_ent is not None:
                        captured_ent[rows, :r] = ent.detach().cpu()
                    # Rollout correction (trainer.algorithms.rollout_correction.corrected_policy_loss).
                    pg, corr_metrics = corrected_policy_loss(
                        compute_policy_loss, self.rollout_correction, old, logp, adv, mask,
                        rollout_log_prob=_rows(batch.rollout_log_probs, rows, r, self.device),
                        rollout_is_weights=_rows(batch.rollout_is_weights, rows, r, self.device),
                        clip_ratio=cfg.clip_ratio, clip_ratio_low=cfg.clip_ratio_low,
                        clip_ratio_high=cfg.clip_ratio_high, clip_ratio_c=cfg.clip_ratio_c,
                        loss_agg_mode=cfg.loss_agg_mode, loss_scale_factor=scale,
                        **loss_mode_options(cfg.policy_loss, gen, actor=cfg))
                    for name, value in corr_metrics.items():
                        add(name, value)
                    # This micro-batch's share of the whole (all-rank) mini-batch loss: see the docstring.
                    # The policy term by the aggregation it used (gspo's is its own), the others by
                    # loss_agg_mode.
                    weight = micro_batch_share(cfg.loss_agg_mode, mask, g_tokens, g_rows)
                    pg_weight = micro_batch_share(pg.loss_agg_mode, mask, g_tokens, g_rows)
                    loss = pg.pg_loss * pg_weight
                    if cfg.entropy_coeff != 0:
                        loss = loss - cfg.entropy_coeff * weight * agg_loss(ent, mask, cfg.loss_agg_mode, scale)
                    if cfg.use_kl_loss:
                        ref = batch.ref_log_probs[rows, :r].to(self.device)
                        kl = agg_loss(kl_penalty(logp, ref, cfg.kl_loss_type), mask, cfg.loss_agg_mode, scale)
                        loss = loss + cfg.kl_loss_coef * weight * kl
                        mini_kl += kl.item() * weight
                    # FSDP averages gradients over ranks: scale by the world size to get the sum.
                    (loss * world).backward()
                    mini_pg += pg.pg_loss.item() * pg_weight
                    for name, value in pg.metrics().items():  # the ones this loss reports (verl's)
                        add(name, value)
                mini_pg, mini_kl = all_reduce([mini_pg, mini_kl])
                add("actor/pg_loss", mini_pg)
                if cfg.use_kl_loss:
                    add("actor/kl_loss", mini_kl)
                    add("actor/kl_coef", cfg.kl_loss_coef)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=cfg.grad_clip)
                grad_norm = local_tensor(grad_norm)
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                else:
                    # A non-finite gradient would poison the weights and Adam's moments: drop the step.
                    self.optimizer.zero_grad(set_to_none=True)
                    add("actor/skipped_steps", 1.0)
                add("actor/grad_norm", grad_norm.item())
        add("actor/lr", self.current_lr())
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()  # the rollout engine generates with this module: cached decoding, no checkpointing
        if on_policy_skip or capture:
            batch.old_log_probs = batch.old_log_probs if batch.old_log_probs is not None \
                else captured_logp * batch.response_mask
        self.last_entropy = captured_ent * batch.response_mask if captured_ent is not None else None
        return metrics

    # ---- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {"model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()}}
        if self.trainable:
            state["optimizer"] = self.optimizer.state_dict()
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def _keep_fused(self) -> None:
        """A loaded optimizer state brings its param groups' `fused` flag with it (a checkpoint written
        before the fused kernel was used says None): keep this worker's choice, so a resumed run takes
        the same update path as an uninterrupted one."""
        for group in self.optimizer.param_groups:
            group["fused"] = self._fused_optim or None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.trainable:
            self.optimizer.load_state_dict(state["optimizer"])
            self._keep_fused()
            self.scheduler.load_state_dict(state["scheduler"])

    def retune_optimizer(self) -> float:
        """The config's lr, weight decay and schedule over the loaded optimizer state (a fork:
        `retune_optimizer`); the new lr."""
        return retune_optimizer(self.optimizer, self.scheduler, self.optim_cfg)

    def _state_options(self) -> Any:
        """What a checkpoint holds: every parameter, or with frozen ones (LoRA's base) only those
        that train. Loading then sets only those (the frozen ones are the model folder's); the
        DCP load itself still fails on any of them missing from the checkpoint."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        frozen = getattr(self, "frozen_params", False)
        return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)

    def _train_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(model, optimizer) state dicts as a checkpoint holds them (see `_state_options`)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self._state_options())
        if getattr(self, "frozen_params", False):
            # A tied alias of a frozen weight (lm_head = embed_tokens) escapes ignore_frozen_params:
            # keep exactly the parameters that train.
            keep = {n for n, p in self.model.named_parameters() if p.requires_grad}
            model_sd = {k: v for k, v in model_sd.items() if k in keep}
        return model_sd, optim_sd

    def save_sharded(self, path: str) -> None:
        """Model + optimizer through torch.distributed.checkpoint (each rank writes its shards; call on
        every rank); the LR scheduler (identical on every rank) as scheduler.pt by rank 0."""
        import torch.distributed.checkpoint as dcp

        if self.trainable:
            model_sd, optim_sd = self._train_state()
            state = {"model": model_sd, "optim": optim_sd}
        else:
            state = {"model": self.model.state_dict()}
        with warnings.catch_warnings():  # one worker saves without a process group, as intended
            warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
            dcp.save(state, checkpoint_id=path)
        if self.trainable and dist_rank() == 0:
            torch.save(self.scheduler.state_dict(), f"{path}/scheduler.pt")

    def load_sharded(self, path: str) -> None:
        """Inverse of save_sharded (every rank; the world size may differ from the saving run's)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        if self.trainable:
            model_sd, optim_sd = self._train_state()
            state = {"model": model_sd, "optim": optim_sd}
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
                dcp.load(state, checkpoint_id=path)
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"], options=self._state_options())
            self._keep_fused()
            self.scheduler.load_state_dict(torch.load(f"{path}/scheduler.pt", weights_only=False))
        else:
            state = {"model": self.model.state_dict()}
            dcp.load(state, checkpoint_id=path)
            self.model.load_state_dict(state["model"])

    def named_tensors(self) -> Iterable[tuple[str, torch.Tensor]]:
        """(HF parameter name, tensor) pairs for the rollout engine (lazy: one tensor at a time).

        Parameters, not the state dict: tied weights (lm_head = embed_tokens) appear once, under the
        name the module registered first, as engines expect.
        """
        for name, param in self.model.named_parameters():
            yield name, param.detach()


def _rows(t: torch.Tensor | None, rows: torch.Tensor, r: int, device: torch.device) -> torch.Tensor | None:
    """Rows `rows`, first `r` columns of a (B, R) batch tensor on `device` (None stays None)."""
    return None if t is None else t[rows, :r].to(device)
