"""The run spec's schema: the root ``Config`` and its sections as frozen dataclasses in verl's key
names, every field with its default and help text (``actor_rollout_ref`` has its own module).

``LOGGERS`` is the one list of the trainer's sinks (``trainer.logger``): the checks refuse any other
name, the sink registry (trainer/sinks.py) must register exactly these, and the platform picks its
sinks from it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Union

from .actor_rollout_ref import ActorRolloutRefConfig, upgrade_stored
from .critic import CriticConfig
from .fields import build, option, section
from .reward_model import RewardModelModelConfig
from .rollout_correction import RolloutCorrectionConfig

# The trainer's sinks, by registry name (http: the platform's ingest API, trainer/sinks_http.py).
LOGGERS: tuple[str, ...] = ("console", "jsonl", "tensorboard", "wandb", "mlflow", "http")


# --------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class DataConfig:
    train_files: Union[str, list[str]] = option(
        "",
        "Training data: a JSONL / Parquet file, a `datasets` folder, or a list of them (required "
        "to run).",
    )
    val_files: Union[str, list[str], None] = option(
        None, "Validation data in the same forms; None = no validation."
    )
    prompt_key: str = option(
        "prompt", "Column holding the prompt chat messages (verl's row format)."
    )
    max_prompt_length: int = option(
        512, "Longest chat-templated prompt in tokens (tools included)."
    )
    max_response_length: int = option(
        512,
        "Longest response in tokens, all turns together (assistant, tool replies and templates).",
    )
    train_batch_size: int = option(
        1024, "Prompts per training step (each sampled rollout.n times)."
    )
    gen_batch_size: Union[int, None] = option(
        None,
        "Prompts per generation batch with dynamic sampling (algorithm.filter_groups.enable): a "
        "step generates batches of this size until train_batch_size groups are kept; None = "
        "train_batch_size (verl's default). Ignored without dynamic sampling.",
    )
    val_batch_size: Union[int, None] = option(
        None,
        "Prompts a validation generates at a time; None = the whole val set in one batch (verl's only "
        "behaviour: verl deprecates this key). Metrics and reported samples cover the whole set.",
    )
    filter_overlong_prompts: bool = option(
        True, "Drop (and count) rows whose prompt exceeds max_prompt_length."
    )
    truncation: Literal["error", "left", "right", "middle"] = option(
        "error", "What to do with an overlong prompt that was not filtered."
    )
    shuffle: bool = option(True, "Shuffle the training rows each epoch (seeded by data.seed).")
    seed: int = option(1, "Seed of the training-data shuffle.")
    reward_fn_key: str = option("data_source", "Column that selects the reward function.")
    return_raw_chat: bool = option(
        True, "verl's switch to keep the prompt messages; always on here (the rollout re-templates them every turn): accepted for verl's configs, false changes nothing."
    )
    apply_chat_template_kwargs: dict[str, Any] = option(
        {},
        "Extra chat-template variables for prompts, rollout deltas and SFT, e.g. {enable_thinking: "
        "false} for Qwen3's non-thinking mode (names, to scalars).",
    )


# ---------------------------------------------------------------------------------------- algorithm
@dataclass(frozen=True)
class KLCtrlConfig:
    type: Literal["fixed", "adaptive"] = option("fixed", "KL-in-reward coefficient controller.")
    kl_coef: float = option(0.001, "Initial (or fixed) KL-in-reward coefficient.")
    horizon: int = option(10000, "Adaptive controller horizon.")
    target_kl: float = option(0.1, "Adaptive controller target KL.")


@dataclass(frozen=True)
class FilterGroupsConfig:
    enable: bool = option(
        False,
        "DAPO's dynamic sampling: drop every group (a prompt's rollout.n samples) whose metric is "
        "the same for all its samples (no GRPO signal) and generate more batches until "
        "data.train_batch_size groups are kept.",
    )
    metric: Union[Literal["acc", "score", "seq_reward", "seq_final_reward"], None] = option(
        None,
        "What must vary within a group: acc (the reward function's acc field, else its score), "
        "score (the reward function's score), seq_reward (the score after overlong shaping), "
        "seq_final_reward (the reward after the KL penalty; equals seq_reward without KL in "
        "reward). Required when enabled.",
    )
    max_num_gen_batches: int = option(
        0,
        "Most generation batches per step; 0 or less = no limit. At the limit the step trains on "
        "the groups kept so far, topped up to data.train_batch_size with dropped ones.",
    )


@dataclass(frozen=True)
class AlgorithmConfig:
    adv_estimator: Literal[
        "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae", "opo",
        "grpo_passk", "remax", "gpg",
    ] = option(
        "grpo",
        "Advantage estimator (registry name in trainer.algorithms.advantages); gae = PPO with a "
        "learned value model (the critic section); opo = score less the group's length-weighted "
        "mean score; grpo_passk = only each group's best sample learns, by its lead over the "
        "second best (pass@k; needs rollout.n >= 2); remax = return less the reward of a greedy "
        "response to the same prompt (one more generation per prompt each step); gpg = score less "
        "the group mean, no std, times batch rows / rows with a non-zero score (GPG; verl pairs it "
        "with policy_loss.loss_mode=gpg).",
    )
    norm_adv_by_std_in_grpo: bool = option(
        True, "Divide GRPO (and grpo_passk) advantages by the group std (False = Dr.GRPO)."
    )
    gamma: float = option(1.0, "Discount per trained token (GAE, REINFORCE++).")
    lam: float = option(1.0, "GAE lambda: 1 = Monte-Carlo returns less the value, 0 = one-step TD.")
    use_kl_in_reward: bool = option(False, "Subtract a KL penalty from the token rewards.")
    kl_penalty: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"] = option(
        "kl", "KL estimator used as reward penalty (a trailing + is accepted as in the loss: the value is the estimator's)."
    )
    kl_ctrl: KLCtrlConfig = section(KLCtrlConfig, "KL-in-reward coefficient.")
    filter_groups: FilterGroupsConfig = section(
        FilterGroupsConfig, "Dynamic sampling (DAPO): keep only groups whose metric varies."
    )
    rollout_correction: RolloutCorrectionConfig = section(
        RolloutCorrectionConfig,
        "Rollout correction: importance weights, rejection and bypass between the rollout engine's "
        "log-probs and the actor's (verl's algorithm.rollout_correction).",
    )


# --------------------------------------------------------------------------------- reward and tools
@dataclass(frozen=True)
class RewardConfig:
    name: str = option("default", "Reward function: a built-in (gsm8k, gsm8k_flexible, arith, math_boxed, "
                       "exact_match, multiple_choice) or an operator-registered name; default = chosen by "
                       "each row's data_source (docs/datasets.md, \"Rewards\").")
    reward_kwargs: dict[str, Any] = option({}, "Keyword arguments passed to the reward function.")
    format_score: float = option(0.0, "Score for an answer that was found but is wrong (the built-ins; "
                                 "no answer found scores 0).")


@dataclass(frozen=True)
class OverlongBufferConfig:
    enable: bool = option(
        False,
        "DAPO's overlong reward shaping: a response longer than max - len tokens (max = "
        "rollout.response_length) gets a penalty growing linearly to -penalty_factor at max.",
    )
    len: int = option(0, "Tokens of the buffer before the response length limit (>= 1 when enabled).")
    penalty_factor: float = option(0.0, "Penalty at the response length limit (the paper's 1.0).")
    log: bool = option(
        False,
        "Record overlong_reward (the penalty) and overlong (penalised or not) with the reward's "
        "extra fields: each sample's reward parts.",
    )


@dataclass(frozen=True)
class RewardModelConfig:
    enable: bool = option(
        False,
        "Score every trajectory with a sequence-classification reward model (reward_model.model), "
        "combined with the reward function and the tools' rewards by the weights below.",
    )
    micro_batch_size_per_gpu: Union[int, None] = option(
        None, "Trajectories per reward-model forward on each worker; None = 8."
    )
    max_length: Union[int, None] = option(
        None,
        "Longest scored conversation in the reward model's tokens; longer ones keep their end (the "
        "score is read at the last token); None = the model's max_position_embeddings.",
    )
    rm_weight: float = option(
        1.0, "Weight of the reward model's score in the reward (used when enable)."
    )
    rule_weight: float = option(
        1.0,
        "Weight of the reward function's score (reward.name / custom_reward_function); 0 = the "
        "reward model replaces the rule, as in verl (the rule is then still run where the data "
        "source has one, to show its score).",
    )
    tool_reward_weight: float = option(
        0.0,
        "Weight of the sum of the tools' calc_reward values (the reward function also sees them "
        "as extra_info.tool_rewards).",
    )
    model: RewardModelModelConfig = section(
        RewardModelModelConfig, "The reward model: a sequence-classification checkpoint."
    )
    overlong_buffer: OverlongBufferConfig = section(
        OverlongBufferConfig, "DAPO's soft overlong penalty, added to the weighted reward."
    )


@dataclass(frozen=True)
class CustomRewardFunctionConfig:
    path: Union[str, None] = option(
        None, "Python file with a custom reward (operator-configured, never uploaded data)."
    )
    name: str = option(
        "compute_score",
        "Function in that file: f(data_source, solution_str, ground_truth, extra_info).",
    )


@dataclass(frozen=True)
class ToolsConfig:
    names: list[str] = option([], 'Registered tools offered to the model, e.g. ["calculator"].')
    config_path: Union[str, None] = option(
        None, "verl tool_config YAML (class_name / config / tool_schema)."
    )


# ------------------------------------------------------------------------------------------ trainer
@dataclass(frozen=True)
class TrainerConfig:
    project_name: str = option("rlstudio", "Project name (trackers).")
    experiment_name: str = option("run", "Experiment name (trackers).")
    total_epochs: int = option(1, "Passes over the training data.")
    total_training_steps: Union[int, None] = option(
        None, "Stop after this many steps; None = from total_epochs."
    )
    default_local_dir: str = option(
        "outputs/run", "Output folder: events.jsonl, checkpoints, export."
    )
    save_freq: int = option(-1, "Checkpoint every N steps; -1 = only on stop and at the end.")
    test_freq: int = option(-1, "Validate every N steps; -1 = never during training.")
    val_before_train: bool = option(True, "Validate once before the first step.")
    resume_mode: Literal["auto", "disable", "resume_path"] = option(
        "auto",
        "auto = continue from the latest checkpoint if any; resume_path = from resume_from_path.",
    )
    resume_from_path: Union[str, None] = option(
        None, "A global_step_N folder (resume_mode=resume_path)."
    )
    resume_fork: bool = option(
        False,
        "RL Studio's own (verl has no fork): with resume_mode=resume_path, the checkpoint starts a fork. "
        "Everything a resume restores is loaded, then this config's fork-changeable keys "
        "(trainer.config.fork) are taken: the optimizer's lr and weight_decay, the LR schedule, a changed "
        "algorithm.kl_ctrl.kl_coef.",
    )
    max_actor_ckpt_to_keep: Union[int, None] = option(
        None,
        "Keep at most this many checkpoints (the newest, and always the committed one); None = all "
        "(up to max_ckpt_to_keep_cap).",
    )
    max_ckpt_to_keep_cap: Union[int, None] = option(
        None,
        "The operator's ceiling on checkpoints kept: the trainer keeps min(max_actor_ckpt_to_keep, "
        "this); None = no ceiling (verl's behaviour). Set by the platform from "
        "RLSTUDIO_MAX_CHECKPOINTS_PER_RUN.",
    )
    disk_budget_gb: Union[float, None] = option(
        None,
        "GiB the output folder may hold after a checkpoint (file sizes, symlinks not followed): over "
        "it every checkpoint but the newest is pruned, and if still over the run fails (the checkpoint a "
        "run ends on, a stop's or the last step's, is kept instead, with a warning, and the run ends "
        "stopped or succeeded); None = no budget. Set by the platform from RLSTUDIO_RUN_DISK_BUDGET_GB.",
    )
    seed: int = option(1, "Seed of the training randomness (torch, Python and NumPy RNGs).")
    device: Literal["auto", "cpu", "cuda"] = option("auto", "auto = cuda when available, else cpu.")
    nnodes: int = option(1, "Nodes.")
    n_gpus_per_node: int = option(1, "Devices (workers) per node.")
    launcher: Literal["auto", "local", "ray"] = option(
        "auto",
        "How workers start: local = one in-process worker (world size 1 only); ray = one Ray actor "
        "per device in a placement group (RAY_ADDRESS, or a local Ray started on demand); "
        "auto = local when nnodes * n_gpus_per_node == 1, else ray.",
    )
    logger: list[str] = option(
        ["console", "jsonl"],
        f"Sinks: {', '.join(LOGGERS)}; http is the platform's ingest API (RLSTUDIO_INGEST_URL, "
        "and RLSTUDIO_INGEST_TOKEN_FILE or RLSTUDIO_INGEST_TOKEN, from the environment; docs/live.md); "
        "tensorboard writes under $TENSORBOARD_DIR, else <out_dir>/tensorboard_log/<project>/<experiment>. "
        "A platform run may list wandb / mlflow only where the operator enabled them: their server and key are "
        "the operator's, project_name / experiment_name name the run there (docs/security.md, Trackers).",
    )
    critic_warmup: int = option(
        0,
        "The actor updates from step critic_warmup on (verl's test, steps counted from 1): with "
        "gae the steps before train the critic alone; 0 and 1 = from the first step.",
    )
    balance_batch: bool = option(True, "Reorder trajectories so workers get similar token counts.")
    export_hf: bool = option(True, "Export the final policy in Hugging Face format.")
    torch_threads: Union[int, None] = option(
        None, "torch threads per process; None = the cores it has."
    )


@dataclass(frozen=True)
class ReportConfig:
    samples_per_step: int = option(
        8,
        "Trajectories per step emitted as sample events, as whole GRPO groups (all n samples of a "
        "prompt): as many groups as fit, at least one; -1 = all.",
    )
    token_view: bool = option(
        True,
        "Attach the token view (ids, pieces, masks, log-probs) to samples; its log-probs and "
        "advantages are rounded to 6 decimals (for reading; the step itself uses full precision).",
    )
    memory_interval_s: float = option(
        0.25,
        "Seconds between memory samples in each worker (and one at every phase boundary); 0 = "
        "phase boundaries only.",
    )
    heartbeat_interval_s: float = option(5.0, "Seconds between heartbeat events.")
    val_samples: int = option(
        8,
        "Validation samples emitted per validation, as whole groups (all val_kwargs.n samples of a "
        "prompt): as many as fit, at least one; -1 = all.",
    )


@dataclass(frozen=True)
class Config:
    data: DataConfig = section(DataConfig, "Datasets and lengths.")
    actor_rollout_ref: ActorRolloutRefConfig = section(
        ActorRolloutRefConfig, "Model, rollout, actor, reference."
    )
    critic: CriticConfig = section(
        CriticConfig, "The value model of PPO with GAE (algorithm.adv_estimator=gae)."
    )
    algorithm: AlgorithmConfig = section(AlgorithmConfig, "Advantage estimator and KL in reward.")
    reward: RewardConfig = section(RewardConfig, "Reward function.")
    reward_model: RewardModelConfig = section(
        RewardModelConfig,
        "verl's reward_model section: the reward model, the weights of the reward's parts, the "
        "overlong reward shaping.",
    )
    custom_reward_function: CustomRewardFunctionConfig = section(
        CustomRewardFunctionConfig, "Operator-provided reward function file."
    )
    tools: ToolsConfig = section(ToolsConfig, "Tools offered in multi-turn rollout.")
    trainer: TrainerConfig = section(TrainerConfig, "Loop, checkpoints, devices, sinks.")
    report: ReportConfig = section(ReportConfig, "What the run reports as events.")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Config":
        """Build from a nested dict (missing keys take defaults; unknown keys raise ConfigError).
        A spec stored by an earlier version is read as it meant (``upgrade_stored``)."""
        return build(cls, upgrade_stored(d or {}), "")

    def to_dict(self) -> dict[str, Any]:
        """The nested plain-JSON form (what the platform stores on a run)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

