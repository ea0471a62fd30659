"""The run spec: a tree of frozen dataclasses in verl's key names (standard library only).

Owns the trainer's configuration: every section and field with its default and help text, loading
from JSON / YAML, verl-style dotted overrides (``actor_rollout_ref.rollout.n=8``), type checking with
errors that name the key, and the cross-field checks of ``validate``. The web side imports this module
to build and check run specs, so it must never import torch (a test enforces it).

    cfg = Config.from_dict(json.load(f))          # unknown key -> ConfigError naming it
    cfg = apply_overrides(cfg, ["data.train_batch_size=8", "trainer.logger=['console']"])
    validate(cfg)                                 # cross-field checks, model/data paths demanded
    cfg.to_dict()                                 # the JSON the platform stores on a run

Generate the config reference:  python -m trainer.config --markdown > docs/config-reference.md
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, Union


class ConfigError(ValueError):
    """A bad config value; ``key`` is the dotted key (verl's name), ``message`` says what is allowed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def _f(default: Any, help: str) -> Any:  # noqa: A002 - "help" reads best in the field table
    """A field with its help text; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)):
        return field(
            default_factory=lambda d=default: json.loads(json.dumps(d)), metadata={"help": help}
        )
    return field(default=default, metadata={"help": help})


def _section(cls: type, help: str) -> Any:  # noqa: A002
    return field(default_factory=cls, metadata={"help": help})


# ----------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class DataConfig:
    train_files: Union[str, list[str]] = _f(
        "",
        "Training data: a JSONL / Parquet file, a `datasets` folder, or a list of them (required to run).",
    )
    val_files: Union[str, list[str], None] = _f(
        None, "Validation data in the same forms; None = no validation."
    )
    prompt_key: str = _f("prompt", "Column holding the prompt chat messages (verl's row format).")
    max_prompt_length: int = _f(512, "Longest chat-templated prompt in tokens (tools included).")
    max_response_length: int = _f(
        512,
        "Longest response in tokens, all turns together (assistant, tool replies and templates).",
    )
    train_batch_size: int = _f(1024, "Prompts per training step (each sampled rollout.n times).")
    val_batch_size: Union[int, None] = _f(
        None, "Prompts per validation batch; None = the whole val set."
    )
    filter_overlong_prompts: bool = _f(
        True, "Drop (and count) rows whose prompt exceeds max_prompt_length."
    )
    truncation: Literal["error", "left", "right", "middle"] = _f(
        "error", "What to do with an overlong prompt that was not filtered."
    )
    shuffle: bool = _f(True, "Shuffle the training rows each epoch (seeded by data.seed).")
    seed: int = _f(1, "Seed of the training-data shuffle.")
    reward_fn_key: str = _f("data_source", "Column that selects the reward function.")
    return_raw_chat: bool = _f(
        True, "Keep the prompt messages (multi-turn rollout re-templates them)."
    )


# ---------------------------------------------------------------------------------- actor_rollout_ref
@dataclass(frozen=True)
class ModelConfig:
    path: str = _f("", "Hugging Face–format model folder (required to run; never downloaded).")
    tokenizer_path: Union[str, None] = _f(None, "Tokenizer folder; None = model.path.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _f(
        "auto", "Parameter/compute dtype; auto = bfloat16 on a GPU, float32 on the CPU."
    )
    enable_gradient_checkpointing: bool = _f(
        False, "Recompute activations in backward to save memory."
    )
    use_remove_padding: bool = _f(
        True, "Do not spend compute on padding (pack or bucket sequences by length)."
    )
    trust_remote_code: bool = _f(
        False, "Allow model code from the model folder (operator decision)."
    )


@dataclass(frozen=True)
class MultiTurnConfig:
    enable: bool = _f(False, "Multi-turn rollout with tool calls.")
    max_turns: Union[int, None] = _f(
        None, "Most assistant turns per sample; None = 5 when enabled, 1 otherwise."
    )
    max_tool_response_length: int = _f(
        256, "Longest tool reply in tokens (longer ones are truncated)."
    )
    tool_response_truncate_side: Literal["left", "right", "middle"] = _f(
        "middle", "Which part of an overlong tool reply is cut."
    )
    max_parallel_calls: int = _f(
        1,
        "Tool calls executed per assistant turn (1 = the first call only; >1 runs several concurrently).",
    )
    tool_timeout_s: float = _f(
        10.0, "Seconds a tool call may take before it becomes an error reply."
    )
    format: Literal["hermes"] = _f("hermes", "Tool-call syntax: <tool_call>{json}</tool_call>.")


@dataclass(frozen=True)
class ValKwargsConfig:
    n: int = _f(1, "Samples per validation prompt.")
    temperature: float = _f(0.0, "Validation sampling temperature.")
    top_p: float = _f(1.0, "Validation nucleus sampling mass.")
    top_k: int = _f(-1, "Validation top-k; -1 = off.")
    do_sample: bool = _f(False, "Sample in validation (False = greedy).")


@dataclass(frozen=True)
class RolloutConfig:
    name: Literal["auto", "hf", "sglang"] = _f(
        "auto",
        "Rollout engine: hf (transformers, anywhere), sglang (GPU), auto = sglang where usable.",
    )
    n: int = _f(1, "Samples per prompt (the GRPO group size).")
    temperature: float = _f(1.0, "Sampling temperature.")
    top_p: float = _f(1.0, "Nucleus sampling mass.")
    top_k: int = _f(-1, "Top-k sampling; -1 = off.")
    do_sample: bool = _f(True, "Sample (False = greedy).")
    response_length: Union[int, None] = _f(
        None, "Response token limit; None = data.max_response_length."
    )
    max_model_len: Union[int, None] = _f(
        None, "Engine context length; None = prompt + response length."
    )
    gpu_memory_utilization: float = _f(0.5, "Fraction of GPU memory the engine may take (sglang).")
    free_cache_engine: bool = _f(True, "Release the engine's KV cache after each rollout.")
    log_prob_micro_batch_size_per_gpu: Union[int, None] = _f(
        None, "Sequences per forward when recomputing old log-probs; None = all at once."
    )
    update_weights_bucket_megabytes: int = _f(
        512, "Size of the buckets in which weights are synced."
    )
    seed: int = _f(0, "Seed of the rollout sampler.")
    multi_turn: MultiTurnConfig = _section(MultiTurnConfig, "Multi-turn tool calling.")
    val_kwargs: ValKwargsConfig = _section(ValKwargsConfig, "Sampling used in validation.")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = _f(1e-6, "AdamW learning rate.")
    betas: list[float] = _f([0.9, 0.999], "AdamW betas.")
    weight_decay: float = _f(0.01, "AdamW weight decay.")
    lr_warmup_steps: int = _f(-1, "Warmup steps; -1 = use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: float = _f(0.0, "Warmup as a fraction of total_training_steps.")
    warmup_style: Literal["constant", "cosine"] = _f(
        "constant", "LR after warmup: constant or cosine decay."
    )
    min_lr_ratio: float = _f(0.0, "Cosine floor as a fraction of lr.")
    total_training_steps: int = _f(-1, "Filled at run time from the data and trainer settings.")


@dataclass(frozen=True)
class ActorFsdpConfig:
    param_offload: bool = _f(False, "Keep parameters on the CPU between phases.")
    optimizer_offload: bool = _f(False, "Keep optimizer state on the CPU between updates.")


@dataclass(frozen=True)
class ActorConfig:
    strategy: Literal["fsdp"] = _f(
        "fsdp", "Training strategy (FSDP2; one process runs it unsharded)."
    )
    ppo_mini_batch_size: int = _f(256, "Prompts per optimizer step (times rollout.n trajectories).")
    ppo_micro_batch_size_per_gpu: Union[int, None] = _f(
        None,
        "Trajectories per forward/backward (gradient accumulation unit); None = whole mini batch.",
    )
    ppo_epochs: int = _f(1, "Passes over each step's batch.")
    clip_ratio: float = _f(0.2, "PPO clip epsilon.")
    clip_ratio_low: Union[float, None] = _f(None, "Lower clip epsilon; None = clip_ratio.")
    clip_ratio_high: Union[float, None] = _f(None, "Upper clip epsilon; None = clip_ratio.")
    clip_ratio_c: float = _f(3.0, "Dual-clip constant for negative advantages (> 1).")
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = _f("token-mean", "How the token losses are aggregated into one number.")
    policy_loss: Literal["vanilla"] = _f(
        "vanilla", "Policy loss (registry name in trainer.algorithms.losses)."
    )
    entropy_coeff: float = _f(0.0, "Entropy bonus weight (0 = entropy not in the loss).")
    use_kl_loss: bool = _f(False, "Add a KL-to-reference term to the loss (GRPO style).")
    kl_loss_coef: float = _f(0.001, "Weight of the KL loss.")
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = _f(
        "low_var_kl", "KL estimator used in the loss."
    )
    grad_clip: float = _f(1.0, "Gradient-norm clip (a non-finite norm skips the step).")
    use_dynamic_bsz: bool = _f(False, "Build micro batches by token budget instead of by count.")
    ppo_max_token_len_per_gpu: int = _f(
        16384, "Token budget of a micro batch when use_dynamic_bsz."
    )
    shuffle: bool = _f(False, "Shuffle trajectories before splitting into mini batches.")
    use_torch_compile: bool = _f(
        False,
        "torch.compile (dynamic shapes) the policy's forward used for log-probs and the update; the "
        "rollout is unaffected. Off by default: on a CPU the first step compiles for minutes (verl's "
        "key of the same name, default on, compiles only its entropy helper). Ignored under FSDP "
        "(world size > 1).",
    )
    optim: OptimConfig = _section(OptimConfig, "Optimizer and learning-rate schedule.")
    fsdp_config: ActorFsdpConfig = _section(ActorFsdpConfig, "FSDP memory options.")


@dataclass(frozen=True)
class RefFsdpConfig:
    param_offload: bool = _f(False, "Keep the reference parameters on the CPU between uses.")


@dataclass(frozen=True)
class RefConfig:
    log_prob_micro_batch_size_per_gpu: Union[int, None] = _f(
        None, "Sequences per reference forward; None = all at once."
    )
    use_torch_compile: Union[bool, None] = _f(
        None, "torch.compile the reference forward; None = actor.use_torch_compile (as verl)."
    )
    fsdp_config: RefFsdpConfig = _section(RefFsdpConfig, "FSDP memory options.")


@dataclass(frozen=True)
class ActorRolloutRefConfig:
    model: ModelConfig = _section(ModelConfig, "The policy model.")
    rollout: RolloutConfig = _section(RolloutConfig, "Sampling and the rollout engine.")
    actor: ActorConfig = _section(ActorConfig, "The policy update.")
    ref: RefConfig = _section(RefConfig, "The frozen reference model.")


# ------------------------------------------------------------------------------------------ algorithm
@dataclass(frozen=True)
class KLCtrlConfig:
    type: Literal["fixed", "adaptive"] = _f("fixed", "KL-in-reward coefficient controller.")
    kl_coef: float = _f(0.001, "Initial (or fixed) KL-in-reward coefficient.")
    horizon: int = _f(10000, "Adaptive controller horizon.")
    target_kl: float = _f(0.1, "Adaptive controller target KL.")


@dataclass(frozen=True)
class AlgorithmConfig:
    adv_estimator: Literal[
        "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"
    ] = _f("grpo", "Advantage estimator (registry name in trainer.algorithms.advantages).")
    norm_adv_by_std_in_grpo: bool = _f(
        True, "Divide GRPO advantages by the group std (False = Dr.GRPO)."
    )
    gamma: float = _f(1.0, "Discount (REINFORCE++).")
    lam: float = _f(1.0, "GAE lambda (kept for verl compatibility).")
    use_kl_in_reward: bool = _f(False, "Subtract a KL penalty from the token rewards.")
    kl_penalty: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = _f(
        "kl", "KL estimator used as reward penalty."
    )
    kl_ctrl: KLCtrlConfig = _section(KLCtrlConfig, "KL-in-reward coefficient.")


# ------------------------------------------------------------------------------------ reward and tools
@dataclass(frozen=True)
class RewardConfig:
    name: str = _f("default", "Reward function registry key; default = chosen by data_source.")
    reward_kwargs: dict[str, Any] = _f({}, "Keyword arguments passed to the reward function.")
    format_score: float = _f(0.0, "Score for a well-formed but wrong answer (GSM8K style).")


@dataclass(frozen=True)
class CustomRewardFunctionConfig:
    path: Union[str, None] = _f(
        None, "Python file with a custom reward (operator-configured, never uploaded data)."
    )
    name: str = _f(
        "compute_score",
        "Function in that file: f(data_source, solution_str, ground_truth, extra_info).",
    )


@dataclass(frozen=True)
class ToolsConfig:
    names: list[str] = _f([], 'Registered tools offered to the model, e.g. ["calculator"].')
    config_path: Union[str, None] = _f(
        None, "verl tool_config YAML (class_name / config / tool_schema)."
    )


# -------------------------------------------------------------------------------------------- trainer
@dataclass(frozen=True)
class TrainerConfig:
    project_name: str = _f("rlstudio", "Project name (trackers).")
    experiment_name: str = _f("run", "Experiment name (trackers).")
    total_epochs: int = _f(1, "Passes over the training data.")
    total_training_steps: Union[int, None] = _f(
        None, "Stop after this many steps; None = from total_epochs."
    )
    default_local_dir: str = _f("outputs/run", "Output folder: events.jsonl, checkpoints, export.")
    save_freq: int = _f(-1, "Checkpoint every N steps; -1 = only on stop and at the end.")
    test_freq: int = _f(-1, "Validate every N steps; -1 = never during training.")
    val_before_train: bool = _f(True, "Validate once before the first step.")
    resume_mode: Literal["auto", "disable", "resume_path"] = _f(
        "auto",
        "auto = continue from the latest checkpoint if any; resume_path = from resume_from_path.",
    )
    resume_from_path: Union[str, None] = _f(
        None, "A global_step_N folder (resume_mode=resume_path)."
    )
    max_actor_ckpt_to_keep: Union[int, None] = _f(
        None, "Keep at most this many checkpoints; None = all."
    )
    seed: int = _f(1, "Seed of the training randomness (torch, Python and NumPy RNGs).")
    device: Literal["auto", "cpu", "cuda"] = _f("auto", "auto = cuda when available, else cpu.")
    nnodes: int = _f(1, "Nodes.")
    n_gpus_per_node: int = _f(1, "Devices (workers) per node.")
    launcher: Literal["auto", "local", "ray"] = _f(
        "auto",
        "How workers start: local = one in-process worker (world size 1 only); ray = one Ray actor "
        "per device in a placement group (RAY_ADDRESS, or a local Ray started on demand); "
        "auto = local when nnodes * n_gpus_per_node == 1, else ray.",
    )
    logger: list[str] = _f(
        ["console", "jsonl"],
        "Sinks: console, jsonl, tensorboard, wandb, mlflow, http (the platform's ingest API: "
        "RLSTUDIO_INGEST_URL and RLSTUDIO_INGEST_TOKEN from the environment).",
    )
    critic_warmup: int = _f(
        0, "Steps before the actor updates (verl compatibility; no critic here)."
    )
    balance_batch: bool = _f(True, "Reorder trajectories so workers get similar token counts.")
    export_hf: bool = _f(True, "Export the final policy in Hugging Face format.")
    torch_threads: Union[int, None] = _f(
        None, "torch threads per process; None = the cores it has."
    )


@dataclass(frozen=True)
class ReportConfig:
    samples_per_step: int = _f(8, "Trajectories per step emitted as sample events, as whole GRPO groups "
                               "(all n samples of a prompt): as many groups as fit, at least one; -1 = all.")
    token_view: bool = _f(True, "Attach the token view (ids, pieces, masks, log-probs) to samples; its "
                          "log-probs and advantages are rounded to 6 decimals (for reading; the step "
                          "itself uses full precision).")
    memory_interval_s: float = _f(
        0.25, "Seconds between memory samples in each worker (and one at every phase boundary); 0 = "
        "phase boundaries only.")
    heartbeat_interval_s: float = _f(5.0, "Seconds between heartbeat events.")
    val_samples: int = _f(8, "Validation samples emitted per validation, as whole groups (all val_kwargs.n "
                          "samples of a prompt): as many as fit, at least one; -1 = all.")


@dataclass(frozen=True)
class Config:
    data: DataConfig = _section(DataConfig, "Datasets and lengths.")
    actor_rollout_ref: ActorRolloutRefConfig = _section(
        ActorRolloutRefConfig, "Model, rollout, actor, reference."
    )
    algorithm: AlgorithmConfig = _section(AlgorithmConfig, "Advantage estimator and KL in reward.")
    reward: RewardConfig = _section(RewardConfig, "Reward function.")
    custom_reward_function: CustomRewardFunctionConfig = _section(
        CustomRewardFunctionConfig, "Operator-provided reward function file."
    )
    tools: ToolsConfig = _section(ToolsConfig, "Tools offered in multi-turn rollout.")
    trainer: TrainerConfig = _section(TrainerConfig, "Loop, checkpoints, devices, sinks.")
    report: ReportConfig = _section(ReportConfig, "What the run reports as events.")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Config":
        """Build from a nested dict (missing keys take defaults; unknown keys raise ConfigError)."""
        return _build(cls, d or {}, "")

    def to_dict(self) -> dict[str, Any]:
        """The nested plain-JSON form (what the platform stores on a run)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


# ------------------------------------------------------------------------------------ type handling
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "section"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(tp))
    if _is_union(tp):
        return " | ".join("None" if a is type(None) else _type_name(a) for a in typing.get_args(tp))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(tp))}]"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _choices(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    return None


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp`` (ints widen to float); return the stored value."""
    if tp is Any:
        return value
    if _is_union(tp):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(key, f"must not be null (expected {_type_name(tp)})")
        for arg in args:  # the first member type that accepts the value wins
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError:
                continue
        raise ConfigError(key, f"expected {_type_name(tp)}, got {value!r}")
    choices = _choices(tp)
    if choices is not None:
        if value not in choices:
            raise ConfigError(
                key, f"{value!r} is not allowed; allowed values: {', '.join(map(str, choices))}"
            )
        return value
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(
                key, f"expected a list of {_type_name(typing.get_args(tp)[0])}, got {value!r}"
            )
        (item_tp,) = typing.get_args(tp)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected an object, got {value!r}")
        try:
            text = json.dumps(dict(value), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(key, f"expected a JSON object of finite numbers: {exc}") from None
        if "\\u0000" in text:
            raise ConfigError(key, "must not contain NUL characters")
        return json.loads(text)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(key, f"expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        if "\x00" in value:
            raise ConfigError(key, "must not contain NUL characters")
        return value
    raise ConfigError(key, f"unsupported type {tp!r}")  # a bug in this module, not in the spec


def _build(cls: type, d: Mapping[str, Any], prefix: str) -> Any:
    if not isinstance(d, Mapping):
        raise ConfigError(
            prefix.rstrip(".") or "<root>", f"expected an object (section), got {d!r}"
        )
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in d:
        if k not in hints:
            where = prefix or "the top level"
            raise ConfigError(
                f"{prefix}{k}", f"unknown key; known keys of {where}: {', '.join(names)}"
            )
    kwargs: dict[str, Any] = {}
    for name in names:
        if name not in d:
            continue
        tp, key = hints[name], f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, d[name], key + ".")
        else:
            kwargs[name] = _coerce(tp, d[name], key)
    return cls(**kwargs)


# ------------------------------------------------------------------------------------------ overrides
def _field_type(key: str) -> Any:
    """Annotation of a dotted key, or ConfigError naming the key and its section's known keys."""
    cls: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            raise ConfigError(key, f"{'.'.join(parts[:i])} is not a section")
        hints = _hints(cls)
        if part not in hints:
            where = ".".join(parts[:i]) or "the top level"
            known = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ConfigError(key, f"unknown key; known keys of {where}: {known}")
        cls = hints[part]
    return cls


# verl key names that live elsewhere here, accepted in overrides so verl command lines work as typed.
KEY_ALIASES: dict[str, str] = {
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools.config_path",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": "actor_rollout_ref.rollout.multi_turn.max_turns",
}

_NULLS = {"none", "null", "~"}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _split_list(text: str) -> list[str]:
    """'[a, "b"]' / "['a','b']" / 'a,b' -> items (quotes stripped); '' or '[]' -> []."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    return [t[1:-1] if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"" else t for t in items]


def parse_value(tp: Any, text: str, key: str) -> Any:
    """Parse an override string by the field's type (int, float, bool, null, lists, JSON objects)."""
    stripped = text.strip()
    if tp is Any:
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if type(None) in typing.get_args(tp) and stripped.lower() in _NULLS:
            return None
        list_args = [a for a in args if typing.get_origin(a) is list]
        if list_args and stripped.startswith("["):
            return parse_value(list_args[0], stripped, key)
        for arg in args:  # first type that parses wins (int before float, str last in our unions)
            try:
                return _coerce(arg, parse_value(arg, text, key), key)
            except (ConfigError, ValueError):
                continue
        raise ConfigError(key, f"cannot parse {text!r} as {_type_name(tp)}")
    if tp is not str and stripped.lower() in _NULLS:
        raise ConfigError(key, f"must not be null (expected {_type_name(tp)})")
    choices = _choices(tp)
    if choices is not None:
        return stripped
    origin = typing.get_origin(tp)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        try:
            loaded = json.loads(stripped)
            if isinstance(loaded, list):
                return loaded
        except ValueError:
            pass
        return [parse_value(item_tp, item, key) for item in _split_list(stripped)]
    if origin is dict:
        try:
            loaded = json.loads(stripped)
        except ValueError as exc:
            raise ConfigError(key, f"expected a JSON object, got {text!r}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(key, f"expected a JSON object, got {text!r}")
        return loaded
    if tp is bool:
        low = stripped.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(key, f"expected true/false/1/0, got {text!r}")
    if tp is int:
        try:
            return int(stripped)
        except ValueError:
            try:
                as_float = float(stripped)  # "1e3" is a fine way to write 1000
            except ValueError as exc:
                raise ConfigError(key, f"expected an integer, got {text!r}") from exc
            if not as_float.is_integer():
                raise ConfigError(key, f"expected an integer, got {text!r}") from None
            return int(as_float)
    if tp is float:
        try:
            return float(stripped)
        except ValueError as exc:
            raise ConfigError(key, f"expected a number, got {text!r}") from exc
    if tp is str:
        return text
    raise ConfigError(key, f"unsupported type {tp!r}")


def apply_overrides(cfg: Config, overrides: Sequence[str] | Mapping[str, Any]) -> Config:
    """A new Config with dotted-key overrides applied.

    ``overrides`` is a list of ``"a.b.c=value"`` strings (values parsed by the field's type; a leading
    ``+`` as in Hydra is accepted) or a mapping ``{"a.b.c": value}`` (strings parsed, other values
    type-checked). Setting a section key takes a mapping (or a JSON object string).
    """
    pairs: list[tuple[str, Any, bool]] = []
    if isinstance(overrides, Mapping):
        for k in overrides:
            if not isinstance(k, str):
                raise ConfigError(str(k), "an override key must be a dotted string")
        pairs = [(k, v, isinstance(v, str)) for k, v in overrides.items()]
    else:
        for i, item in enumerate(overrides):
            if not isinstance(item, str):
                raise ConfigError(f"overrides[{i}]", f"an override must be a 'key=value' string, got {item!r}")
            if "=" not in item:
                raise ConfigError(item, "an override must look like key=value")
            k, v = item.split("=", 1)
            pairs.append((k.strip().lstrip("+"), v, True))
    pairs = [(KEY_ALIASES.get(k, k), v, t) for k, v, t in pairs]
    d = cfg.to_dict()
    for key, value, is_text in pairs:
        tp = _field_type(key)
        if dataclasses.is_dataclass(tp):
            if is_text:
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise ConfigError(key, "a section takes a JSON object") from exc
            _build(tp, value, key + ".")  # checks unknown keys / types with full dotted names
        elif is_text:
            value = parse_value(tp, value, key)
        *head, last = key.split(".")
        node = d
        for part in head:
            node = node[part]
        if dataclasses.is_dataclass(tp):
            node[last] = {**node[last], **value}
        else:
            node[last] = _coerce(tp, value, key)
    return Config.from_dict(d)


# --------------------------------------------------------------------------------------------- loading
def load_config(path: str | Path) -> Config:
    """Read a run spec: JSON, or YAML (.yaml / .yml) when PyYAML is importable."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in {".yaml", ".yml"}:
        try:
            import yaml  # lazy: optional dependency, and the web side may not need it
        except ImportError as exc:
            raise ConfigError(
                str(path), "YAML specs need PyYAML installed; use JSON instead"
            ) from exc
        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(str(path), f"not valid JSON: {exc}") from exc
    return Config.from_dict(data)


# ------------------------------------------------------------------------------------------ validation
def _check_choices(obj: Any, prefix: str) -> None:
    """Re-check every field's type (a Config built by hand with dataclasses.replace skips _coerce)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            _check_choices(value, key + ".")
        else:
            _coerce(hints[f.name], value, key)


def _positive(key: str, value: Any, *, allow_none: bool = False, minimum: int | float = 1) -> None:
    if value is None and allow_none:
        return
    if value is None or value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value!r}")


def _freq(key: str, value: int) -> None:
    if value != -1 and value < 1:
        raise ConfigError(key, f"must be -1 (off) or a positive number of steps, got {value}")


def validate(cfg: Config, *, require_paths: bool = True) -> Config:
    """Cross-field checks; raise ConfigError naming the key. Returns ``cfg`` for chaining.

    ``require_paths`` demands the data and model paths (a run needs them; a recipe or a saved spec
    being edited may not have them yet).
    """
    _check_choices(cfg, "")
    data, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    rollout, actor, mt = arr.rollout, arr.actor, arr.rollout.multi_turn
    if require_paths:
        if not data.train_files:
            raise ConfigError(
                "data.train_files", "required: a JSONL / Parquet file or a datasets folder"
            )
        if not arr.model.path:
            raise ConfigError(
                "actor_rollout_ref.model.path", "required: a Hugging Face–format model folder"
            )
    _positive("data.max_prompt_length", data.max_prompt_length)
    _positive("data.max_response_length", data.max_response_length)
    _positive("data.train_batch_size", data.train_batch_size)
    _positive("data.val_batch_size", data.val_batch_size, allow_none=True)
    _positive("actor_rollout_ref.rollout.n", rollout.n)
    _positive("actor_rollout_ref.rollout.response_length", rollout.response_length, allow_none=True)
    _positive("actor_rollout_ref.rollout.max_model_len", rollout.max_model_len, allow_none=True)
    if rollout.temperature < 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature", "must be >= 0")
    if rollout.do_sample and rollout.temperature == 0:
        raise ConfigError(
            "actor_rollout_ref.rollout.temperature", "must be > 0 when do_sample is true"
        )
    for prefix, top_p, top_k in (
        ("actor_rollout_ref.rollout", rollout.top_p, rollout.top_k),
        (
            "actor_rollout_ref.rollout.val_kwargs",
            rollout.val_kwargs.top_p,
            rollout.val_kwargs.top_k,
        ),
    ):
        if not 0 < top_p <= 1:
            raise ConfigError(f"{prefix}.top_p", f"must be in (0, 1], got {top_p}")
        if top_k != -1 and top_k < 1:
            raise ConfigError(f"{prefix}.top_k", f"must be -1 (off) or >= 1, got {top_k}")
    _positive("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n)
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError("actor_rollout_ref.rollout.gpu_memory_utilization", "must be in (0, 1]")
    _positive(
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        rollout.log_prob_micro_batch_size_per_gpu,
        allow_none=True,
    )
    _positive("actor_rollout_ref.rollout.multi_turn.max_turns", mt.max_turns, allow_none=True)
    _positive(
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length", mt.max_tool_response_length
    )
    _positive("actor_rollout_ref.rollout.multi_turn.max_parallel_calls", mt.max_parallel_calls)
    if mt.tool_timeout_s <= 0:
        raise ConfigError("actor_rollout_ref.rollout.multi_turn.tool_timeout_s", "must be > 0")
    if cfg.tools.names and not mt.enable:
        raise ConfigError(
            "tools.names",
            "tools are offered only in multi-turn rollout: "
            "set actor_rollout_ref.rollout.multi_turn.enable=true",
        )
    if len(set(cfg.tools.names)) != len(cfg.tools.names):
        raise ConfigError("tools.names", "a tool is listed twice")
    if rollout.name == "sglang" and tr.device == "cpu":
        raise ConfigError(
            "actor_rollout_ref.rollout.name", "sglang needs a GPU; use hf with trainer.device=cpu"
        )

    _positive("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size)
    _positive("actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs)
    if actor.ppo_mini_batch_size > data.train_batch_size:
        raise ConfigError(
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            f"must be <= data.train_batch_size ({data.train_batch_size}), got {actor.ppo_mini_batch_size}",
        )
    if data.train_batch_size % actor.ppo_mini_batch_size:
        raise ConfigError(
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            f"must divide data.train_batch_size ({data.train_batch_size})",
        )
    world = tr.nnodes * tr.n_gpus_per_node
    _positive("trainer.nnodes", tr.nnodes)
    _positive("trainer.n_gpus_per_node", tr.n_gpus_per_node)
    if tr.launcher == "local" and world != 1:
        raise ConfigError(
            "trainer.launcher",
            f"local runs one in-process worker; nnodes * n_gpus_per_node = {world} needs launcher=ray (or auto)",
        )
    if (data.train_batch_size * rollout.n) % world:
        raise ConfigError(
            "data.train_batch_size",
            f"train_batch_size * rollout.n ({data.train_batch_size * rollout.n}) must be "
            f"divisible by the number of workers ({world})",
        )
    per_worker_mini = actor.ppo_mini_batch_size * rollout.n
    if per_worker_mini % world:
        raise ConfigError(
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            f"ppo_mini_batch_size * rollout.n ({per_worker_mini}) must be divisible by the "
            f"number of workers ({world})",
        )
    micro = actor.ppo_micro_batch_size_per_gpu
    _positive("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro, allow_none=True)
    if micro is not None and not actor.use_dynamic_bsz and (per_worker_mini // world) % micro:
        raise ConfigError(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            f"must divide the per-worker mini batch ({per_worker_mini // world} trajectories)",
        )
    _positive("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor.ppo_max_token_len_per_gpu)
    for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        value = getattr(actor, name)
        if value is not None and not 0 <= value < 10:
            raise ConfigError(f"actor_rollout_ref.actor.{name}", f"must be in [0, 10), got {value}")
    if actor.clip_ratio_c <= 1.0:
        raise ConfigError(
            "actor_rollout_ref.actor.clip_ratio_c",
            f"must be > 1.0 (dual clip), got {actor.clip_ratio_c}",
        )
    if actor.grad_clip <= 0:
        raise ConfigError("actor_rollout_ref.actor.grad_clip", "must be > 0")
    for name in ("kl_loss_coef", "entropy_coeff"):
        if getattr(actor, name) < 0:
            raise ConfigError(f"actor_rollout_ref.actor.{name}", "must be >= 0")
    optim = actor.optim
    if optim.lr <= 0:
        raise ConfigError("actor_rollout_ref.actor.optim.lr", "must be > 0")
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        raise ConfigError("actor_rollout_ref.actor.optim.betas", "must be two numbers in [0, 1)")
    if not 0 <= optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError(
            "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", "must be in [0, 1]"
        )
    if not 0 <= optim.min_lr_ratio <= 1:
        raise ConfigError("actor_rollout_ref.actor.optim.min_lr_ratio", "must be in [0, 1]")
    _positive(
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        arr.ref.log_prob_micro_batch_size_per_gpu,
        allow_none=True,
    )

    if alg.kl_ctrl.kl_coef < 0:
        raise ConfigError("algorithm.kl_ctrl.kl_coef", "must be >= 0")
    if alg.kl_ctrl.type == "adaptive":
        _positive("algorithm.kl_ctrl.horizon", alg.kl_ctrl.horizon)
        if alg.kl_ctrl.target_kl <= 0:
            raise ConfigError(
                "algorithm.kl_ctrl.target_kl", "must be > 0 with the adaptive controller"
            )
    if not 0 <= alg.gamma <= 1:
        raise ConfigError("algorithm.gamma", "must be in [0, 1]")

    _positive("trainer.total_epochs", tr.total_epochs)
    _positive("trainer.total_training_steps", tr.total_training_steps, allow_none=True)
    _freq("trainer.save_freq", tr.save_freq)
    _freq("trainer.test_freq", tr.test_freq)
    if tr.resume_mode == "resume_path" and (
        not tr.resume_from_path or "global_step_" not in tr.resume_from_path
    ):
        raise ConfigError(
            "trainer.resume_from_path",
            "resume_mode=resume_path needs a path containing global_step_<N>",
        )
    _positive("trainer.max_actor_ckpt_to_keep", tr.max_actor_ckpt_to_keep, allow_none=True)
    _positive("trainer.torch_threads", tr.torch_threads, allow_none=True)
    allowed_loggers = ("console", "jsonl", "tensorboard", "wandb", "mlflow", "http")
    for item in tr.logger:
        if item not in allowed_loggers:
            raise ConfigError(
                "trainer.logger",
                f"{item!r} is not allowed; allowed values: {', '.join(allowed_loggers)}",
            )
    if tr.critic_warmup < 0:
        raise ConfigError("trainer.critic_warmup", "must be >= 0")
    rep = cfg.report
    if rep.samples_per_step < -1:
        raise ConfigError("report.samples_per_step", "must be -1 (all) or >= 0")
    if rep.val_samples < -1:
        raise ConfigError("report.val_samples", "must be -1 (all) or >= 0")
    for name in ("memory_interval_s", "heartbeat_interval_s"):
        if getattr(rep, name) <= 0:
            raise ConfigError(f"report.{name}", "must be > 0")
    return cfg


def resolve(cfg: Config) -> Config:
    """Fill the derived defaults (response_length, max_model_len, max_turns, clip bounds,
    ref.use_torch_compile).

    Pure config maths; device-dependent choices (dtype auto, device auto, rollout name auto) need torch
    and are left to the loop.
    """
    arr = cfg.actor_rollout_ref
    rollout, mt, actor = arr.rollout, arr.rollout.multi_turn, arr.actor
    response_length = rollout.response_length or cfg.data.max_response_length
    new_mt = dataclasses.replace(mt, max_turns=mt.max_turns or (5 if mt.enable else 1))
    new_rollout = dataclasses.replace(
        rollout,
        response_length=response_length,
        multi_turn=new_mt,
        max_model_len=rollout.max_model_len or cfg.data.max_prompt_length + response_length,
    )
    new_actor = dataclasses.replace(
        actor,
        clip_ratio_low=actor.clip_ratio if actor.clip_ratio_low is None else actor.clip_ratio_low,
        clip_ratio_high=actor.clip_ratio
        if actor.clip_ratio_high is None
        else actor.clip_ratio_high,
    )
    new_ref = dataclasses.replace(
        arr.ref,
        use_torch_compile=actor.use_torch_compile
        if arr.ref.use_torch_compile is None
        else arr.ref.use_torch_compile,
    )
    return dataclasses.replace(
        cfg,
        actor_rollout_ref=dataclasses.replace(
            arr, rollout=new_rollout, actor=new_actor, ref=new_ref
        ),
    )


# --------------------------------------------------------------------------------------- reference doc
def describe_config() -> list[tuple[str, str, Any, str]]:
    """Every leaf field as (dotted key, type, default, help), in declaration order."""
    rows: list[tuple[str, str, Any, str]] = []
    default = Config()

    def walk(obj: Any, prefix: str) -> None:
        hints = _hints(type(obj))
        for f in dataclasses.fields(obj):
            value, tp = getattr(obj, f.name), hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(value, f"{prefix}{f.name}.")
            else:
                rows.append(
                    (f"{prefix}{f.name}", _type_name(tp), value, f.metadata.get("help", ""))
                )

    walk(default, "")
    return rows


def describe_sections() -> list[tuple[str, str]]:
    """Every section as (dotted key, help)."""
    out: list[tuple[str, str]] = []

    def walk(cls: type, prefix: str) -> None:
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                out.append((f"{prefix}{f.name}", f.metadata.get("help", "")))
                walk(hints[f.name], f"{prefix}{f.name}.")

    walk(Config, "")
    return out


def config_markdown() -> str:
    """The config reference page (docs/config-reference.md), generated from the dataclasses."""
    section_help = dict(describe_sections())
    lines = [
        "# Trainer config reference",
        "",
        "Generated by `python -m trainer.config --markdown > docs/config-reference.md` from",
        "`trainer/config.py`; do not edit by hand (a test checks it is up to date).",
        "Override any key on the command line in verl's dotted form, e.g.",
        "`python -m trainer run spec.json actor_rollout_ref.rollout.n=8 trainer.logger=[console,jsonl]`.",
    ]
    current = None
    for key, tp, default, help_ in describe_config():
        section = key.rsplit(".", 1)[0]
        if section != current:
            current = section
            lines += ["", f"## `{section}`", ""]
            if section_help.get(section):
                lines += [section_help[section], ""]
            lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        shown = json.dumps(default)
        lines.append(
            f"| `{key}` | {tp.replace('|', '&#124;')} | `{shown}` | {help_.replace('|', '&#124;')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.config --markdown`` (reference doc) or ``--defaults`` (default spec JSON)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--markdown"]:
        sys.stdout.write(config_markdown())
        return 0
    if argv == ["--defaults"]:
        print(json.dumps(Config().to_dict(), indent=2))
        return 0
    print("usage: python -m trainer.config --markdown | --defaults", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
