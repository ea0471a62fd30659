"""gsm8k_multiturn_grpo: verl's GSM8K multi-turn GRPO example (calc_gsm8k_reward tool), for GPUs.

    python -m trainer run --recipe gsm8k_multiturn_grpo actor_rollout_ref.model.path=/models/Qwen2.5-3B-Instruct \
        data.train_files=gsm8k/train.parquet data.val_files=gsm8k/test.parquet

verl's example run_qwen2.5-3b_gsm8k_multiturn.sh (8 x H100; docs/design.md §4.9). The model path is deliberately empty:
it must be a local folder the operator provides (no downloads), and validate() refuses to run without it.
verl's tensor_model_parallel_size=2 has no key here (one engine per device).
"""

from __future__ import annotations

from trainer.config import Config

DESCRIPTION = (
    "verl's GSM8K multi-turn GRPO on 8 GPUs: 256 prompts x 16 samples, lr 1e-6, "
    "low_var_kl loss 0.001, sglang, 5 turns, calc_gsm8k_reward tool (model path required)"
)


def recipe() -> Config:
    return Config.from_dict(
        {
            "data": {
                "max_prompt_length": 1024,
                "max_response_length": 1024,
                "train_batch_size": 256,
                "filter_overlong_prompts": True,
                "truncation": "error",
                "return_raw_chat": True,
            },
            "actor_rollout_ref": {
                "model": {
                    "path": "",
                    "use_remove_padding": True,
                    "enable_gradient_checkpointing": True,
                },
                "rollout": {
                    "name": "sglang",
                    "gpu_memory_utilization": 0.5,
                    "n": 16,
                    "log_prob_micro_batch_size_per_gpu": 32,
                    "multi_turn": {"enable": True, "max_turns": 5},
                },
                "actor": {
                    "ppo_mini_batch_size": 256,
                    "ppo_micro_batch_size_per_gpu": 32,
                    "use_kl_loss": True,
                    "kl_loss_coef": 0.001,
                    "kl_loss_type": "low_var_kl",
                    "entropy_coeff": 0.0,
                    "optim": {"lr": 1e-6},
                    "fsdp_config": {"param_offload": False, "optimizer_offload": False},
                },
                "ref": {
                    "log_prob_micro_batch_size_per_gpu": 32,
                    "fsdp_config": {"param_offload": True},
                },
            },
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
            "reward": {"name": "default"},
            "tools": {"names": ["calc_gsm8k_reward"]},
            "trainer": {
                "project_name": "gsm8k_async_rl",
                "experiment_name": "qwen2.5-3b_function_rm-gsm8k-sgl-multi-w-tool",
                "critic_warmup": 0,
                "logger": ["console", "jsonl"],
                "n_gpus_per_node": 8,
                "nnodes": 1,
                "save_freq": -1,
                "test_freq": 20,
                "total_epochs": 15,
                "device": "cuda",
                "default_local_dir": "outputs/gsm8k_multiturn_grpo",
            },
        }
    )
