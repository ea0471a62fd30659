"""demo_tool_arith: the learning demo. GRPO teaches a warm-started tiny model to use the calculator.

    python -m trainer make-demo-data DATA && python -m trainer sft ...   (warm start, see trainer.sft)
    python -m trainer run --recipe demo_tool_arith data.train_files=DATA/train.jsonl \
        data.val_files=DATA/test.jsonl actor_rollout_ref.model.path=WARM_MODEL

Values from a plain-PyTorch prototype measured before this trainer existed: 8 prompts x 8 samples,
lr 3e-4, no KL, clip 0.2, at most 3 assistant turns (so at most 2 tool calls), about 90 new tokens a
turn. lr 3e-4 without KL is the faster of the two settings measured there (held-out reward 0.37 ->
0.87 in 10 steps against 0.63 after a minute with lr 1e-4 and KL 0.04), so it is the one that fits
a 5-minute run.

Measured here (bench/learning.py, docs/benchmarks.md "bench:learning", docs/demo.md; quiet AMD EPYC, 2
cores, 1 thread) from `trainer.models.demo.make_demo_model(steps=600)` (400 tool-only SFT steps at lr
3e-3, then 200 on a 45% tool mix at lr 1e-3; bounded by steps, so the same seed gives the same weights
at any load on one machine; 174-176 s): held-out sampled reward 0.31 (seed 0) / 0.23 (seed 1) after
the warm start, first validation >= 0.8 at step 15 / 10 (45 s / 26 s), 0.89-0.97 up to step 60
(about 2 minutes); 60 steps leave room on slower or busier machines.
"""

from __future__ import annotations

from trainer.config import Config

DESCRIPTION = (
    "learning demo on CPU: arithmetic with the calculator tool, 8 prompts x 8 samples, "
    "lr 3e-4, no KL, validate every 5 steps"
)

TURNS = 3
TOKENS_PER_TURN = 90


def recipe() -> Config:
    return Config.from_dict(
        {
            "data": {
                "max_prompt_length": 256,
                # response = every token after the prompt: 3 assistant turns plus the tool replies
                "max_response_length": TURNS * TOKENS_PER_TURN + 2 * 32,
                "train_batch_size": 8,
                "shuffle": True,
                "seed": 1,
            },
            "actor_rollout_ref": {
                "model": {"dtype": "float32"},
                "rollout": {
                    "name": "hf",
                    "n": 8,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "multi_turn": {
                        "enable": True,
                        "max_turns": TURNS,
                        "max_tool_response_length": 32,
                        "max_parallel_calls": 1,
                    },
                    "val_kwargs": {"n": 1, "temperature": 1.0, "do_sample": True},
                },
                "actor": {
                    "ppo_mini_batch_size": 8,
                    "ppo_epochs": 1,
                    "clip_ratio": 0.2,
                    "use_kl_loss": False,
                    "entropy_coeff": 0.0,
                    "loss_agg_mode": "token-mean",
                    "grad_clip": 1.0,
                    "optim": {"lr": 3e-4, "weight_decay": 0.0},
                },
            },
            "algorithm": {
                "adv_estimator": "grpo",
                "norm_adv_by_std_in_grpo": True,
                "use_kl_in_reward": False,
            },
            "tools": {"names": ["calculator"]},
            "trainer": {
                "experiment_name": "demo_tool_arith",
                "total_epochs": 100,
                "total_training_steps": 60,
                "default_local_dir": "outputs/demo_tool_arith",
                "save_freq": 20,
                "test_freq": 5,
                "val_before_train": True,
                "device": "auto",
                "torch_threads": None,
                "logger": ["console", "jsonl"],
            },
            "report": {"samples_per_step": 8, "val_samples": 8},
        }
    )
