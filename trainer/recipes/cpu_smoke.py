"""cpu_smoke: two tiny GRPO steps on the CPU with the calculator tool, in seconds.

    python -m trainer run --recipe cpu_smoke data.train_files=DATA.jsonl actor_rollout_ref.model.path=MODEL

Exercises every phase (multi-turn rollout with a tool, reward, old/ref log-probs, update, checkpoint)
on a tiny model; not meant to learn anything.
"""

from __future__ import annotations

from trainer.config import Config

DESCRIPTION = "2 GRPO steps on the CPU: 2 prompts x 2 samples, 16 tokens, calculator tool, checkpoint each step"


def recipe() -> Config:
    return Config.from_dict(
        {
            "data": {
                # Room for GSM8K prompts with the tool schema under the tiny tokenizer (~300-600
                # tokens), so the smoke recipe runs on a GSM8K upload too, not only on the demo data.
                "max_prompt_length": 1024,
                "max_response_length": 16,
                "train_batch_size": 2,
                "filter_overlong_prompts": True,
                "shuffle": True,
                "seed": 1,
            },
            "actor_rollout_ref": {
                "model": {"dtype": "float32"},
                "rollout": {
                    "name": "hf",
                    "n": 2,
                    "response_length": 16,
                    "temperature": 1.0,
                    "multi_turn": {"enable": True, "max_turns": 2, "max_tool_response_length": 32},
                },
                "actor": {
                    "ppo_mini_batch_size": 2,
                    "use_kl_loss": True,
                    "kl_loss_coef": 0.001,
                    "kl_loss_type": "low_var_kl",
                    "optim": {"lr": 1e-4},
                },
            },
            "algorithm": {"adv_estimator": "grpo"},
            "tools": {"names": ["calculator"]},
            "trainer": {
                "experiment_name": "cpu_smoke",
                "total_epochs": 1,
                "total_training_steps": 2,
                "default_local_dir": "outputs/cpu_smoke",
                "save_freq": 1,
                "test_freq": -1,
                "val_before_train": False,
                "device": "cpu",
                "n_gpus_per_node": 1,
                "torch_threads": 1,
                "logger": ["console", "jsonl"],
                "export_hf": False,
            },
            "report": {
                "samples_per_step": 4,
                "heartbeat_interval_s": 1.0,
                "memory_interval_s": 0.5,
            },
        }
    )
