"""The checks a config must pass to run (``validate``) and the defaults derived from others
(``resolve``).

``validate`` re-checks every field's type, demands the data and model paths when asked, then runs one
check per part of the spec in a fixed order (data, rollout, multi-turn and tools, batch layout over the
workers, actor, algorithm, trainer, report); the first failure raises ``ConfigError`` naming the key.
``config_warnings`` lists what passes but probably is not meant (GRPO with rollout.n=1 has no
baseline); it never refuses a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .actor_rollout_ref import ActorConfig, ActorRolloutRefConfig, RolloutConfig
from .critic import check_critic
from .fields import ConfigError, coerce, hints, shown
from .lora import check_lora, lora_warnings
from .reward_model import check_reward_model
from .rollout_correction import check_rollout_correction, rollout_correction_warnings
from .schema import LOGGERS, AlgorithmConfig, Config, DataConfig, ReportConfig, TrainerConfig

ROLLOUT = "actor_rollout_ref.rollout"
ACTOR = "actor_rollout_ref.actor"


def _check_choices(obj: Any, prefix: str) -> None:
    """Re-check every field's type (a Config built by hand with dataclasses.replace skips coerce)."""
    annotations = hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(annotations[f.name]):
            _check_choices(value, key + ".")
        else:
            coerce(annotations[f.name], value, key)


def _positive(key: str, value: Any, *, allow_none: bool = False, minimum: int | float = 1) -> None:
    if value is None and allow_none:
        return
    if value is None or value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {shown(value)}")


def _freq(key: str, value: int) -> None:
    if value != -1 and value < 1:
        raise ConfigError(key, f"must be -1 (off) or a positive number of steps, got {value}")


def _check_paths(cfg: Config) -> None:
    if not cfg.data.train_files:
        raise ConfigError(
            "data.train_files", "required: a JSONL / Parquet file or a datasets folder"
        )
    if not cfg.actor_rollout_ref.model.path:
        raise ConfigError(
            "actor_rollout_ref.model.path", "required: a Hugging Face–format model folder"
        )


def _check_data(data: DataConfig) -> None:
    _positive("data.max_prompt_length", data.max_prompt_length)
    _positive("data.max_response_length", data.max_response_length)
    _positive("data.train_batch_size", data.train_batch_size)
    _positive("data.val_batch_size", data.val_batch_size, allow_none=True)
    _positive("data.gen_batch_size", data.gen_batch_size, allow_none=True)
    from trainer.chat.deltas import template_kwargs_errors

    errors = template_kwargs_errors(data.apply_chat_template_kwargs)
    if errors:
        raise ConfigError("data.apply_chat_template_kwargs", "; ".join(errors))


def _check_rollout(rollout: RolloutConfig) -> None:
    """Sampling (training and validation) and the engine's memory."""
    _positive(f"{ROLLOUT}.n", rollout.n)
    _positive(f"{ROLLOUT}.response_length", rollout.response_length, allow_none=True)
    _positive(f"{ROLLOUT}.max_model_len", rollout.max_model_len, allow_none=True)
    # None: filled at run time from the model's generation_config.json (trainer.models.hf_folder).
    if rollout.temperature is not None and rollout.temperature < 0:
        raise ConfigError(f"{ROLLOUT}.temperature", "must be >= 0")
    if rollout.do_sample and rollout.temperature == 0:
        raise ConfigError(f"{ROLLOUT}.temperature", "must be > 0 when do_sample is true")
    val = rollout.val_kwargs
    for prefix, top_p, top_k in (
        (ROLLOUT, rollout.top_p, rollout.top_k),
        (f"{ROLLOUT}.val_kwargs", val.top_p, val.top_k),
    ):
        if top_p is not None and not 0 < top_p <= 1:
            raise ConfigError(f"{prefix}.top_p", f"must be in (0, 1], got {top_p}")
        if top_k is not None and top_k != -1 and top_k < 1:
            raise ConfigError(f"{prefix}.top_k", f"must be -1 (off) or >= 1, got {top_k}")
    _positive(f"{ROLLOUT}.val_kwargs.n", val.n)
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError(f"{ROLLOUT}.gpu_memory_utilization", "must be in (0, 1]")
    _positive(
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
        rollout.log_prob_micro_batch_size_per_gpu,
        allow_none=True,
    )


def _check_multi_turn(cfg: Config) -> None:
    """Multi-turn rollout and the tools it offers; then whether the engine runs on the device."""
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    _positive(f"{ROLLOUT}.multi_turn.max_turns", mt.max_turns, allow_none=True)
    _positive(f"{ROLLOUT}.multi_turn.max_tool_response_length", mt.max_tool_response_length)
    _positive(f"{ROLLOUT}.multi_turn.max_parallel_calls", mt.max_parallel_calls)
    if mt.tool_timeout_s <= 0:
        raise ConfigError(f"{ROLLOUT}.multi_turn.tool_timeout_s", "must be > 0")
    if mt.interaction_timeout_s <= 0:
        raise ConfigError(f"{ROLLOUT}.multi_turn.interaction_timeout_s", "must be > 0")
    _positive(f"{ROLLOUT}.multi_turn.max_user_turns", mt.max_user_turns, allow_none=True)
    if mt.interaction is not None:
        from trainer.interactions import registered_interactions

        if mt.interaction not in registered_interactions():
            raise ConfigError(f"{ROLLOUT}.multi_turn.interaction",
                              f"no interaction named {mt.interaction!r}; registered: "
                              f"{', '.join(registered_interactions())}")
        if not mt.enable:
            raise ConfigError(f"{ROLLOUT}.multi_turn.interaction",
                              f"an interaction talks in multi-turn rollout only: set {ROLLOUT}.multi_turn.enable=true")
    names = cfg.tools.names
    if names and not mt.enable:
        raise ConfigError(
            "tools.names",
            f"tools are offered only in multi-turn rollout: set {ROLLOUT}.multi_turn.enable=true",
        )
    if len(set(names)) != len(names):
        raise ConfigError("tools.names", "a tool is listed twice")
    engine = cfg.actor_rollout_ref.rollout.name
    if engine in ("sglang", "vllm") and cfg.trainer.device == "cpu":
        raise ConfigError(f"{ROLLOUT}.name", f"{engine} needs a GPU; use hf with trainer.device=cpu")


def _check_batches(cfg: Config) -> None:
    """Mini and micro batches against the data batch and the number of workers."""
    data, actor, tr = cfg.data, cfg.actor_rollout_ref.actor, cfg.trainer
    n = cfg.actor_rollout_ref.rollout.n
    mini = actor.ppo_mini_batch_size
    _positive(f"{ACTOR}.ppo_mini_batch_size", mini)
    _positive(f"{ACTOR}.ppo_epochs", actor.ppo_epochs)
    if mini > data.train_batch_size:
        raise ConfigError(
            f"{ACTOR}.ppo_mini_batch_size",
            f"must be <= data.train_batch_size ({data.train_batch_size}), got {mini}",
        )
    if data.train_batch_size % mini:
        raise ConfigError(
            f"{ACTOR}.ppo_mini_batch_size",
            f"must divide data.train_batch_size ({data.train_batch_size})",
        )
    world = tr.nnodes * tr.n_gpus_per_node
    _positive("trainer.nnodes", tr.nnodes)
    _positive("trainer.n_gpus_per_node", tr.n_gpus_per_node)
    if tr.launcher == "local" and world != 1:
        raise ConfigError(
            "trainer.launcher",
            f"local runs one in-process worker; nnodes * n_gpus_per_node = {world} needs "
            "launcher=ray (or auto)",
        )
    if (data.train_batch_size * n) % world:
        raise ConfigError(
            "data.train_batch_size",
            f"train_batch_size * rollout.n ({data.train_batch_size * n}) must be "
            f"divisible by the number of workers ({world})",
        )
    if (mini * n) % world:
        raise ConfigError(
            f"{ACTOR}.ppo_mini_batch_size",
            f"ppo_mini_batch_size * rollout.n ({mini * n}) must be divisible by the "
            f"number of workers ({world})",
        )
    micro = actor.ppo_micro_batch_size_per_gpu
    _positive(f"{ACTOR}.ppo_micro_batch_size_per_gpu", micro, allow_none=True)
    if micro is not None and not actor.use_dynamic_bsz and (mini * n // world) % micro:
        raise ConfigError(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu",
            f"must divide the per-worker mini batch ({mini * n // world} trajectories)",
        )
    _positive(f"{ACTOR}.ppo_max_token_len_per_gpu", actor.ppo_max_token_len_per_gpu)


def _check_actor(arr: ActorRolloutRefConfig) -> None:
    """The policy loss, the optimizer and the reference forward."""
    actor, optim = arr.actor, arr.actor.optim
    for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        value = getattr(actor, name)
        if value is not None and not 0 <= value < 10:
            raise ConfigError(f"{ACTOR}.{name}", f"must be in [0, 10), got {value}")
    if actor.clip_ratio_c <= 1.0:
        raise ConfigError(
            f"{ACTOR}.clip_ratio_c", f"must be > 1.0 (dual clip), got {actor.clip_ratio_c}"
        )
    if actor.grad_clip <= 0:
        raise ConfigError(f"{ACTOR}.grad_clip", "must be > 0")
    pl = actor.policy_loss
    for name in ("clip_cov_ratio", "kl_cov_ratio"):
        if not 0 < getattr(pl, name) <= 1:
            raise ConfigError(f"{ACTOR}.policy_loss.{name}", f"must be in (0, 1], got {getattr(pl, name)}")
    if pl.clip_cov_lb >= pl.clip_cov_ub:
        raise ConfigError(f"{ACTOR}.policy_loss.clip_cov_ub", f"must be > clip_cov_lb ({pl.clip_cov_lb})")
    if pl.ppo_kl_coef < 0:
        raise ConfigError(f"{ACTOR}.policy_loss.ppo_kl_coef", "must be >= 0")
    for name in ("tau_pos", "tau_neg"):  # sapo's gate divides by them
        if not 0 < getattr(actor, name) <= 100:
            raise ConfigError(f"{ACTOR}.{name}", f"must be in (0, 100], got {getattr(actor, name)}")
    _positive(f"{ACTOR}.loss_scale_factor", actor.loss_scale_factor, allow_none=True)
    for name in ("kl_loss_coef", "entropy_coeff"):
        if getattr(actor, name) < 0:
            raise ConfigError(f"{ACTOR}.{name}", "must be >= 0")
    if optim.lr <= 0:
        raise ConfigError(f"{ACTOR}.optim.lr", "must be > 0")
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        raise ConfigError(f"{ACTOR}.optim.betas", "must be two numbers in [0, 1)")
    if not 0 <= optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError(f"{ACTOR}.optim.lr_warmup_steps_ratio", "must be in [0, 1]")
    if not 0 <= optim.min_lr_ratio <= 1:
        raise ConfigError(f"{ACTOR}.optim.min_lr_ratio", "must be in [0, 1]")
    _positive(
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        arr.ref.log_prob_micro_batch_size_per_gpu,
        allow_none=True,
    )


def _check_algorithm(alg: AlgorithmConfig, n: int) -> None:
    if alg.adv_estimator == "grpo_passk" and n < 2:
        raise ConfigError(f"{ROLLOUT}.n", f"algorithm.adv_estimator=grpo_passk compares the samples of "
                          f"a prompt: needs rollout.n >= 2, got {n}")
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
    if not 0 <= alg.lam <= 1:
        raise ConfigError("algorithm.lam", "must be in [0, 1]")


def _check_dapo(cfg: Config) -> None:
    """Dynamic sampling (algorithm.filter_groups) and overlong reward shaping (reward_model)."""
    fg, data = cfg.algorithm.filter_groups, cfg.data
    if fg.enable and fg.metric is None:
        raise ConfigError("algorithm.filter_groups.metric",
                          "required with filter_groups.enable: acc, score, seq_reward or seq_final_reward")
    if fg.enable and fg.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        # The KL penalty needs the old and reference log-probs of every generated sample, dropped
        # groups included; the filter runs right after the reward, before those passes.
        raise ConfigError("algorithm.filter_groups.metric",
                          "seq_final_reward with algorithm.use_kl_in_reward is not supported "
                          "(filter on seq_reward)")
    gen = data.gen_batch_size or data.train_batch_size
    if fg.enable and fg.max_num_gen_batches > 0 and gen * fg.max_num_gen_batches < data.train_batch_size:
        raise ConfigError("algorithm.filter_groups.max_num_gen_batches",
                          f"{fg.max_num_gen_batches} batches of data.gen_batch_size={gen} prompts cannot "
                          f"fill data.train_batch_size={data.train_batch_size}")
    ob = cfg.reward_model.overlong_buffer
    if ob.enable:
        key = "reward_model.overlong_buffer"
        limit = cfg.actor_rollout_ref.rollout.response_length or data.max_response_length
        if not 1 <= ob.len <= limit:
            raise ConfigError(f"{key}.len", f"must be in [1, the response length {limit}] when enabled, "
                              f"got {ob.len}")
        if ob.penalty_factor < 0:
            raise ConfigError(f"{key}.penalty_factor", f"must be >= 0, got {ob.penalty_factor}")


def _check_trainer(tr: TrainerConfig) -> None:
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
    if tr.resume_fork and tr.resume_mode != "resume_path":
        raise ConfigError("trainer.resume_fork", "a fork starts from one checkpoint: it needs "
                                                 "resume_mode=resume_path and resume_from_path")
    _positive("trainer.max_actor_ckpt_to_keep", tr.max_actor_ckpt_to_keep, allow_none=True)
    _positive("trainer.torch_threads", tr.torch_threads, allow_none=True)
    _positive("trainer.max_ckpt_to_keep_cap", tr.max_ckpt_to_keep_cap, allow_none=True)
    if tr.disk_budget_gb is not None and not tr.disk_budget_gb > 0:
        raise ConfigError("trainer.disk_budget_gb", f"must be > 0 (null: no budget), got {shown(tr.disk_budget_gb)}")
    for item in tr.logger:
        if item not in LOGGERS:
            raise ConfigError(
                "trainer.logger",
                f"{shown(item)} is not allowed; allowed values: {', '.join(LOGGERS)}",
            )
    if tr.critic_warmup < 0:
        raise ConfigError("trainer.critic_warmup", "must be >= 0")


def _check_report(rep: ReportConfig) -> None:
    if rep.samples_per_step < -1:
        raise ConfigError("report.samples_per_step", "must be -1 (all) or >= 0")
    if rep.val_samples < -1:
        raise ConfigError("report.val_samples", "must be -1 (all) or >= 0")
    for name in ("memory_interval_s", "heartbeat_interval_s"):
        if getattr(rep, name) <= 0:
            raise ConfigError(f"report.{name}", "must be > 0")


def validate(cfg: Config, *, require_paths: bool = True) -> Config:
    """Cross-field checks; raise ConfigError naming the key. Returns ``cfg`` for chaining.

    ``require_paths`` demands the data and model paths (a run needs them; a recipe or a saved spec
    being edited may not have them yet).
    """
    for check in _parts(cfg, require_paths=require_paths):
        check()
    return cfg


def _parts(cfg: Config, *, require_paths: bool) -> list:
    """validate's checks in order, one per part of the spec, each a thunk that raises ConfigError."""
    parts = [lambda: _check_choices(cfg, "")]
    if require_paths:
        parts.append(lambda: _check_paths(cfg))
    return parts + [
        lambda: _check_data(cfg.data),
        lambda: check_lora(cfg.actor_rollout_ref.model),
        lambda: _check_rollout(cfg.actor_rollout_ref.rollout),
        lambda: _check_multi_turn(cfg),
        lambda: _check_batches(cfg),
        lambda: _check_actor(cfg.actor_rollout_ref),
        lambda: _check_algorithm(cfg.algorithm, cfg.actor_rollout_ref.rollout.n),
        lambda: check_critic(cfg.critic, train_batch_size=cfg.data.train_batch_size,
                             n=cfg.actor_rollout_ref.rollout.n, world=cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node,
                             actor_mini=cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
        lambda: _check_dapo(cfg),
        lambda: check_reward_model(cfg.reward_model),
        lambda: check_rollout_correction(cfg.algorithm.rollout_correction),
        lambda: _check_trainer(cfg.trainer),
        lambda: _check_report(cfg.report),
    ]


def config_errors(cfg: Config, *, require_paths: bool = True) -> list[ConfigError]:
    """Every part's first failure, in validate's order (empty when validate passes): a form shows all
    of them at once instead of one per submit. A part whose check fails hides only its own later
    failures; the field types come first, and a bad type stops the rest (they would repeat it)."""
    errors: list[ConfigError] = []
    for i, check in enumerate(_parts(cfg, require_paths=require_paths)):
        try:
            check()
        except ConfigError as exc:
            errors.append(exc)
            if i == 0:
                break
    return errors


def resolve(cfg: Config) -> Config:
    """Fill the derived defaults (response_length, max_model_len, max_turns, clip bounds,
    actor.loss_scale_factor, ref.use_torch_compile, the critic's keys left to the actor's).

    Pure config maths; device-dependent choices (dtype auto, device auto, rollout name auto) need
    torch and are left to the loop, except rollout name auto with trainer.device=cpu: that is hf
    whatever the machine has (a CPU run never starts SGLang on a GPU it was not given).
    """
    arr = cfg.actor_rollout_ref
    rollout, mt, actor = arr.rollout, arr.rollout.multi_turn, arr.actor
    response_length = rollout.response_length or cfg.data.max_response_length
    new_mt = dataclasses.replace(mt, max_turns=mt.max_turns or (5 if mt.enable else 1))
    new_rollout = dataclasses.replace(
        rollout,
        name="hf" if (rollout.name == "auto" and cfg.trainer.device == "cpu") else rollout.name,
        response_length=response_length,
        multi_turn=new_mt,
        max_model_len=rollout.max_model_len or cfg.data.max_prompt_length + response_length,
    )
    new_actor = dataclasses.replace(
        actor,
        # seq-mean-token-sum-norm's divisor: verl's default is the padded response width, which is
        # rollout.response_length (every response is padded to it); a constant, whatever the batch.
        loss_scale_factor=actor.loss_scale_factor or response_length,
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
    critic = cfg.critic
    new_critic = dataclasses.replace(
        critic,
        model=dataclasses.replace(critic.model, path=critic.model.path or arr.model.path),
        ppo_mini_batch_size=critic.ppo_mini_batch_size or actor.ppo_mini_batch_size,
        ppo_epochs=critic.ppo_epochs or actor.ppo_epochs,
        shuffle=actor.shuffle if critic.shuffle is None else critic.shuffle,
        loss_agg_mode=critic.loss_agg_mode or actor.loss_agg_mode,
        forward_micro_batch_size_per_gpu=critic.forward_micro_batch_size_per_gpu
        or critic.ppo_micro_batch_size_per_gpu,
    )
    return dataclasses.replace(
        cfg,
        actor_rollout_ref=dataclasses.replace(
            arr, rollout=new_rollout, actor=new_actor, ref=new_ref
        ),
        critic=new_critic,
    )


# ------------------------------------------------------------------------------------- warnings
@dataclass(frozen=True)
class ConfigWarning:
    """A config that runs but probably does not do what was meant: ``key`` is the dotted key to look
    at, ``message`` says why. Warnings never refuse a run (``validate`` does that)."""

    key: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.key, "message": self.message}


# Estimators whose baseline is the group of a prompt's rollout.n samples: with one sample per group
# the advantage is the raw score (a singleton's mean is 0 and std 1, as verl).
GROUP_BASELINE_ESTIMATORS = ("grpo", "rloo", "opo", "gpg")


# Policy losses that aggregate their own way whatever actor.loss_agg_mode says (as verl's), and the
# loss_agg_mode under which nothing is lost by it (geo_mean: verl's default, which it ignores).
OWN_AGGREGATION = {
    "gspo": ("seq-mean-token-mean", "seq-mean-token-mean"),
    "sapo": ("seq-mean-token-mean", "seq-mean-token-mean"),
    "geo_mean": ("a mean over sequences of each sequence's loss", "token-mean"),
}


def _own_aggregation_warning(actor: ActorConfig) -> list[ConfigWarning]:
    """gspo, sapo and geo_mean aggregate their policy loss their own way (verl's)."""
    mode = actor.policy_loss.loss_mode
    if mode not in OWN_AGGREGATION or actor.loss_agg_mode == OWN_AGGREGATION[mode][1]:
        return []
    return [ConfigWarning(
        f"{ACTOR}.loss_agg_mode",
        f"{mode} aggregates its policy loss as {OWN_AGGREGATION[mode][0]} whatever loss_agg_mode says "
        f"(as verl); loss_agg_mode={actor.loss_agg_mode} applies to the KL and entropy terms only.",
    )]


def _gspo_warnings(actor: ActorConfig) -> list[ConfigWarning]:
    """GSPO's policy loss keeps its own aggregation and wants far narrower clip ranges (verl's)."""
    if actor.policy_loss.loss_mode != "gspo":
        return _own_aggregation_warning(actor)
    out = _own_aggregation_warning(actor)
    if actor.clip_ratio_low is None and actor.clip_ratio_high is None:
        out.append(ConfigWarning(
            f"{ACTOR}.clip_ratio_low",
            f"gspo clips a per-sequence geometric mean of the ratios, which stays close to 1: "
            f"clip_ratio={actor.clip_ratio} on both sides rarely clips. The GSPO paper and verl's "
            "recipe use clip_ratio_low=3e-4, clip_ratio_high=4e-4.",
        ))
    return out


def config_warnings(cfg: Config) -> list[ConfigWarning]:
    """What ``validate`` accepts but a user should hear about before launching, in a fixed order."""
    out: list[ConfigWarning] = []
    alg, arr = cfg.algorithm, cfg.actor_rollout_ref
    if alg.adv_estimator in GROUP_BASELINE_ESTIMATORS and arr.rollout.n == 1:
        out.append(ConfigWarning(
            f"{ROLLOUT}.n",
            f"rollout.n=1 with algorithm.adv_estimator={alg.adv_estimator}: each group holds one "
            "sample, so there is no baseline (the advantage is the raw score, as in verl). "
            "Sample several responses per prompt (e.g. n=4 to 16).",
        ))
    actor = arr.actor
    if actor.loss_scale_factor is not None and actor.loss_agg_mode != "seq-mean-token-sum-norm":
        out.append(ConfigWarning(
            f"{ACTOR}.loss_scale_factor",
            f"only seq-mean-token-sum-norm uses it; loss_agg_mode={actor.loss_agg_mode} ignores it.",
        ))
    out += _gspo_warnings(actor)
    out += [ConfigWarning(key, message) for key, message in lora_warnings(cfg)]
    data = cfg.data
    if (not alg.filter_groups.enable and data.gen_batch_size is not None
            and data.gen_batch_size != data.train_batch_size):
        out.append(ConfigWarning(
            "data.gen_batch_size",
            "used only with dynamic sampling (algorithm.filter_groups.enable); without it each step "
            f"generates data.train_batch_size={data.train_batch_size} prompts.",
        ))
    out += [ConfigWarning(key, message) for key, message in rollout_correction_warnings(
        alg.rollout_correction, actor.policy_loss.loss_mode)]
    ob = cfg.reward_model.overlong_buffer
    if ob.enable and not ob.log:
        out.append(ConfigWarning(
            "reward_model.overlong_buffer.log",
            "the overlong penalty changes the rewards, but without log=true the samples' reward "
            "parts do not show it.",
        ))
    return out
