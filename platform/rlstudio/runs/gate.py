"""The config gate: which trainer keys a user may set (with their bounds), and which only the platform sets.

A run's trainer config reaches the platform in many ways (the new-run form's preset, fields, YAML and
overrides; the API's `config`, `config_id` and `overrides`; clone overrides; a saved config). All of
them are checked here, by one rule:

- A key a user changed (its value differs from what it started from: the preset, or the schema's
  default for a whole config) must be in `USER_KEYS`, and its value inside that key's `Bound`.
- Every other key (anything naming a server path, an address, code or resources) is written by the
  platform from catalog objects and the run's own record (`platform_values`); a user who sets one gets
  a `GateRefused` naming the key and saying who sets it.

The allow-list is explicit: a key added to `trainer.config` later is refused for users until it is
listed here (a test walks every key of the schema). `user_view` turns a stored config (a saved config,
a run's frozen spec) back into what its user owns: the platform's keys reset to the schema defaults,
so that nothing the platform once wrote is ever read back as input.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from trainer.config import Config

from .shapes import ShapeUnknown, StepShapes

GIB = 2**30  # the "GB" of RLSTUDIO_RUN_DISK_BUDGET_GB (trainer.disk_budget_gb)


class GateRefused(ValueError):
    """A config key a user may not set, or a value outside its bounds; `key` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class Bound:
    """What a user-settable key accepts beyond its schema type.

    lo / hi bound numbers (and every number of a list); `choices` the strings (or list items) allowed;
    `pattern` a regular expression a string must match in full (`pattern_text` says in words what it
    allows; the default is a name's); `max_items` the length of a list; `max_json_bytes` the encoded
    size of an object.
    """

    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    pattern: str | None = None
    max_items: int | None = None
    max_json_bytes: int | None = None
    pattern_text: str | None = None


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


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} over the config's sections (leaf objects such as reward_kwargs
    stay whole: `sections` says where the schema's sections are)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and key in _SECTIONS:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _sections() -> frozenset[str]:
    from trainer.config import describe_sections

    return frozenset(key for key, _help in describe_sections())


_SECTIONS = _sections()
_DEFAULTS = flatten(Config().to_dict())


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *head, last = key.split(".")
        node = out
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The leaf keys whose value differs between two flattened configs, in schema order."""
    return [k for k in after if before.get(k, _DEFAULTS.get(k)) != after[k]]


def _refuse_key(key: str) -> GateRefused:
    if key in PLATFORM_KEYS:
        return GateRefused(key, f"set by the platform from {PLATFORM_KEYS[key]}; users cannot set it")
    return GateRefused(key, "not a key users may set (docs/security.md lists the ones they may)")


def _check_number(key: str, value: Any, bound: Bound) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise GateRefused(key, f"must be a finite number, got {value!r}")
    if bound.lo is not None and value < bound.lo:
        raise GateRefused(key, f"must be >= {bound.lo:g}, got {value!r}")
    if bound.hi is not None and value > bound.hi:
        raise GateRefused(key, f"must be <= {bound.hi:g}, got {value!r}")


def _check_string(key: str, value: str, bound: Bound) -> None:
    if "\x00" in value:
        raise GateRefused(key, "must not contain NUL characters")
    if bound.choices is not None and value not in bound.choices:
        raise GateRefused(key, f"{value!r} is not allowed; allowed values: {', '.join(bound.choices)}")
    if bound.pattern is not None and not re.fullmatch(bound.pattern, value):
        if bound.pattern_text:
            raise GateRefused(key, f"{value!r} is not allowed: {bound.pattern_text}")
        raise GateRefused(key, f"{value!r} is not allowed: letters, digits, '.', '_' and '-' only "
                               "(no path separators), at most 64 characters")


def _check_json(key: str, value: Any, bound: Bound, depth: int = 0) -> None:
    """Objects and lists inside a value: finite numbers, strings without NUL, bounded depth."""
    if depth > 8:
        raise GateRefused(key, "nested too deeply")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str) or "\x00" in k:
                raise GateRefused(key, f"keys must be strings without NUL characters, got {k!r}")
            _check_json(f"{key}.{k}", v, bound, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(f"{key}[{i}]", v, bound, depth + 1)
    elif isinstance(value, str):
        if "\x00" in value:
            raise GateRefused(key, "must not contain NUL characters")
    elif value is not None:
        _check_number(key, value, Bound(lo=bound.lo, hi=bound.hi))


def check_value(key: str, value: Any, bound: Bound) -> None:
    """One user-settable value against its bound."""
    if isinstance(value, str):
        _check_string(key, value, bound)
    elif isinstance(value, (list, tuple)):
        if bound.max_items is not None and len(value) > bound.max_items:
            raise GateRefused(key, f"at most {bound.max_items} items, got {len(value)}")
        for i, item in enumerate(value):
            if isinstance(item, str):
                _check_string(f"{key}[{i}]", item, bound)
            else:
                _check_number(f"{key}[{i}]", item, bound)
    elif isinstance(value, Mapping):
        _check_json(key, value, bound)
        size = len(json.dumps(value, allow_nan=False))
        if bound.max_json_bytes is not None and size > bound.max_json_bytes:
            raise GateRefused(key, f"at most {bound.max_json_bytes} bytes as JSON, got {size}")
    else:
        _check_number(key, value, bound)


def check(
    *,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    reward_names: Iterable[str],
    tool_names: Iterable[str],
    trackers: Mapping[str, str | None] | None = None,
) -> None:
    """Refuse what a user changed from `before` to `after` unless it is theirs to set, within bounds.

    `reward_names` are the reward functions a user may pick (the trainer's built-ins and the operator's
    registered ones); `tool_names` the trainer's registered tools; `trackers` why each of
    TRACKER_LOGGERS may not be listed (None: it may; none given: none may).
    """
    rewards, tools = set(reward_names), set(tool_names)
    flat = flatten(after)
    for key in changed_keys(flatten(before), flat):
        bound = USER_KEYS.get(key)
        if bound is None:
            raise _refuse_key(key)
        check_value(key, flat[key], bound)
        if key == "reward.name" and flat[key] not in rewards:
            raise GateRefused(key, f"{flat[key]!r} is not a reward function; one of: {', '.join(sorted(rewards))}")
        if key == "tools.names":
            for name in flat[key]:
                if name not in tools:
                    raise GateRefused(key, f"{name!r} is not a registered tool; one of: {', '.join(sorted(tools))}")
        if key == "trainer.logger":
            check_trackers(after, trackers)


def check_trackers(config: Mapping[str, Any], trackers: Mapping[str, str | None] | None) -> None:
    """GateRefused on trainer.logger[i] when `config` lists a tracker (TRACKER_LOGGERS) that `trackers` gives a
    reason against (runs.trackers.refusal: the operator has not enabled it, or its package is missing);
    a tracker `trackers` does not name is refused as not enabled."""
    loggers = flatten(config).get("trainer.logger")
    for i, name in enumerate(loggers if isinstance(loggers, list) else ()):
        if name in TRACKER_LOGGERS:
            reason = (trackers or {}).get(name, f"{name!r} is not enabled on this platform")
            if reason:
                raise GateRefused(f"trainer.logger[{i}]", reason)


def check_bounds(config: Mapping[str, Any]) -> None:
    """Every user-settable value of a whole config inside its bound (a stored config read back)."""
    flat = flatten(config)
    for key, bound in USER_KEYS.items():
        if key in flat:
            check_value(key, flat[key], bound)


@dataclass(frozen=True)
class StepLimits:
    """The operator's bounds on one training step as a whole (settings RLSTUDIO_MAX_TRAJECTORIES_PER_STEP,
    RLSTUDIO_MAX_TOKENS_PER_STEP, RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP): each key within its own
    bound can still multiply into a step no machine finishes, or a flood of sample events. The step's
    and a validation batch's trajectories, tokens and reported samples are `shapes.StepShapes`'."""

    trajectories: int
    """Trajectories of a step's largest batch, and of one validation batch, at most."""
    tokens: int
    """Their tokens (prompt + response length each) at most."""
    reported_samples: int
    """Samples a step, or a validation, reports at most."""


def _int_of(flat: Mapping[str, Any], key: str) -> int | None:
    value = flat.get(key, _DEFAULTS.get(key))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_step_size(config: Mapping[str, Any], limits: StepLimits) -> None:
    """Refuse a config whose one step is larger than the operator allows (GateRefused naming the key
    to lower; the message gives the product and the limit). Cross-key: run on the whole config after
    each key passed its own bound and the trainer's schema."""
    try:
        s = StepShapes.of(config)
    except ShapeUnknown:
        return  # the schema's check names a missing or mistyped key
    key = s.prompts_key
    if s.trajectories > limits.trajectories:
        raise GateRefused(key, f"{key} x actor_rollout_ref.rollout.n = {s.prompts} x {s.n} = {s.trajectories:,} "
                               f"trajectories per step, more than this platform's {limits.trajectories:,} "
                               f"(RLSTUDIO_MAX_TRAJECTORIES_PER_STEP); lower either")
    if s.tokens > limits.tokens:
        raise GateRefused(s.response_key, f"{s.trajectories:,} trajectories x (data.max_prompt_length + "
                                          f"{s.response_key} = {s.prompt_length} + {s.response_length}) = "
                                          f"{s.tokens:,} tokens per step, more than this platform's "
                                          f"{limits.tokens:,} (RLSTUDIO_MAX_TOKENS_PER_STEP); lower the lengths, "
                                          f"{key} or actor_rollout_ref.rollout.n")
    budget = _int_of(flatten(config), "report.samples_per_step")
    if budget:
        _check_reported("report.samples_per_step", budget, s.step_reported(budget), limits, per="step",
                        group=f"actor_rollout_ref.rollout.n = {s.n}")


def _check_reported(key: str, budget: int, reported: int, limits: StepLimits, *, per: str, group: str) -> None:
    """Refuse `key` (a report budget, -1 = all) when it reports more samples than the operator allows."""
    if reported > limits.reported_samples:
        said = "-1 (all)" if budget < 0 else str(budget)
        raise GateRefused(key, f"{said} reports {reported:,} samples per {per}, more than this platform's "
                               f"{limits.reported_samples:,} (RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP); give a "
                               f"number of samples up to that (whole groups of {group} are reported)")


def check_validation_size(config: Mapping[str, Any], limits: StepLimits, val_rows: int | None) -> None:
    """Refuse a config whose validation is larger than the operator allows one step to be (GateRefused
    naming the key to lower): one validation batch's trajectories and tokens, and the samples
    report.val_samples reports of the whole set (`shapes.StepShapes`). Without a validation set there
    is no validation; with `val_rows` unknown only a given data.val_batch_size is checked."""
    try:
        s = StepShapes.of(config, val_rows)
    except ShapeUnknown:
        return
    if not s.validates or s.val_n is None:
        return
    key, trajectories = "data.val_batch_size", s.val_trajectories
    if trajectories is not None:
        said = (f"data.val_batch_size = {s.val_batch_size}" if s.val_batch_size is not None
                else f"the validation set's {s.val_rows:,} rows")
        if trajectories > limits.trajectories:
            raise GateRefused(key, f"a validation batch of {said} x actor_rollout_ref.rollout.val_kwargs.n = "
                                   f"{s.val_prompts:,} x {s.val_n} = {trajectories:,} trajectories, more than this "
                                   f"platform's {limits.trajectories:,} per step (RLSTUDIO_MAX_TRAJECTORIES_PER_STEP); "
                                   f"set data.val_batch_size lower, or lower val_kwargs.n")
        if s.val_tokens > limits.tokens:
            raise GateRefused(key, f"a validation batch of {trajectories:,} trajectories x {s.sequence_length} tokens "
                                   f"(prompt + response length) = {s.val_tokens:,} tokens, more than this "
                                   f"platform's {limits.tokens:,} per step (RLSTUDIO_MAX_TOKENS_PER_STEP); set "
                                   f"data.val_batch_size lower")
    budget = _int_of(flatten(config), "report.val_samples")
    reported = s.val_reported(budget) if budget else None
    if reported is not None:
        _check_reported("report.val_samples", budget, reported, limits, per="validation",
                        group=f"val_kwargs.n = {s.val_n}")


def check_train_size(config: Mapping[str, Any], train_rows: int | None) -> None:
    """Refuse a config whose loader batch (`shapes.StepShapes.draw_prompts`: data.train_batch_size, or
    data.gen_batch_size with dynamic sampling) is larger than the training set's `train_rows` (None:
    unknown, nothing refused): the trainer draws whole batches without repeats and would stop at once
    ("fewer than one batch"). The catalog's row count is an upper bound of the prompts the trainer
    uses (data.filter_overlong_prompts can drop more), so a set that passes here may still be short."""
    if train_rows is None:
        return
    try:
        s = StepShapes.of(config)
    except ShapeUnknown:
        return
    if s.draw_prompts > train_rows:
        key, n = s.draw_key, s.draw_prompts
        raise GateRefused(key, f"{key} = {n} prompts, more than the training dataset's {train_rows:,} rows: the "
                               f"trainer draws whole batches of {n} prompts from it, so not one batch fits; set "
                               f"{key} to at most {train_rows:,}, or train on a larger dataset")


def check_checkpoints_kept(config: Mapping[str, Any], cap: int | None) -> None:
    """Refuse trainer.max_actor_ckpt_to_keep above the operator's cap on checkpoints kept per run
    (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN; None: no cap). Unset, the trainer keeps the cap's number."""
    keep = _int_of(flatten(config), "trainer.max_actor_ckpt_to_keep")
    if cap is not None and keep is not None and keep > cap:
        raise GateRefused("trainer.max_actor_ckpt_to_keep",
                          f"{keep} checkpoints kept, more than this platform's {cap} per run "
                          f"(RLSTUDIO_MAX_CHECKPOINTS_PER_RUN); give at most {cap}, or leave it unset to keep "
                          f"the newest {cap}")


def check_checkpoint_size(config: Mapping[str, Any], estimate: Any, budget_gb: float | None, *,
                          resume: bool = False) -> None:
    """Refuse a run one checkpoint of which is over the operator's disk budget per run
    (RLSTUDIO_RUN_DISK_BUDGET_GB; None: no budget): `estimate` is its
    `checkpoint_estimate.CheckpointEstimate` (None: unknown, nothing refused). Every run checkpoints
    at its last step (and when stopped) whatever trainer.save_freq says, so such a run would write a
    checkpoint over the budget after all its training. GateRefused names the key that shrinks it: the
    critic's (algorithm.adv_estimator) when the actor's part alone would fit, else LoRA's. A `resume`
    sets no key (it continues the run's own config): its refusal is on `run`, saying the run cannot
    resume until an admin raises the budget, and that a clone with the key changed is the way out."""
    if estimate is None or budget_gb is None or estimate.bytes <= budget_gb * GIB:
        return
    # What shrinks it: (the key, what a new run should do, what a clone of a resumed run should change).
    if estimate.critic_bytes and estimate.actor_bytes <= budget_gb * GIB:
        key, fix, clone = ("algorithm.adv_estimator",
                           f": the critic of gae ({estimate.critic_bytes / GIB:.2f} GB, float32 weights and AdamW's "
                           "moments) is what does not fit; use an estimator without a critic (e.g. grpo), or a "
                           "smaller model",
                           "an estimator without a critic (algorithm.adv_estimator, e.g. grpo) fits instead")
    elif estimate.lora:
        key, fix, clone = ("actor_rollout_ref.model.lora_rank", ": lower the LoRA rank, or choose a smaller model",
                           "a lower LoRA rank (actor_rollout_ref.model.lora_rank) writes a smaller checkpoint "
                           "(the new-run form's preview says whether it fits)")
    else:
        key, fix, clone = ("actor_rollout_ref.model.lora_rank",
                           " (float32 weights and AdamW's two moments, 12 bytes a parameter): train with LoRA "
                           "(actor_rollout_ref.model.lora_rank > 0: a checkpoint then holds the adapter alone), or "
                           "choose a smaller model",
                           "LoRA (actor_rollout_ref.model.lora_rank > 0: a checkpoint then holds the adapter alone) "
                           "writes a smaller checkpoint (the new-run form's preview says whether it fits)")
    if resume:
        raise GateRefused("run", f"one checkpoint of this run is about {estimate.bytes / GIB:.2f} GB, over this "
                                 f"deployment's per-run disk budget of {budget_gb:g} GB, so it cannot resume until an "
                                 f"admin raises RLSTUDIO_RUN_DISK_BUDGET_GB; a clone of it with {clone}")
    raise GateRefused(key, f"one checkpoint of this model is about {estimate.bytes / GIB:.2f} GB, over this "
                           f"deployment's per-run disk budget of {budget_gb:g} GB (RLSTUDIO_RUN_DISK_BUDGET_GB); a "
                           f"run always checkpoints its last step, whatever trainer.save_freq says{fix}")


def user_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config with every platform key reset to the schema default: what its user owns."""
    flat = flatten(config)
    for key in PLATFORM_KEYS:
        if key in flat:
            flat[key] = _DEFAULTS[key]
    if isinstance(flat.get("trainer.logger"), list):  # the sinks the platform added at submit (http)
        flat["trainer.logger"] = [name for name in flat["trainer.logger"] if name in USER_LOGGERS + TRACKER_LOGGERS]
    return unflatten(flat)


def unlisted_keys() -> list[str]:
    """Keys of the schema that are on neither list (a test keeps this empty)."""
    return [k for k in _DEFAULTS if k not in USER_KEYS and k not in PLATFORM_KEYS]


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
