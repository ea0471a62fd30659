"""The config gate's two lists: the trainer keys a user may set, each with its `Bound` (`USER_KEYS`),
and the keys only the platform sets, with what it sets them from (`PLATFORM_KEYS`); the loggers a user
may list; `unlisted_keys` (a schema key on neither list) and `markdown` (the lists as docs/security.md's
tables).

The allow-list is explicit: a key added to `trainer.config` later is refused for users until it is
listed here (a test walks every key of the schema).
"""
from __future__ import annotations

from .bounds import Bound
from .flat import DEFAULTS

FLAG = Bound()  # booleans and the schema's own closed choices (Literal): the schema checks them
LENGTH = Bound(lo=1, hi=131_072)  # token lengths
BATCH = Bound(lo=1, hi=65_536)
STEPS = Bound(lo=-1, hi=10_000_000)
SEED = Bound(lo=0, hi=2**31 - 1)
UNIT = Bound(lo=0, hi=1)
NAME = Bound(pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # names that may end up in folder names
COLUMN = Bound(pattern=r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
# rollout correction's threshold strings ("2.0", "0.5_5.0", "0.5_2.0,0.01"); the trainer's check parses them
THRESHOLDS = Bound(lo=0, hi=1e6, pattern=r"[0-9.eE+_,-]{1,128}",
                   pattern_text="numbers joined by '_' and ',' (e.g. 0.5_5.0), at most 128 characters")

# LoRA's target / exclude modules: module names as peft matches them (a list of name suffixes, or
# "all-linear"), never a regular expression from a user
MODULES = Bound(pattern=r"[A-Za-z0-9_-]{1,64}", max_items=64,
                pattern_text='"all-linear" or module names (letters, digits, "_", "-"), e.g. ["q_proj", "v_proj"]')
EXCLUDED = Bound(pattern=MODULES.pattern, max_items=64,
                 pattern_text='module names (letters, digits, "_", "-"), e.g. ["o_proj"]')

# Tool names and loggers are checked against the trainer's registries when the gate runs.
USER_LOGGERS = ("console", "jsonl", "tensorboard")
# The trackers a user may list only where the operator enabled them (runs.trackers: the operator's
# address and key, never a user's; `check` and `check_trackers` refuse one that is not enabled).
TRACKER_LOGGERS = ("wandb", "mlflow")

USER_KEYS: dict[str, Bound] = {
    # data (the files themselves come from the run's datasets)
    "data.prompt_key": COLUMN,
    "data.max_prompt_length": LENGTH,
    "data.max_response_length": LENGTH,
    "data.train_batch_size": BATCH,
    "data.gen_batch_size": BATCH,
    "data.val_batch_size": BATCH,
    "data.filter_overlong_prompts": FLAG,
    "data.truncation": FLAG,
    "data.shuffle": FLAG,
    "data.seed": SEED,
    "data.reward_fn_key": COLUMN,
    "data.return_raw_chat": FLAG,
    "data.apply_chat_template_kwargs": Bound(lo=-1e6, hi=1e6, max_json_bytes=1024),
    # model (its path, tokenizer and trust_remote_code belong to the catalog's model)
    "actor_rollout_ref.model.dtype": FLAG,
    "actor_rollout_ref.model.enable_gradient_checkpointing": FLAG,
    "actor_rollout_ref.model.use_remove_padding": FLAG,
    # LoRA: module names only (no regular expressions through the platform), "all-linear" included
    "actor_rollout_ref.model.lora_rank": Bound(lo=0, hi=4096),
    "actor_rollout_ref.model.lora_alpha": Bound(lo=0, hi=65_536),
    "actor_rollout_ref.model.target_modules": MODULES,
    "actor_rollout_ref.model.exclude_modules": EXCLUDED,
    # rollout
    "actor_rollout_ref.rollout.name": FLAG,
    "actor_rollout_ref.rollout.n": Bound(lo=1, hi=1024),
    "actor_rollout_ref.rollout.temperature": Bound(lo=0, hi=10),
    "actor_rollout_ref.rollout.top_p": UNIT,
    "actor_rollout_ref.rollout.top_k": Bound(lo=-1, hi=1_000_000),
    "actor_rollout_ref.rollout.do_sample": FLAG,
    "actor_rollout_ref.rollout.ignore_eos": FLAG,
    "actor_rollout_ref.rollout.enforce_eager": FLAG,
    "actor_rollout_ref.rollout.response_length": LENGTH,
    "actor_rollout_ref.rollout.max_model_len": Bound(lo=1, hi=262_144),
    "actor_rollout_ref.rollout.gpu_memory_utilization": UNIT,
    "actor_rollout_ref.rollout.free_cache_engine": FLAG,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": BATCH,
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": Bound(lo=1, hi=16_384),
    "actor_rollout_ref.rollout.seed": SEED,
    "actor_rollout_ref.rollout.multi_turn.enable": FLAG,
    "actor_rollout_ref.rollout.multi_turn.max_turns": Bound(lo=1, hi=64),
    "actor_rollout_ref.rollout.multi_turn.max_tool_response_length": Bound(lo=1, hi=32_768),
    "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side": FLAG,
    "actor_rollout_ref.rollout.multi_turn.max_parallel_calls": Bound(lo=1, hi=16),
    "actor_rollout_ref.rollout.multi_turn.tool_timeout_s": Bound(lo=0.001, hi=300),
    "actor_rollout_ref.rollout.multi_turn.interaction_timeout_s": Bound(lo=0.001, hi=600),
    "actor_rollout_ref.rollout.multi_turn.interaction": NAME,  # a registered interaction (the trainer's check)
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": Bound(lo=1, hi=64),
    "actor_rollout_ref.rollout.val_kwargs.n": Bound(lo=1, hi=1024),
    "actor_rollout_ref.rollout.val_kwargs.temperature": Bound(lo=0, hi=10),
    "actor_rollout_ref.rollout.val_kwargs.top_p": UNIT,
    "actor_rollout_ref.rollout.val_kwargs.top_k": Bound(lo=-1, hi=1_000_000),
    "actor_rollout_ref.rollout.val_kwargs.do_sample": FLAG,
    # actor
    "actor_rollout_ref.actor.strategy": FLAG,
    "actor_rollout_ref.actor.ppo_mini_batch_size": BATCH,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": BATCH,
    "actor_rollout_ref.actor.ppo_epochs": Bound(lo=1, hi=100),
    "actor_rollout_ref.actor.clip_ratio": Bound(lo=0, hi=10),
    "actor_rollout_ref.actor.clip_ratio_low": Bound(lo=0, hi=10),
    "actor_rollout_ref.actor.clip_ratio_high": Bound(lo=0, hi=10),
    "actor_rollout_ref.actor.clip_ratio_c": Bound(lo=1, hi=100),
    "actor_rollout_ref.actor.tau_pos": Bound(lo=0.001, hi=100),  # sapo's gate temperatures (> 0)
    "actor_rollout_ref.actor.tau_neg": Bound(lo=0.001, hi=100),
    "actor_rollout_ref.actor.loss_agg_mode": FLAG,
    "actor_rollout_ref.actor.loss_scale_factor": Bound(lo=1, hi=1_048_576),
    "actor_rollout_ref.actor.policy_loss.loss_mode": FLAG,
    "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": UNIT,
    "actor_rollout_ref.actor.policy_loss.clip_cov_lb": Bound(lo=-1e6, hi=1e6),
    "actor_rollout_ref.actor.policy_loss.clip_cov_ub": Bound(lo=-1e6, hi=1e6),
    "actor_rollout_ref.actor.policy_loss.kl_cov_ratio": UNIT,
    "actor_rollout_ref.actor.policy_loss.ppo_kl_coef": Bound(lo=0, hi=100),
    "actor_rollout_ref.actor.entropy_coeff": Bound(lo=0, hi=10),
    "actor_rollout_ref.actor.use_kl_loss": FLAG,
    "actor_rollout_ref.actor.kl_loss_coef": Bound(lo=0, hi=100),
    "actor_rollout_ref.actor.kl_loss_type": FLAG,
    "actor_rollout_ref.actor.grad_clip": Bound(lo=0, hi=1e6),
    "actor_rollout_ref.actor.use_dynamic_bsz": FLAG,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": Bound(lo=1, hi=10_000_000),
    "actor_rollout_ref.actor.shuffle": FLAG,
    "actor_rollout_ref.actor.use_torch_compile": FLAG,
    "actor_rollout_ref.actor.optim.lr": Bound(lo=0, hi=1),
    "actor_rollout_ref.actor.optim.betas": Bound(lo=0, hi=1, max_items=2),
    "actor_rollout_ref.actor.optim.weight_decay": Bound(lo=0, hi=10),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": STEPS,
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": UNIT,
    "actor_rollout_ref.actor.optim.warmup_style": FLAG,
    "actor_rollout_ref.actor.optim.min_lr_ratio": UNIT,
    "actor_rollout_ref.actor.optim.total_training_steps": STEPS,
    "actor_rollout_ref.actor.fsdp_config.param_offload": FLAG,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": FLAG,
    # reference
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": BATCH,
    "actor_rollout_ref.ref.use_torch_compile": FLAG,
    "actor_rollout_ref.ref.fsdp_config.param_offload": FLAG,
    # critic (PPO with GAE): its hyper-parameters; the value model's folder is the run's model
    "critic.optim.lr": Bound(lo=0, hi=1),
    "critic.optim.betas": Bound(lo=0, hi=1, max_items=2),
    "critic.optim.weight_decay": Bound(lo=0, hi=10),
    "critic.optim.lr_warmup_steps": STEPS,
    "critic.optim.lr_warmup_steps_ratio": UNIT,
    "critic.optim.warmup_style": FLAG,
    "critic.optim.min_lr_ratio": UNIT,
    "critic.optim.total_training_steps": STEPS,
    "critic.ppo_mini_batch_size": BATCH,
    "critic.ppo_micro_batch_size_per_gpu": BATCH,
    "critic.forward_micro_batch_size_per_gpu": BATCH,
    "critic.ppo_epochs": Bound(lo=1, hi=100),
    "critic.shuffle": FLAG,
    "critic.cliprange_value": Bound(lo=0, hi=1e6),
    "critic.grad_clip": Bound(lo=0, hi=1e6),
    "critic.loss_agg_mode": FLAG,
    # algorithm
    "algorithm.adv_estimator": FLAG,
    "algorithm.norm_adv_by_std_in_grpo": FLAG,
    "algorithm.gamma": UNIT,
    "algorithm.lam": UNIT,
    "algorithm.use_kl_in_reward": FLAG,
    "algorithm.kl_penalty": FLAG,
    "algorithm.kl_ctrl.type": FLAG,
    "algorithm.kl_ctrl.kl_coef": Bound(lo=0, hi=100),
    "algorithm.kl_ctrl.horizon": Bound(lo=1, hi=1e9),
    "algorithm.kl_ctrl.target_kl": Bound(lo=0, hi=100),
    # dynamic sampling (DAPO): each generation batch costs a rollout, hence the cap on the limit
    "algorithm.filter_groups.enable": FLAG,
    "algorithm.filter_groups.metric": FLAG,
    "algorithm.filter_groups.max_num_gen_batches": Bound(lo=-1, hi=1000),
    # rollout correction: weights, rejection, bypass (the trainer's check parses the option and threshold strings)
    "algorithm.rollout_correction.rollout_is": FLAG,
    "algorithm.rollout_correction.rollout_is_threshold": THRESHOLDS,
    "algorithm.rollout_correction.rollout_is_batch_normalize": FLAG,
    "algorithm.rollout_correction.rollout_rs": Bound(
        pattern=r"[a-z0-9_]{1,16}(,[a-z0-9_]{1,16}){0,15}",
        pattern_text="option names joined by ',' (e.g. token_k1,seq_max_k3)"),
    "algorithm.rollout_correction.rollout_rs_threshold": THRESHOLDS,
    "algorithm.rollout_correction.bypass_mode": FLAG,
    "algorithm.rollout_correction.loss_type": FLAG,
    # reward: a built-in or operator-registered name (checked by `check`), never a file
    "reward.name": NAME,
    "reward.reward_kwargs": Bound(lo=-1e12, hi=1e12, max_json_bytes=4096),
    "reward.format_score": Bound(lo=-100, hi=100),
    # overlong reward shaping (DAPO)
    "reward_model.overlong_buffer.enable": FLAG,
    "reward_model.overlong_buffer.len": Bound(lo=0, hi=131_072),
    "reward_model.overlong_buffer.penalty_factor": Bound(lo=0, hi=100),
    "reward_model.overlong_buffer.log": FLAG,
    # the reward model: chosen by the run's reward_model_id (the catalog writes its path)
    "reward_model.enable": FLAG,
    "reward_model.micro_batch_size_per_gpu": Bound(lo=1, hi=4096),
    "reward_model.max_length": Bound(lo=2, hi=131_072),
    "reward_model.rm_weight": Bound(lo=-1000, hi=1000),
    "reward_model.rule_weight": Bound(lo=-1000, hi=1000),
    "reward_model.tool_reward_weight": Bound(lo=-1000, hi=1000),
    # tools: names from the trainer's registry (checked by `check`); tool sets are chosen by name
    "tools.names": Bound(pattern=r"[A-Za-z0-9_.-]{1,64}", max_items=16),
    # trainer
    "trainer.project_name": NAME,
    "trainer.experiment_name": NAME,
    "trainer.total_epochs": Bound(lo=1, hi=10_000),
    "trainer.total_training_steps": Bound(lo=1, hi=10_000_000),
    "trainer.save_freq": STEPS,
    "trainer.test_freq": STEPS,
    "trainer.val_before_train": FLAG,
    "trainer.max_actor_ckpt_to_keep": Bound(lo=1, hi=1000),
    "trainer.seed": SEED,
    "trainer.logger": Bound(choices=USER_LOGGERS + TRACKER_LOGGERS, max_items=len(USER_LOGGERS + TRACKER_LOGGERS)),
    "trainer.critic_warmup": Bound(lo=0, hi=1_000_000),
    "trainer.balance_batch": FLAG,
    "trainer.export_hf": FLAG,
    # report (too frequent reports flood the ingest; too rare heartbeats look like a lost run)
    "report.samples_per_step": Bound(lo=-1, hi=4096),
    "report.token_view": FLAG,
    "report.memory_interval_s": Bound(lo=0.05, hi=3600),
    "report.heartbeat_interval_s": Bound(lo=0.5, hi=60),
    "report.val_samples": Bound(lo=-1, hi=4096),
}

# Keys only the platform writes, and from what (the refusal says so).
PLATFORM_KEYS: dict[str, str] = {
    "data.train_files": "the run's dataset",
    "data.val_files": "the run's validation dataset",
    "actor_rollout_ref.model.path": "the run's model (the catalog)",
    "actor_rollout_ref.model.tokenizer_path": "the run's model (the catalog)",
    "actor_rollout_ref.model.trust_remote_code": "the model's catalog entry (an operator decision)",
    "critic.model.path": "the run's model (the catalog): the value model starts from it",
    "actor_rollout_ref.rollout.multi_turn.format": "the model's catalog entry (the tool-call parser its chat template was checked with)",
    "reward_model.model.path": "the run's reward model (a catalog reward model chosen by reward_model_id)",
    "reward_model.model.trust_remote_code": "the reward model's catalog entry (an operator decision)",
    "custom_reward_function.path": "the operator's reward-function registry (choose one by reward.name)",
    "custom_reward_function.name": "the operator's reward-function registry (choose one by reward.name)",
    "tools.config_path": "the operator's tool-set registry (choose one by the run's tool set)",
    "trainer.default_local_dir": "the run's own folder",
    "trainer.resume_mode": "the resume action (from a checkpoint the platform recorded)",
    "trainer.resume_from_path": "the resume action (from a checkpoint the platform recorded)",
    "trainer.resume_fork": "the fork action (from a checkpoint step of a run, chosen by its step number)",
    "trainer.device": "the run's GPUs",
    "trainer.nnodes": "the run's GPUs",
    "trainer.n_gpus_per_node": "the run's GPUs",
    "trainer.launcher": "the run's GPUs",
    "trainer.torch_threads": "the CPUs the platform gives a run",
    "trainer.max_ckpt_to_keep_cap": "the operator's cap on checkpoints kept per run (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN)",
    "trainer.disk_budget_gb": "the operator's disk budget per run (RLSTUDIO_RUN_DISK_BUDGET_GB)",
}


def unlisted_keys() -> list[str]:
    """Keys of the schema that are on neither list (a test keeps this empty)."""
    return [k for k in DEFAULTS if k not in USER_KEYS and k not in PLATFORM_KEYS]


def markdown() -> str:
    """The two lists as the tables of docs/security.md (a test keeps the page in step)."""

    def num(x: float) -> str:
        return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

    def bound_text(b: Bound) -> str:
        parts = []
        if b.lo is not None and b.hi is not None:
            parts.append(f"{num(b.lo)} … {num(b.hi)}")
        if b.choices:
            parts.append("one of " + ", ".join(f"`{c}`" for c in b.choices))
        if b.pattern:
            parts.append(b.pattern_text or "a name: letters, digits, `.`, `_`, `-` (no path separators), up to 64")
        if b.max_items:
            parts.append(f"at most {b.max_items} items")
        if b.max_json_bytes:
            parts.append(f"at most {b.max_json_bytes} bytes as JSON")
        return "; ".join(p for p in parts if p) or "the schema's type and choices"

    lines = ["| key a user may set | bounds |", "|---|---|"]
    notes = {"trainer.logger": " (`wandb`, `mlflow` only where the operator enabled them: see Trackers below)"}
    lines += [f"| `{key}` | {bound_text(b)}{notes.get(key, '')} |" for key, b in USER_KEYS.items()]
    lines += ["", "| key only the platform sets | from |", "|---|---|"]
    lines += [f"| `{key}` | {src} |" for key, src in PLATFORM_KEYS.items()]
    return "\n".join(lines) + "\n"
