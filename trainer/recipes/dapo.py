"""dapo: DAPO (Yu et al. 2025) on the learning demo's task, sized for the CPU.

    python -m trainer make-demo-data DATA && python -m trainer sft ...   (warm start, as demo_tool_arith)
    python -m trainer run --recipe dapo data.train_files=DATA/train.jsonl \
        data.val_files=DATA/test.jsonl actor_rollout_ref.model.path=WARM_MODEL

The demo recipe (demo_tool_arith: 8 prompts x 8 samples, the calculator tool, lr 3e-4) with the
paper's settings, as verl's recipe/dapo scripts set them:
- clip-higher: clip_ratio_low 0.2, clip_ratio_high 0.28;
- token-level loss: loss_agg_mode token-mean;
- no KL: no KL loss, no KL in the reward, no entropy bonus;
- dynamic sampling: algorithm.filter_groups on the accuracy (our reward functions return a plain score,
  which `acc` falls back to), at most 5 generation batches of 8 prompts per step (verl's scripts
  generate 3x the train batch per round, up to 10 rounds; one train batch per round keeps a CPU step
  short and lets the number of rounds follow the share of flat groups);
- overlong reward shaping: the last 64 of the 334 response tokens (about the paper's 4,096 of 20,480)
  with penalty factor 1.0, logged in each sample's reward parts.
"""

from __future__ import annotations

from trainer.config import Config, apply_overrides
from trainer.recipes.demo_tool_arith import recipe as demo_recipe

DESCRIPTION = (
    "DAPO on the learning demo (CPU): clip 0.2/0.28, token-mean, no KL, dynamic sampling on acc "
    "(batches of 8 prompts, at most 5 per step), overlong buffer 64 tokens"
)

OVERLONG_BUFFER_LEN = 64


def recipe() -> Config:
    return apply_overrides(demo_recipe(), {
        "data.gen_batch_size": 8,
        "actor_rollout_ref.actor.clip_ratio_low": 0.2,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.kl_loss_coef": 0.0,
        "actor_rollout_ref.actor.entropy_coeff": 0.0,
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "algorithm.kl_ctrl.kl_coef": 0.0,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "algorithm.filter_groups.max_num_gen_batches": 5,
        "reward_model.overlong_buffer.enable": True,
        "reward_model.overlong_buffer.len": OVERLONG_BUFFER_LEN,
        "reward_model.overlong_buffer.penalty_factor": 1.0,
        "reward_model.overlong_buffer.log": True,
        "trainer.experiment_name": "dapo",
        "trainer.default_local_dir": "outputs/dapo",
    })
