"""The GRPO training loop (the driver): setup, the step, validation, checkpoints, resume.

`Trainer(cfg, emitter=..., should_stop=...).fit()` runs the whole training and returns "succeeded" or
"stopped". `Trainer.train_step` is the step, phase by phase:

  load prompts -> rollout (MultiTurnRollout, n samples each) -> reward (score on the last trained
  token) -> old log-probs -> ref log-probs -> advantages (registry) -> update -> weight sync

With dynamic sampling (algorithm.filter_groups, DAPO) the first two phases repeat: `Trainer.rollout`
generates batches of data.gen_batch_size prompts until data.train_batch_size groups whose metric
varies are kept (trainer.algorithms.filter_groups), then the step goes on with those.

The models live in a worker group (trainer.parallel): one RankWorker per device, in this process
for one worker (trainer.launcher=local) or as Ray actors (launcher=ray). The driver loads prompts,
scores, computes advantages and reports; it splits each batch across the ranks (equal row counts,
token-balanced with trainer.balance_batch) for old/ref log-probs and the update, and gathers the
results. One worker is the world-size-1 case of the same code.

Old log-probs: recomputed by the actor, except when provably identical to the update's own first
forward: ppo_epochs == 1, the step's batch is ONE mini-batch and there is no KL in the reward. Then
every micro-batch of the update runs on the unchanged weights, so `log_prob.detach()` taken in the
update equals a recompute (ratio exactly 1, as verl's first micro-batch) and the extra forward is
skipped; the update still records those log-probs and entropies, so `actor/entropy`, the sample
token views and every metric are the same. In every other case (several mini-batches or epochs,
KL in reward) the recompute pass runs as in verl.

Scores sit on the last token with loss mask 1 (the end of the last assistant turn), or on the last
response token when there is none: for GRPO/RLOO only the sum matters; for REINFORCE++ this keeps the
return on a trained token in multi-turn (verl puts it on the last attention-valid token, which is the
same token unless a trajectory ends in a tool reply).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from trainer import checkpoint as ckpt
from trainer.algorithms.filter_groups import GroupPool, metric_values
from trainer.algorithms.metrics import (compute_count_metrics, compute_data_metrics, reduce_metrics,
                                       verl_num_turns, zero_adv_group_ratio)
from trainer.config import Config, resolve
from trainer.data import PromptLoader, all_items, load_prompt_dataset
from trainer.types import PromptItem, Trajectory
from trainer.workers.actor import resolve_device
from trainer.workers.experience import ExperienceBatch, make_batch


# --------------------------------------------------------------------------------- phase records
@dataclass
class StepPrompts:
    step: int
    epoch: int
    prompts: list[PromptItem]


@dataclass
class Experience:
    """A scored, log-prob'd, advantaged batch: trajectories plus their tensors."""

    trajectories: list[Trajectory]
    batch: ExperienceBatch
    entropy: torch.Tensor | None = None  # (B, R), from the old-log-prob pass (or the update's forward)


class Timer:
    """`with timer("gen"): ...` accumulates seconds under timing_s/gen."""

    def __init__(self) -> None:
        self.s: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.s[name] += time.perf_counter() - t0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Trainer:
    """Owns the models, the data, the rollout and the reporting of one run."""

    def __init__(self, cfg: Config, *, emitter: Any, monitor: Any = None,
                 should_stop: Callable[[], bool] = lambda: False):
        self.cfg = resolve(cfg)
        self.emitter = emitter
        self.monitor = monitor or _NullMonitor()
        self.should_stop = should_stop
        self.out_dir = Path(self.cfg.trainer.default_local_dir)
        self.global_step = 0
        self.epoch = 0

    # ------------------------------------------------------------------------------------ setup
    def setup(self) -> None:
        from trainer.algorithms.losses import get_kl_controller
        from trainer.rewards import get_reward_fn
        from trainer.tools import build_tools

        cfg = self.cfg
        arr, tr = cfg.actor_rollout_ref, cfg.trainer
        seed_everything(tr.seed)
        from trainer.parallel.group import resolve_launcher

        world = tr.nnodes * tr.n_gpus_per_node
        if tr.device == "cuda" and resolve_launcher(tr.launcher, world) == "ray":
            self.device = torch.device("cuda")  # the workers' GPUs; the driver itself may have none
        else:
            self.device = resolve_device(tr.device)
        from trainer.models.hf_folder import fill_sampling_defaults, load_tokenizer, read_generation_config

        tok_path = arr.model.tokenizer_path or arr.model.path
        self.tokenizer = load_tokenizer(tok_path, model_path=arr.model.path,
                                        trust_remote_code=arr.model.trust_remote_code)
        # generation_config.json: its end-of-turn ids join the stop ids; its sampling defaults fill
        # only the rollout keys the config left unset (None), before the workers get the config.
        self.generation = read_generation_config(arr.model.path)
        self.cfg, filled = fill_sampling_defaults(self.cfg, self.generation)
        if filled and self.emitter is not None:
            self.emitter.log("info", "sampling not set in the config: " + ", ".join(
                f"actor_rollout_ref.rollout.{k}={v} ({src})" for k, (v, src) in filled.items()))
        cfg = self.cfg
        arr = cfg.actor_rollout_ref

        self.tools = build_tools(cfg.tools.names, cfg.tools.config_path)
        tool_schema = self._tool_schema
        default_tools = [self.tools[n].schema for n in cfg.tools.names]
        ds_kwargs = dict(tokenizer=self.tokenizer, data_cfg=cfg.data, default_tools=default_tools,
                         resolve_tool=tool_schema)
        self.train_ds = load_prompt_dataset(cfg.data.train_files, **ds_kwargs)
        self.val_ds = load_prompt_dataset(cfg.data.val_files, **ds_kwargs) if cfg.data.val_files else None
        for name, ds in (("train", self.train_ds), ("val", self.val_ds)):
            if ds is not None and (ds.num_filtered_overlong or ds.num_truncated):
                self.emitter.log("warning", f"{name} data: {ds.num_filtered_overlong} of {ds.num_rows} prompts "
                                 f"longer than data.max_prompt_length={cfg.data.max_prompt_length} were filtered, "
                                 f"{ds.num_truncated} truncated")
        # With dynamic sampling the loader hands out generation batches (verl's dataloader: gen_batch_size).
        gen_batch_size = cfg.data.train_batch_size
        if cfg.algorithm.filter_groups.enable:
            gen_batch_size = cfg.data.gen_batch_size or cfg.data.train_batch_size
        self.loader = PromptLoader(self.train_ds, batch_size=gen_batch_size, shuffle=cfg.data.shuffle,
                                   seed=cfg.data.seed)
        self.total_steps = tr.total_training_steps or tr.total_epochs * self.loader.batches_per_epoch
        self.n = arr.rollout.n
        self.mini_batch_size = arr.actor.ppo_mini_batch_size * self.n  # trajectories per optimizer step
        batch_size = cfg.data.train_batch_size * self.n
        self.recompute_old = not (arr.actor.ppo_epochs == 1 and self.mini_batch_size >= batch_size
                                  and not cfg.algorithm.use_kl_in_reward)
        rc = cfg.algorithm.rollout_correction
        if rc.bypass_mode:  # the rollout's log-probs are the old ones: nothing to recompute
            self.recompute_old = False
        elif rc.rollout_is is not None or rc.rollout_rs is not None:  # needed before the update
            self.recompute_old = True
        self.use_ref = bool(arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)
        self.world_size = tr.nnodes * tr.n_gpus_per_node
        from trainer.config import apply_overrides
        from trainer.parallel.group import build_worker_group

        # The workers' LR schedule needs the run's length, known only now ("filled at run time").
        worker_cfg = self.cfg
        if not arr.actor.optim.total_training_steps or arr.actor.optim.total_training_steps <= 0:
            worker_cfg = apply_overrides(self.cfg, {"actor_rollout_ref.actor.optim.total_training_steps": self.total_steps})
        self.group = build_worker_group(worker_cfg.to_dict(), world_size=self.world_size, launcher=tr.launcher,
                                        device_type=self.device.type)
        self.emit_worker_memory()
        for info in getattr(self.group, "info", None) or []:
            if info.get("nvml_unavailable") and self.emitter is not None:
                self.emitter.log("warning", f"rank {info['rank']} ({info['device']}): the device's used memory "
                                 f"cannot be read from NVML ({info['nvml_unavailable']}); the memory timeline "
                                 "shows torch's allocator only (install the gpu extra: nvidia-ml-py)")
        self.reward_fn = get_reward_fn(cfg)
        self.kl_ctrl = get_kl_controller(cfg.algorithm.kl_ctrl)
        self.stop_ids = self._stop_token_ids()

    # Single-worker handles (benchmarks and tests look inside the one in-process worker).
    @property
    def actor(self) -> Any:
        w = getattr(self.group, "worker", None)
        return w.actor if w is not None else None

    @property
    def ref(self) -> Any:
        w = getattr(self.group, "worker", None)
        return w.ref if w is not None else None

    @property
    def engine(self) -> Any:
        w = getattr(self.group, "worker", None)
        return w.engine if w is not None else None

    def close(self) -> None:
        group = getattr(self, "group", None)
        if group is not None:
            self.group = None
            group.shutdown()

    def emit_worker_memory(self) -> None:
        """Forward the workers' buffered memory samples as memory events, each stamped with the time
        the worker read it (not the time it is forwarded: the timeline's phase bands span the phases
        as they ran), rank kept where the event schema has a rank field."""
        from trainer.events import MemoryData

        fields = set(MemoryData.__dataclass_fields__)
        for m in sorted(self.group.drain_memory(), key=lambda d: d.get("time", 0.0)):
            if self.emitter is not None:
                self.emitter.memory({k: v for k, v in m.items() if k in fields}, at=m.get("time"))

    def _tool_schema(self, name: str) -> dict[str, Any]:
        from trainer.tools import get_tool

        if name not in self.tools:
            self.tools[name] = get_tool(name)  # a tool named by a data row is offered to that row
        return self.tools[name].schema

    def _stop_token_ids(self) -> list[int]:
        """EOS, the chat family's end-of-turn tokens (trainer.chat.families; the multi-turn agent
        adds the template's own and the tool-call closer) and generation_config.json's eos ids."""
        from trainer.chat.families import stop_token_ids

        return stop_token_ids(self.tokenizer, extra=self.generation.eos_token_ids)

    def sampling(self, step: int, *, validate: bool = False, gen_batch: int = 0):
        from trainer.rollout.base import SamplingParams

        r = self.cfg.actor_rollout_ref.rollout
        # The seed is a function of the step (and of the step's generation batch with dynamic
        # sampling), not of an RNG stream: a resumed run samples what an uninterrupted one would have.
        if validate:
            v = r.val_kwargs
            temp = v.temperature if v.do_sample else 0.0
            return SamplingParams(temperature=temp, top_p=v.top_p, top_k=v.top_k, max_new_tokens=r.response_length,
                                  stop_token_ids=self.stop_ids, seed=r.seed + 7919 * (step + 1))
        return SamplingParams(temperature=r.temperature if r.do_sample else 0.0, top_p=r.top_p, top_k=r.top_k,
                              max_new_tokens=r.response_length, stop_token_ids=self.stop_ids,
                              seed=r.seed * 1_000_003 + step + 999_983 * gen_batch)

    # ------------------------------------------------------------------------------------ the step
    def train_step(self, step: int) -> dict[str, float]:
        t, g = Timer(), self.group
        extra: dict[str, float] = {}
        with t("step"):
            trajs = self.rollout(step, t, extra)  # timed as gen and reward
            with t("reward"):
                exp = self.experience(trajs)
            lengths = exp.batch.lengths()
            parts = g.split(lengths, balance=self.cfg.trainer.balance_batch)
            if g.world_size > 1:
                from trainer.parallel.balance import imbalance

                extra.update(imbalance(lengths, parts))
            if self.recompute_old:
                with t("old_log_prob"):
                    exp.batch.old_log_probs, exp.entropy = g.compute_log_prob(exp.batch, parts, step=step, role="actor",
                                                                              with_entropy=True)
            if self.use_ref:
                with t("ref"):
                    exp.batch.ref_log_probs, _ = g.compute_log_prob(exp.batch, parts, step=step, role="ref",
                                                                    with_entropy=False)
            corr_metrics = self.correct_rollout(exp)
            with t("adv"):
                extra.update(self.compute_advantages(exp))
            actor_metrics: dict[str, list[float]] = {}
            if step >= self.cfg.trainer.critic_warmup:
                with t("update_actor"):
                    capture = not self.recompute_old
                    actor_metrics, old, ent = g.update_policy(exp.batch, parts, mini_batch_size=self.mini_batch_size,
                                                              seed=self.cfg.trainer.seed * 7 + step, capture=capture,
                                                              step=step)
                    if capture:
                        exp.batch.old_log_probs = old * exp.batch.response_mask
                        if exp.entropy is None and ent is not None:
                            exp.entropy = ent
                with t("sync"):
                    extra.update(g.sync_weights(step=step))
        self.emit_worker_memory()
        # The actor's rollout_corr/* (current policy vs rollout, per micro-batch) override the driver's, as in verl.
        metrics = self.step_metrics(step, exp, t.s, {**corr_metrics, **reduce_metrics(actor_metrics)}, extra)
        self.emit_samples(step, exp)
        return metrics

    # ------------------------------------------------------------------------------ experience
    def rollout(self, step: int, t: Timer, metrics: dict[str, float]) -> list[Trajectory]:
        """The step's scored trajectories: one generation batch, or with dynamic sampling
        (algorithm.filter_groups) as many as it takes to keep data.train_batch_size groups whose
        metric varies, or max_num_gen_batches; the pool's counts go into `metrics`."""
        fg = self.cfg.algorithm.filter_groups
        pool: GroupPool[Trajectory] = GroupPool(target=self.cfg.data.train_batch_size)
        while True:
            self.epoch, prompts = self.loader.next_batch()
            with t("gen"):
                trajs = self.group.generate(prompts, n=self.n, step=step,
                                            sampling=self.sampling(step, gen_batch=pool.num_gen_batches))
            with t("reward"):
                self.reward(trajs)
            if not fg.enable:
                return trajs
            pool.add(trajs, [tr.uid for tr in trajs], metric_values(fg.metric, trajs))
            if pool.full or pool.limit_reached(fg.max_num_gen_batches):
                break
        trajs = pool.batch()
        metrics.update(pool.metrics())
        if pool.num_filled:
            self.emitter.log("warning", f"step {step}: {len(pool.kept)} of {self.cfg.data.train_batch_size} groups "
                             f"with a varying {fg.metric} after algorithm.filter_groups.max_num_gen_batches="
                             f"{fg.max_num_gen_batches} generation batches; {pool.num_filled} groups whose "
                             f"{fg.metric} is the same for every sample fill the batch")
        return trajs

    def reward(self, trajs: list[Trajectory]) -> None:
        """Score each trajectory: the reward function's score, plus the overlong penalty when
        reward_model.overlong_buffer is on (trainer.rewards.overlong); sets score, reward, reward_extra."""
        from trainer.rewards.overlong import shape

        buffer = self.cfg.reward_model.overlong_buffer
        limit = self.cfg.actor_rollout_ref.rollout.response_length
        for tr in trajs:
            p = tr.prompt
            out = self.reward_fn(p.data_source, tr.response_text, p.ground_truth,
                                 {**p.extra_info, "tool_rewards": tr.tool_rewards, "num_turns": tr.num_turns})
            if isinstance(out, dict):
                if "score" not in out:
                    raise ValueError(f"reward function returned a dict without 'score': {sorted(out)}")
                tr.score = float(out["score"])
                tr.reward_extra = {k: v for k, v in out.items() if k != "score"}
            else:
                tr.score = float(out)
            tr.reward, parts = shape(tr.score, len(tr.response_ids), buffer, limit)
            tr.reward_extra.update(parts)

    def score(self, trajs: list[Trajectory]) -> Experience:
        """Rewards (`reward`) and the batch they sit in (`experience`)."""
        self.reward(trajs)
        return self.experience(trajs)

    def experience(self, trajs: list[Trajectory]) -> Experience:
        """The batch of scored trajectories: each reward placed on its last trained token."""
        batch = make_batch([tr.prompt_ids for tr in trajs], [tr.response_ids for tr in trajs],
                           [tr.loss_mask for tr in trajs], uids=[tr.uid for tr in trajs])
        batch.rollout_log_probs = _rollout_log_probs(trajs, batch.loss_mask)
        scores = torch.zeros(len(trajs), batch.response_width)
        for i, tr in enumerate(trajs):
            trained = batch.loss_mask[i].nonzero()
            valid = batch.response_mask[i].nonzero()
            pos = int(trained[-1]) if len(trained) else (int(valid[-1]) if len(valid) else 0)
            scores[i, pos] = tr.reward
        batch.token_level_scores = scores
        return Experience(trajectories=trajs, batch=batch)

    def correct_rollout(self, exp: Experience) -> dict[str, float]:
        """Rollout correction before the advantages (algorithm.rollout_correction, verl's order). In
        bypass mode the rollout's log-probs become the old ones. Otherwise, given old log-probs, verl's
        weights, rejection and rollout_corr/* metrics (trainer.algorithms.rollout_correction): rejected
        tokens leave the loss mask, the weights go to the update."""
        from trainer.algorithms.rollout_correction import rollout_correction_for

        rc, b = self.cfg.algorithm.rollout_correction, exp.batch
        if rc.bypass_mode:
            if b.rollout_log_probs is None:
                raise RuntimeError("algorithm.rollout_correction.bypass_mode needs the rollout engine's log-probs")
            b.old_log_probs = b.rollout_log_probs.clone()
            return {}
        if b.old_log_probs is None or b.rollout_log_probs is None:
            return {}
        corr = rollout_correction_for(rc, b.old_log_probs, b.rollout_log_probs, b.loss_mask)
        b.loss_mask, b.rollout_is_weights = corr.mask, corr.weights
        return corr.metrics

    def compute_advantages(self, exp: Experience) -> dict[str, float]:
        from trainer.algorithms.advantages import get_adv_estimator
        from trainer.algorithms.losses import apply_kl_penalty

        alg, b = self.cfg.algorithm, exp.batch
        metrics: dict[str, float] = {}
        rewards = b.token_level_scores
        if alg.use_kl_in_reward:
            rewards, metrics = apply_kl_penalty(b.token_level_scores, b.old_log_probs, b.ref_log_probs, b.loss_mask,
                                                self.kl_ctrl, alg.kl_penalty)
        b.token_level_rewards = rewards
        fn = get_adv_estimator(alg.adv_estimator)
        b.advantages, b.returns = fn(rewards, b.loss_mask, b.uids, **dataclasses.asdict(alg))
        for tr, a in zip(exp.trajectories, b.advantages):
            nz = a[a != 0]
            tr.advantage = float(nz[0]) if len(nz) else 0.0
        return metrics

    # -------------------------------------------------------------------------------- reporting
    def step_metrics(self, step: int, exp: Experience, timing: dict[str, float], actor: dict[str, float],
                     extra: dict[str, float]) -> dict[str, float]:
        b, trajs = exp.batch, exp.trajectories
        cfg = self.cfg
        resp_len = b.response_mask.sum(-1)
        prompt_len = torch.tensor([float(len(p)) for p in b.prompt_ids])
        n_resp, n_total = resp_len.sum().item(), resp_len.sum().item() + prompt_len.sum().item()
        # verl's data metrics: lengths over the response (tool replies included), advantages and
        # returns over the trained tokens; num_turns/* counted as verl's agent loop counts turns.
        m = compute_data_metrics(
            token_level_scores=b.token_level_scores, token_level_rewards=b.token_level_rewards,
            advantages=b.advantages, returns=b.returns, response_mask=b.response_mask, loss_mask=b.loss_mask,
            prompt_lengths=prompt_len, max_response_length=cfg.actor_rollout_ref.rollout.response_length,
            max_prompt_length=cfg.data.max_prompt_length)
        m.update(compute_count_metrics("num_turns", [
            verl_num_turns(tr.num_turns, tr.messages, len(tr.prompt.messages), tr.finish_reason) for tr in trajs]))
        m.update(compute_count_metrics("tool_call_counts", [tr.tool_calls for tr in trajs]))
        m["critic/zero_adv_group_ratio"] = zero_adv_group_ratio(b.uids, b.token_level_rewards.sum(dim=-1).tolist())
        if exp.entropy is not None:
            m["actor/entropy"] = (exp.entropy * b.response_mask).sum().item() / max(1.0, b.response_mask.sum().item())
        if (b.old_log_probs is not None and b.rollout_log_probs is not None
                and not cfg.algorithm.rollout_correction.bypass_mode):  # bypass: old is the rollout
            diff = self._rollout_probs_diff(b)
            if diff is not None:
                m.update(diff)
        m.update(actor)
        m.update(extra)
        for k, v in timing.items():
            m[f"timing_s/{k}"] = v
        m["timing_s/old_log_prob"] = timing.get("old_log_prob", 0.0)
        for k in ("gen",):
            if k in timing and n_resp:
                m[f"timing_per_token_ms/{k}"] = 1000 * timing[k] / n_resp
        for k in ("old_log_prob", "ref", "adv", "update_actor"):
            if k in timing and n_total:
                m[f"timing_per_token_ms/{k}"] = 1000 * timing[k] / n_total
        world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
        m["perf/total_num_tokens"] = n_total
        m["perf/time_per_step"] = timing.get("step", 0.0)
        m["perf/throughput"] = n_total / max(1e-9, timing.get("step", 0.0) * world)
        from trainer.memory import rss_bytes

        m.setdefault("perf/cpu_memory_used_gb", rss_bytes() / 2**30)  # the workers' figure when they sent one
        if self.device.type == "cuda" and torch.cuda.is_initialized() and "perf/max_memory_allocated_gb" not in m:
            m["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            m["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(self.device) / 2**30
        m["data/filtered_overlong_prompts"] = float(self.train_ds.num_filtered_overlong)
        m["training/global_step"] = float(step)
        m["training/epoch"] = float(self.epoch)
        return m

    @staticmethod
    def _rollout_probs_diff(b: ExperienceBatch) -> dict[str, float] | None:
        mask = b.loss_mask.bool()
        if not mask.any():
            return None
        d = (b.rollout_log_probs.exp() - b.old_log_probs.exp()).abs()[mask]
        return {"training/rollout_probs_diff_max": d.max().item(), "training/rollout_probs_diff_mean": d.mean().item(),
                "training/rollout_probs_diff_std": d.std().item() if d.numel() > 1 else 0.0}

    def emit_samples(self, step: int, exp: Experience, *, validation: bool = False) -> None:
        """Sample events for whole groups (pick_groups); training samples carry their group's size,
        mean and std of scores exactly as the advantage estimator computed them."""
        from trainer.algorithms.advantages import _group_stats
        from trainer.events import SampleData, TokenView, fit_sample

        rep = self.cfg.report
        b = exp.batch
        # The rollout's log-probs beside the actor's (the token page shows the gap); in bypass mode
        # the actor's are the rollout's, so there is no gap to show.
        rollout_lp = None if self.cfg.algorithm.rollout_correction.bypass_mode else b.rollout_log_probs
        uids = [tr.uid for tr in exp.trajectories]
        group = None
        if not validation and b.token_level_rewards is not None:
            # The scores and grouping compute_advantages handed the estimator (b.uids), same function.
            group = [t.tolist() for t in _group_stats(b.token_level_rewards.sum(dim=-1), b.uids)]
        for i in pick_groups(uids, rep.val_samples if validation else rep.samples_per_step):
            tr = exp.trajectories[i]
            r = len(tr.response_ids)
            view = None
            if rep.token_view and not validation and b.old_log_probs is not None:
                view = TokenView(
                    ids=list(tr.response_ids),
                    pieces=[self.tokenizer.decode([t]) for t in tr.response_ids],
                    loss_mask=[int(x) for x in tr.loss_mask],
                    logprobs=_view_floats(b.old_log_probs[i, :r]),
                    ref_logprobs=_view_floats(b.ref_log_probs[i, :r]) if b.ref_log_probs is not None else None,
                    advantages=_view_floats(b.advantages[i, :r]),
                    rollout_logprobs=None if rollout_lp is None else [
                        v if m else None for v, m in zip(_view_floats(rollout_lp[i, :r]), tr.loss_mask)])
            data = SampleData(step=step, uid=tr.uid, index=tr.index, reward=float(tr.reward),
                              advantage=float(tr.advantage), response_length=r, num_turns=int(tr.num_turns),
                              finish_reason=tr.finish_reason, messages=_jsonable(tr.messages),
                              reward_extra=_jsonable(tr.reward_extra), data_source=tr.prompt.data_source or None,
                              ground_truth=_jsonable(tr.prompt.ground_truth), tool_calls=int(tr.tool_calls),
                              token_view=view, validation=validation)
            if group is not None:
                data.group_mean, data.group_std = _finite(group[0][i]), _finite(group[1][i])
                data.group_size = int(group[2][i])
            data = fit_sample(data) or data
            self.emitter.sample(_jsonable(data))

    # ------------------------------------------------------------------------------ validation
    def validate(self, step: int) -> dict[str, float]:
        if self.val_ds is None or len(self.val_ds) == 0:
            return {}
        t0 = time.perf_counter()
        v = self.cfg.actor_rollout_ref.rollout.val_kwargs
        trajs = self.group.generate(all_items(self.val_ds), n=v.n, sampling=self.sampling(step, validate=True),
                                    step=step)
        self.emit_worker_memory()
        exp = self.score(trajs)
        by_source: dict[str, list[float]] = defaultdict(list)
        for tr in trajs:
            by_source[tr.prompt.data_source or "unknown"].append(tr.reward)
        metrics = {f"val-core/{src}/reward/mean@{v.n}": sum(r) / len(r) for src, r in by_source.items()}
        metrics["timing_s/testing"] = time.perf_counter() - t0
        self.emit_samples(step, exp, validation=True)
        return metrics

    # ----------------------------------------------------------------------------- checkpoints
    def save(self, step: int) -> Path:
        t0 = time.perf_counter()
        path = ckpt.save_checkpoint(self.out_dir, step,
                                    write_actor=lambda d: self.group.call("save", path=str(d)),
                                    loader_state=self.loader.state_dict(),
                                    trainer_state={"epoch": self.epoch, "seq": self.emitter.seq, "kl_coef": self.kl_ctrl.value},
                                    config=self.cfg.to_dict())
        ckpt.prune(self.out_dir, self.cfg.trainer.max_actor_ckpt_to_keep)
        self.emitter.checkpoint(step, str(path))
        self.last_saved = step
        self.save_seconds = time.perf_counter() - t0
        return path

    def maybe_resume(self) -> None:
        tr = self.cfg.trainer
        path = ckpt.resolve_resume(self.out_dir, mode=tr.resume_mode, resume_from_path=tr.resume_from_path)
        if path is None:
            return
        state = ckpt.load_checkpoint(path)
        self.group.call("load", path=str(state["actor"]["dir"]))  # every rank its shards, then a weight sync
        self.loader.load_state_dict(state["loader"])
        ckpt.set_rng_state(state["rng"])
        self.global_step = int(state["trainer_state"]["global_step"])
        self.epoch = int(state["trainer_state"].get("epoch", 0))
        self.kl_ctrl.value = float(state["trainer_state"].get("kl_coef", self.kl_ctrl.value))
        self.emitter.log("info", f"resumed from {path} at step {self.global_step} (epoch {self.epoch}, "
                         f"loader position {self.loader.position}/{self.loader.batches_per_epoch})")

    # ------------------------------------------------------------------------------------- fit
    def fit(self) -> str:
        tr = self.cfg.trainer
        self.last_saved = -1
        self.save_seconds = 0.0
        self.maybe_resume()
        if self.global_step >= self.total_steps:
            # A finished run resumed: say so instead of "training" zero steps silently (verl #7401).
            self.emitter.log("warning", f"the checkpoint is at step {self.global_step} of {self.total_steps}: "
                             "nothing left to train (raise trainer.total_epochs/total_training_steps to continue)")
            return "succeeded"
        self.emitter.status("running", "training", step=self.global_step, total_steps=self.total_steps)
        if tr.val_before_train and self.val_ds is not None:
            val = self.validate(self.global_step)
            if val:
                self.emitter.metrics(self.global_step, val)
        while self.global_step < self.total_steps:
            step = self.global_step + 1
            self.monitor.step = step
            metrics = self.train_step(step)
            self.global_step = step
            last = step == self.total_steps
            if tr.test_freq > 0 and (step % tr.test_freq == 0 or last):
                metrics.update(self.validate(step))
            stopping = self.should_stop()
            if (tr.save_freq > 0 and step % tr.save_freq == 0) or last or stopping:
                self.save(step)
                metrics["timing_s/save_checkpoint"] = self.save_seconds
            self.emitter.metrics(step, metrics)
            if stopping and not last:
                return "stopped"
        if tr.export_hf:
            self.group.call("export_hf", out_dir=str(self.out_dir / "huggingface"))
            self.emitter.log("info", f"exported the final policy to {self.out_dir / 'huggingface'}")
        return "succeeded"


class _NullMonitor:
    step = 0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield


def pick_groups(uids: list[str], budget: int) -> list[int]:
    """Rows to report: whole groups (every row of a uid, as GRPO groups them), spread over the batch.

    `budget` counts rows (report.samples_per_step): as many whole groups as fit in it, at least one
    when budget > 0; -1 = every row, 0 = none. Returns row indices in batch order.
    """
    if budget == 0 or not uids:
        return []
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    rows = list(groups.values())
    if budget < 0:
        return list(range(len(uids)))
    k = min(len(rows), max(1, budget // max(len(g) for g in rows)))
    chosen = sorted({round(j * (len(rows) - 1) / max(1, k - 1)) for j in range(k)}) if k > 1 else [0]
    return sorted(i for j in chosen for i in rows[j])


def _rollout_log_probs(trajs: list[Trajectory], mask: torch.Tensor) -> torch.Tensor | None:
    """The rollout engine's log-probs of the sampled tokens (B, R), 0 where the loss mask is 0; None
    when a trajectory came without them."""
    if not trajs or any(tr.rollout_logprobs is None for tr in trajs):
        return None
    out = torch.zeros_like(mask)
    for i, tr in enumerate(trajs):
        if tr.rollout_logprobs:
            out[i, : len(tr.rollout_logprobs)] = torch.as_tensor(tr.rollout_logprobs, dtype=torch.float32)
    return out * mask


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


VIEW_DECIMALS = 6


def _view_floats(t: torch.Tensor) -> list[float | None]:
    """A token view's numbers, rounded to VIEW_DECIMALS decimals (non-finite ones as None).

    The view is for reading (the token page colours tokens by these numbers and shows them on
    hover); the step's maths and metrics use the tensors at full precision. A float32 value as a
    Python float is written with up to 17 digits ("-0.2512345612049103"); rounded in float64 it is
    written shortest ("-0.251235"): a 256-token sample event is ~40% smaller as JSON (~60% gzip'd),
    on the wire, in PostgreSQL and in the rollout dumps.
    """
    scale = 10.0 ** VIEW_DECIMALS
    rounded = torch.round(t.detach().to(torch.float64) * scale) / scale
    return [x if math.isfinite(x) else None for x in rounded.tolist()]


def _jsonable(obj: Any) -> Any:
    """Plain-JSON copy (dataclasses -> dicts, tuples -> lists, numpy scalars -> numbers, non-finite
    floats -> None, anything else -> str)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.generic,)):
        return _jsonable(obj.item())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return str(obj)
