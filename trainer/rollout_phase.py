"""The step's rollout phase in the driver: how a step samples, and the generation batches it takes.

- `sampling_params`: the SamplingParams of a training step's generation batch, or of a validation.
  The seed is a function of the step (and of the step's generation batch with dynamic sampling),
  not of an RNG stream: a resumed run samples what an uninterrupted one would have.
- `generate_step`: one generation batch of scored trajectories, or with dynamic sampling
  (algorithm.filter_groups, DAPO) as many as it takes to keep data.train_batch_size groups whose
  metric varies (trainer.algorithms.filter_groups), or max_num_gen_batches; the pool's counts go into
  the step's metrics (verl's train/num_gen_batches and ours). With remax each generation batch is
  followed by one greedy response per prompt, scored, whose reward becomes the baseline of that
  prompt's samples (`attach_greedy_baselines`).

The engines themselves are trainer.rollout (reached through the worker group); trainer.loop.Trainer
calls these with its loader, worker group and reward.
"""
from __future__ import annotations

from typing import Any, Callable, ContextManager

from trainer.algorithms.filter_groups import GroupPool, metric_values
from trainer.config.actor_rollout_ref import RolloutConfig
from trainer.config.schema import FilterGroupsConfig
from trainer.rollout.base import SamplingParams
from trainer.types import PromptItem, Trajectory


def sampling_params(rollout: RolloutConfig, stop_ids: list[int], step: int, *, validate: bool = False,
                    gen_batch: int = 0) -> SamplingParams:
    """How the step samples: rollout.val_kwargs for a validation, else the rollout's own settings;
    `gen_batch` (the batch's index in the step or the validation) varies the seed."""
    r = rollout
    if validate:
        v = r.val_kwargs
        temp = v.temperature if v.do_sample else 0.0
        return SamplingParams(temperature=temp, top_p=v.top_p, top_k=v.top_k, max_new_tokens=r.response_length,
                              stop_token_ids=stop_ids, seed=r.seed + 7919 * (step + 1) + 999_983 * gen_batch, ignore_eos=r.ignore_eos)
    return SamplingParams(temperature=r.temperature if r.do_sample else 0.0, top_p=r.top_p, top_k=r.top_k,
                          max_new_tokens=r.response_length, stop_token_ids=stop_ids,
                          seed=r.seed * 1_000_003 + step + 999_983 * gen_batch, ignore_eos=r.ignore_eos)


def attach_greedy_baselines(trajs: list[Trajectory], greedy: list[Trajectory]) -> None:
    """ReMax: set each trajectory's reward_baseline to the reward of the scored greedy response
    (`greedy`, one per prompt) to the same prompt (matched by uid)."""
    by_uid = {g.uid: g.reward for g in greedy}
    for tr in trajs:
        tr.reward_baseline = by_uid[tr.uid]


def generate_step(step: int, *, next_batch: Callable[[], list[PromptItem]],
                  generate: Callable[[list[PromptItem], int], list[Trajectory]],
                  score: Callable[[list[Trajectory]], None], filter_groups: FilterGroupsConfig,
                  train_batch_size: int, timer: Callable[[str], ContextManager[None]], metrics: dict[str, float],
                  emitter: Any,
                  baseline: Callable[[list[PromptItem], list[Trajectory], int], None] | None = None
                  ) -> list[Trajectory]:
    """The step's scored trajectories.

    `next_batch()` gives the next generation batch of prompts, `generate(prompts, gen_batch)` samples
    them (gen_batch = the batch's index in the step, for its seed), `score(trajs)` sets their rewards;
    `baseline(prompts, trajs, gen_batch)`, when given (remax), generates and scores the greedy
    responses and sets the trajectories' reward_baseline, timed as `timer("gen_max")` (verl's name);
    `timer("gen")` / `timer("reward")` time the phases. Without the filter: one batch, returned as
    generated. With it: batches until the pool is full or at its limit, then the pool's batch (topped
    up with flat groups at the limit, with a warning through `emitter.log`).
    """
    fg = filter_groups
    pool: GroupPool[Trajectory] = GroupPool(target=train_batch_size)
    while True:
        prompts = next_batch()
        with timer("gen"):
            trajs = generate(prompts, pool.num_gen_batches)
        if baseline is not None:
            with timer("gen_max"):
                baseline(prompts, trajs, pool.num_gen_batches)
        with timer("reward"):
            score(trajs)
        if not fg.enable:
            return trajs
        pool.add(trajs, [tr.uid for tr in trajs], metric_values(fg.metric, trajs))
        if pool.full or pool.limit_reached(fg.max_num_gen_batches):
            break
    trajs = pool.batch()
    metrics.update(pool.metrics())
    if pool.num_filled:
        emitter.log("warning", f"step {step}: {len(pool.kept)} of {train_batch_size} groups "
                    f"with a varying {fg.metric} after algorithm.filter_groups.max_num_gen_batches="
                    f"{fg.max_num_gen_batches} generation batches; {pool.num_filled} groups whose "
                    f"{fg.metric} is the same for every sample fill the batch")
    return trajs
