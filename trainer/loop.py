"""The training loop (the driver): setup, the step, validation, and `fit` over the steps.

`Trainer(cfg, emitter=..., should_stop=...).fit()` runs the whole training and returns "succeeded" or
"stopped". `Trainer.train_step` is the step, phase by phase:

  load prompts -> rollout (MultiTurnRollout, n samples each) -> [remax: one greedy response per
  prompt, scored: its baseline] -> reward (score on the last trained
  token) -> old log-probs -> ref log-probs -> [values] -> advantages (registry) -> [critic update]
  -> update (from step trainer.critic_warmup on) -> weight sync

The bracketed phases run for algorithm.adv_estimator=gae only: the critic (trainer.workers.critic,
one more role in every worker) gives the values GAE needs, then trains on the step's returns before
the actor's update, as verl's PPO trainer orders them.

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

The phases' own code lives beside this module; Trainer keeps the state and the step:
  trainer.rollout_phase  sampling parameters per step, the generation batches of a step (dynamic sampling)
  trainer.scoring        rewards, the experience batch, rollout correction, advantages (Experience)
  trainer.step_report    the step's metrics and its sample events (pick_groups)
  trainer.val_metrics    a validation's val-core / val-aux figures, as verl computes them
  trainer.resume         saving a step's checkpoint and resuming from one
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from trainer import scoring
from trainer.checkpoint import GIB
from trainer.algorithms.metrics import compute_count_metrics, reduce_metrics, verl_num_turns
from trainer.config import Config, resolve
from trainer.data import PromptLoader, all_items, chunks, load_prompt_dataset
from trainer.resume import resume_run, save_run
from trainer.rewards.combine import Weights, part_metrics
from trainer.rollout_phase import attach_greedy_baselines, generate_step, sampling_params
from trainer.scoring import Experience
from trainer.step_report import emit_samples, pick_groups, step_metrics
from trainer.types import PromptItem, Trajectory
from trainer.val_metrics import sample_variables, validation_metrics
from trainer.workers.model_setup import resolve_device

__all__ = ["Experience", "Timer", "Trainer", "pick_groups", "seed_everything"]


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
        gen_batch_size, batch_key = cfg.data.train_batch_size, "data.train_batch_size"
        if cfg.algorithm.filter_groups.enable and cfg.data.gen_batch_size:
            gen_batch_size, batch_key = cfg.data.gen_batch_size, "data.gen_batch_size"
        self.loader = PromptLoader(self.train_ds, batch_size=gen_batch_size, shuffle=cfg.data.shuffle,
                                   seed=cfg.data.seed, batch_key=batch_key)
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
        from trainer.config.critic import uses_critic

        self.use_critic = uses_critic(cfg.algorithm.adv_estimator)
        self.critic_mini_batch_size = (cfg.critic.ppo_mini_batch_size or arr.actor.ppo_mini_batch_size) * self.n
        self.world_size = tr.nnodes * tr.n_gpus_per_node
        from trainer.config import apply_overrides
        from trainer.parallel.group import build_worker_group

        # The workers' LR schedule needs the run's length, known only now ("filled at run time").
        worker_cfg = self.cfg
        if not arr.actor.optim.total_training_steps or arr.actor.optim.total_training_steps <= 0:
            worker_cfg = apply_overrides(self.cfg, {"actor_rollout_ref.actor.optim.total_training_steps": self.total_steps})
        if self.use_critic and (not cfg.critic.optim.total_training_steps or cfg.critic.optim.total_training_steps <= 0):
            worker_cfg = apply_overrides(worker_cfg, {"critic.optim.total_training_steps": self.total_steps})
        self.group = build_worker_group(worker_cfg.to_dict(), world_size=self.world_size, launcher=tr.launcher,
                                        device_type=self.device.type)
        if getattr(self.group, "nodes", None) and self.emitter is not None:
            from trainer.parallel.placement import describe_nodes

            self.emitter.log("info", describe_nodes(self.group.nodes))
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
        from trainer.events.schema import MemoryData

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
        """The step's SamplingParams (trainer.rollout_phase.sampling_params)."""
        return sampling_params(self.cfg.actor_rollout_ref.rollout, self.stop_ids, step, validate=validate,
                               gen_batch=gen_batch)

    # ------------------------------------------------------------------------------------ the step
    def train_step(self, step: int) -> dict[str, float]:
        t, g = Timer(), self.group
        extra: dict[str, float] = {}
        self.rm_seconds = 0.0  # the reward model's share of timing_s/reward (Trainer.reward)
        with t("step"):
            trajs = self.rollout(step, t, extra)  # timed as gen and reward
            with t("reward"):
                exp = scoring.build_experience(trajs)
            lengths = exp.batch.lengths()
            parts = g.split(lengths, balance=self.cfg.trainer.balance_batch)
            if self.cfg.trainer.balance_batch:  # verl reports them whenever it balances, one worker included
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
            if self.use_critic:
                with t("values"):
                    exp.batch.values = g.compute_values(exp.batch, parts, step=step)
            with t("adv"):
                adv_metrics, corr_metrics = self.compute_advantages(exp)
                extra.update(adv_metrics)
            actor_metrics: dict[str, list[float]] = {}
            if self.use_critic:
                with t("update_critic"):
                    actor_metrics.update(g.update_critic(exp.batch, parts, mini_batch_size=self.critic_mini_batch_size,
                                                         seed=self.cfg.trainer.seed * 11 + step, step=step))
            if step >= self.cfg.trainer.critic_warmup:
                with t("update_actor"):
                    capture = not self.recompute_old
                    policy_metrics, old, ent = g.update_policy(exp.batch, parts, mini_batch_size=self.mini_batch_size,
                                                               seed=self.cfg.trainer.seed * 7 + step, capture=capture,
                                                               step=step)
                    actor_metrics.update(policy_metrics)
                    if capture:
                        exp.batch.old_log_probs = old * exp.batch.response_mask
                        if exp.entropy is None and ent is not None:
                            exp.entropy = ent
                with t("update_weights"):  # verl's timing_s/update_weights
                    extra.update(g.sync_weights(step=step))
        self.emit_worker_memory()
        if not Weights.of(self.cfg.reward_model).rule_alone:  # the reward's parts (trainer.rewards.combine)
            extra.update(part_metrics([tr.reward_extra for tr in exp.trajectories]))
        if self.cfg.reward_model.enable:
            extra["timing_s/reward_model"] = self.rm_seconds
        # The actor's rollout_corr/* (current policy vs rollout, per micro-batch) override the driver's, as in verl.
        metrics = step_metrics(self.cfg, exp, t.s, {**corr_metrics, **reduce_metrics(actor_metrics)}, extra,
                               step=step, epoch=self.epoch, device=self.device,
                               filtered_overlong_prompts=self.train_ds.num_filtered_overlong)
        emit_samples(self.emitter, self.tokenizer, self.cfg, step, exp)
        return metrics

    # ------------------------------------------------------------------------------ experience
    def rollout(self, step: int, t: Timer, metrics: dict[str, float]) -> list[Trajectory]:
        """The step's scored trajectories (trainer.rollout_phase.generate_step): one generation batch,
        or with dynamic sampling as many as it takes; the pool's counts go into `metrics`."""

        def next_batch() -> list[PromptItem]:
            self.epoch, prompts = self.loader.next_batch()
            return prompts

        def generate(prompts: list[PromptItem], gen_batch: int) -> list[Trajectory]:
            return self.group.generate(prompts, n=self.n, step=step, sampling=self.sampling(step, gen_batch=gen_batch))

        def baseline(prompts: list[PromptItem], trajs: list[Trajectory], gen_batch: int) -> None:
            """remax: one greedy response per prompt, scored as the samples are, as their baseline."""
            greedy = dataclasses.replace(self.sampling(step, gen_batch=gen_batch), temperature=0.0, top_p=1.0, top_k=-1)
            baselines = self.group.generate(prompts, n=1, step=step, sampling=greedy)
            self.reward(baselines)
            attach_greedy_baselines(trajs, baselines)

        return generate_step(step, next_batch=next_batch, generate=generate, score=self.reward,
                             filter_groups=self.cfg.algorithm.filter_groups,
                             train_batch_size=self.cfg.data.train_batch_size, timer=t, metrics=metrics,
                             emitter=self.emitter,
                             baseline=baseline if self.cfg.algorithm.adv_estimator == "remax" else None)

    def reward(self, trajs: list[Trajectory], *, validation: bool = False) -> None:
        """Score each trajectory (trainer.scoring.score_trajectories): score, reward, reward_extra.
        With reward_model.enable the workers' reward model scores the conversations first (its
        seconds add up in `rm_seconds`); validation uses the reward function alone, as verl."""
        rm = None
        if self.cfg.reward_model.enable and not validation and trajs:
            t0 = time.perf_counter()
            rm = self.group.compute_rm_score([tr.messages for tr in trajs], step=self.monitor.step)
            self.rm_seconds = getattr(self, "rm_seconds", 0.0) + time.perf_counter() - t0
        scoring.score_trajectories(trajs, self.reward_fn, self.cfg, rm, validation=validation)

    def score(self, trajs: list[Trajectory], *, validation: bool = False) -> Experience:
        """Rewards (`reward`) and the batch they sit in (trainer.scoring.build_experience)."""
        self.reward(trajs, validation=validation)
        return scoring.build_experience(trajs)

    def compute_advantages(self, exp: Experience) -> tuple[dict[str, float], dict[str, float]]:
        """The adv phase in verl's order (trainer.scoring): the rewards (less the in-reward KL when
        configured), the rollout correction, the estimator. Returns (the rewards' and advantages'
        metrics, the rollout correction's rollout_corr/* metrics)."""
        scoring.rollout_as_old(self.cfg.algorithm.rollout_correction, exp)
        metrics = scoring.token_level_rewards(self.cfg.algorithm, exp, self.kl_ctrl)
        corr_metrics = scoring.correct_rollout(self.cfg.algorithm.rollout_correction, exp)
        metrics.update(scoring.compute_advantages(self.cfg.algorithm, exp))
        return metrics, corr_metrics

    # ------------------------------------------------------------------------------ validation
    def validate(self, step: int) -> dict[str, float]:
        """One pass over the validation set, data.val_batch_size prompts at a time (None: all at once):
        verl's val-core / val-aux figures over the whole set (trainer.val_metrics) and its
        val-aux/num_turns, and report.val_samples of it as sample events (whole groups, chosen over the
        whole set as pick_groups spreads them)."""
        if self.val_ds is None or len(self.val_ds) == 0:
            return {}
        t0 = time.perf_counter()
        v = self.cfg.actor_rollout_ref.rollout.val_kwargs
        items = all_items(self.val_ds, split="val")
        shown = {items[i // v.n].uid for i in pick_groups([it.uid for it in items for _ in range(v.n)],
                                                         self.cfg.report.val_samples)}
        sources: list[str] = []
        uids: list[str] = []
        variables: list[dict[str, Any]] = []
        turns: list[int] = []
        for index, part in enumerate(chunks(items, self.cfg.data.val_batch_size)):
            trajs = self.group.generate(part, n=v.n, step=step,
                                        sampling=self.sampling(step, validate=True, gen_batch=index))
            self.emit_worker_memory()
            exp = self.score(trajs, validation=True)
            for tr in trajs:
                sources.append(tr.prompt.data_source or "unknown")
                uids.append(tr.uid)
                variables.append(sample_variables(tr.reward, tr.reward_extra))
                turns.append(verl_num_turns(tr.num_turns, tr.messages, len(tr.prompt.messages), tr.finish_reason))
            emit_samples(self.emitter, self.tokenizer, self.cfg, step, exp, validation=True, uids=shown)
        metrics = validation_metrics(sources, uids, variables)
        metrics.update(compute_count_metrics("val-aux/num_turns", turns))
        metrics["timing_s/testing"] = time.perf_counter() - t0
        return metrics

    # ----------------------------------------------------------------------------- checkpoints
    def save(self, step: int, *, final: bool = False, ends: str = "stopped") -> Path:
        """Checkpoint step `step` (trainer.resume.save_run; `final`: the checkpoint the run ends on, a
        stop's or the last step's, kept even over the disk budget, the run then ending `ends`); its
        seconds and the output folder's size go to the step's metrics."""
        t0 = time.perf_counter()
        saved = save_run(self.out_dir, step, group=self.group, loader=self.loader, cfg=self.cfg, emitter=self.emitter,
                         trainer_state={"epoch": self.epoch, "seq": self.emitter.seq, "kl_coef": self.kl_ctrl.value},
                         final=final, ends=ends)
        self.last_saved = step
        self.save_seconds = time.perf_counter() - t0
        self.folder_gb = saved.folder_bytes / GIB
        return saved.path

    def maybe_resume(self) -> None:
        """Continue from the checkpoint trainer.resume_mode names, if any (trainer.resume.resume_run)."""
        r = resume_run(self.out_dir, self.cfg, group=self.group, loader=self.loader, kl_coef=self.kl_ctrl.value)
        if r is None:
            return
        self.global_step, self.epoch, self.kl_ctrl.value = r.global_step, r.epoch, r.kl_coef
        # Named without server paths: whoever reads the run reads its log events.
        where = (f"{Path(r.path).name} in the run's folder" if self.cfg.trainer.resume_mode == "auto"
                 else "trainer.resume_from_path")
        verb = "forked from" if r.forked else "resumed from"
        self.emitter.log("info", f"{verb} the checkpoint of step {self.global_step} ({where}; epoch "
                         f"{self.epoch}, loader position {self.loader.position}/{self.loader.batches_per_epoch})")
        if r.forked:
            self.emitter.log("info", "changed from the checkpoint's config: " + (", ".join(r.changed) or "nothing"))

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
                # the run ends after this one: stopped, or succeeded at the last step (a stop there too)
                self.save(step, final=stopping or last, ends="succeeded" if last else "stopped")
                metrics["timing_s/save_checkpoint"] = self.save_seconds
                metrics["perf/run_folder_gb"] = self.folder_gb
            self.emitter.metrics(step, metrics)
            if stopping and not last:
                return "stopped"
        if tr.export_hf:
            self.group.call("export_hf", out_dir=str(self.out_dir / "huggingface"))
            self.emitter.log("info", "exported the final policy (huggingface/ in the run's folder)")
        return "succeeded"


class _NullMonitor:
    step = 0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield
