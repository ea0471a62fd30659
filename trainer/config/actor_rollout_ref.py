"""The ``actor_rollout_ref`` section (verl's name): the policy model, its rollout, its update and
the frozen reference, each a frozen dataclass whose fields carry their default and help text.

The rest of the schema and the root ``Config`` are in ``schema.py``; the checks across fields in
``checks.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Union

from .fields import option, section


@dataclass(frozen=True)
class ModelConfig:
    path: str = option("", "Hugging Face–format model folder (required to run; never downloaded).")
    tokenizer_path: Union[str, None] = option(None, "Tokenizer folder; None = model.path.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto", "Parameter/compute dtype; auto = bfloat16 on a GPU, float32 on the CPU."
    )
    enable_gradient_checkpointing: bool = option(
        False, "Recompute activations in backward to save memory."
    )
    use_remove_padding: bool = option(
        True, "verl's switch for padding-free forwards; always on here (micro-batches are cut by sorted length or shared prompt, trainer/workers/micro.py): accepted for verl's configs, false changes nothing."
    )
    trust_remote_code: bool = option(
        False, "Allow model code from the model folder (operator decision)."
    )
    lora_rank: int = option(
        0,
        "LoRA rank (peft); 0 = off, train every weight. > 0: only the adapter trains, the "
        "reference is the base with the adapter disabled, the engine gets merged weights "
        "(docs/models.md#lora).",
    )
    lora_alpha: float = option(16, "LoRA scaling: the update is (B A) x lora_alpha / lora_rank.")
    target_modules: Union[str, list[str]] = option(
        "all-linear",
        'Modules that get an adapter: "all-linear" (every linear layer but the output head), '
        'module names such as ["q_proj", "v_proj"], or a regular expression (peft).',
    )
    exclude_modules: Union[str, list[str], None] = option(
        None, "Modules never adapted (names or a regular expression, as target_modules)."
    )


@dataclass(frozen=True)
class MultiTurnConfig:
    enable: bool = option(False, "Multi-turn rollout with tool calls.")
    max_turns: Union[int, None] = option(
        None, "Most assistant turns per sample; None = 5 when enabled, 1 otherwise."
    )
    max_tool_response_length: int = option(
        256, "Longest tool reply in characters, as verl counts it (a longer one is cut)."
    )
    tool_response_truncate_side: Literal["left", "right", "middle"] = option(
        "middle", "Which part of an overlong tool reply is kept, as verl: left = its start, right = its end, middle = both ends."
    )
    max_parallel_calls: int = option(
        1,
        "Tool calls executed per assistant turn (1 = the first call only; >1 runs several "
        "concurrently).",
    )
    tool_timeout_s: float = option(
        10.0, "Seconds a tool call may take before it becomes an error reply."
    )
    format: Literal["hermes", "qwen25", "llama3"] = option(
        "hermes",
        "Tool-call parser, by SGLang's tool_call_parser names: hermes / qwen25 = <tool_call>{json}"
        "</tool_call> (Qwen2.5, Qwen3), llama3 = Llama 3.1/3.2 JSON calls (docs/chat-formats.md).",
    )
    interaction: Union[str, None] = option(
        None,
        "A simulated user by its registered name (trainer.interactions: gsm8k); after each assistant "
        "turn without a tool call it replies as the user (continue, or end the conversation) and "
        "scores the turn. verl's interaction_config_path, by name instead of a file of class paths; "
        "each row may give it arguments in extra_info.interaction_kwargs. None = off.",
    )
    interaction_timeout_s: float = option(
        30.0,
        "Seconds the interaction may take to start a conversation or to reply to one turn. Past it, "
        "or when it raises, that sample's conversation ends there (the interaction's failure, not the "
        "model's: counted in interaction/errors and logged).",
    )
    max_user_turns: Union[int, None] = option(
        None,
        "Most user turns per sample, counted as verl counts them: each round of tool replies and each "
        "interaction reply; the assistant turn after the last is the sample's last (verl's max_user_turns). "
        "None = no limit of its own (max_turns and the response length still end the conversation).",
    )


@dataclass(frozen=True)
class ValKwargsConfig:
    n: int = option(1, "Samples per validation prompt.")
    temperature: float = option(0.0, "Validation sampling temperature.")
    top_p: float = option(1.0, "Validation nucleus sampling mass.")
    top_k: int = option(-1, "Validation top-k; -1 = off.")
    do_sample: bool = option(False, "Sample in validation (False = greedy).")


@dataclass(frozen=True)
class RolloutConfig:
    name: Literal["auto", "hf", "sglang", "vllm"] = option(
        "auto",
        "Rollout engine: hf (transformers, anywhere), sglang (GPU), vllm (GPU; not yet run on a "
        "live vLLM), auto = sglang where usable (a GPU device with sglang installed), else hf; "
        "auto never picks vllm; always hf with trainer.device=cpu.",
    )
    n: int = option(1, "Samples per prompt (the GRPO group size).")
    temperature: Union[float, None] = option(
        None,
        "Sampling temperature; None = the model's generation_config.json, else 1.0 (verl's default).",
    )
    top_p: Union[float, None] = option(
        None, "Nucleus sampling mass; None = the model's generation_config.json, else 1.0."
    )
    top_k: Union[int, None] = option(
        None, "Top-k sampling, -1 = off; None = the model's generation_config.json, else -1."
    )
    do_sample: bool = option(True, "Sample (False = greedy).")
    ignore_eos: bool = option(
        False,
        "Generate response_length tokens whatever the model emits: no stop on EOS or end-of-turn "
        "tokens (verl's rollout.ignore_eos; fixed-length rollouts for speed benchmarks).",
    )
    enforce_eager: bool = option(
        False,
        "hf and vllm engines on a GPU: decode without CUDA graphs (verl's rollout.enforce_eager).",
    )
    response_length: Union[int, None] = option(
        None, "Response token limit; None = data.max_response_length."
    )
    max_model_len: Union[int, None] = option(
        None, "Engine context length; None = prompt + response length."
    )
    gpu_memory_utilization: float = option(
        0.5, "Fraction of GPU memory the engine may take (sglang, vllm)."
    )
    free_cache_engine: bool = option(
        True, "Release the engine's KV cache after each rollout (sglang and vllm: its weights too)."
    )
    log_prob_micro_batch_size_per_gpu: Union[int, None] = option(
        None, "Sequences per forward when recomputing old log-probs; None = all at once. With actor.use_dynamic_bsz the actor's token budget cuts this pass instead, as verl."
    )
    update_weights_bucket_megabytes: int = option(
        512, "Size of the buckets in which weights are synced."
    )
    seed: int = option(0, "Seed of the rollout sampler.")
    multi_turn: MultiTurnConfig = section(MultiTurnConfig, "Multi-turn tool calling.")
    val_kwargs: ValKwargsConfig = section(ValKwargsConfig, "Sampling used in validation.")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = option(1e-6, "AdamW learning rate.")
    betas: list[float] = option([0.9, 0.999], "AdamW betas.")
    weight_decay: float = option(0.01, "AdamW weight decay.")
    lr_warmup_steps: int = option(-1, "Warmup steps; -1 = use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: float = option(0.0, "Warmup as a fraction of total_training_steps.")
    warmup_style: Literal["constant", "cosine"] = option(
        "constant", "LR after warmup: constant or cosine decay."
    )
    min_lr_ratio: float = option(0.0, "Cosine floor as a fraction of lr.")
    total_training_steps: int = option(-1, "Filled at run time from the data and trainer settings.")


@dataclass(frozen=True)
class ActorFsdpConfig:
    param_offload: bool = option(
        False, "On GPUs: the actor's parameters wait in host memory between the phases that use them (log-probs, update, weight sync), leaving the rollout engine room (trainer/parallel/offload.py)."
    )
    optimizer_offload: bool = option(
        False, "On GPUs: AdamW's state waits in host memory outside the update (twice the trainable parameters in float32)."
    )


@dataclass(frozen=True)
class PolicyLossConfig:
    """verl's ``actor.policy_loss``: which policy-loss function the update uses, and the keys of the
    loss modes that have their own (clip_cov_*, kl_cov_ratio and ppo_kl_coef; the other modes ignore
    them, as verl's). sapo's tau_pos and tau_neg sit in the actor section, where verl has them."""

    loss_mode: Literal["vanilla", "gspo", "cispo", "gpg", "geo_mean", "sapo", "clip_cov", "kl_cov"] = option(
        "vanilla",
        "Policy loss (trainer.algorithms.policy_losses, verl's names): vanilla = PPO clip with dual "
        "clip; gspo = sequence-level ratio, aggregated seq-mean-token-mean (verl's GSPO recipe: "
        "clip_ratio_low 3e-4, clip_ratio_high 4e-4); cispo = clipped importance weight, detached, "
        "times log-prob; gpg = -A log-prob (no ratio, no clip); geo_mean = GMPO, a sequence's ratio "
        "is the geometric mean of its token ratios, each clipped in log space (verl's recipe: "
        "clip_ratio_low = clip_ratio_high = 0.4), a mean over sequences; sapo = a soft sigmoid gate "
        "on the ratio instead of the clip (actor.tau_pos, tau_neg), aggregated seq-mean-token-mean; "
        "clip_cov = PPO clip, and the gradient of a few random tokens of high advantage/log-prob "
        "covariance cut; kl_cov = unclipped surrogate with a KL penalty on the tokens of highest "
        "covariance.",
    )
    clip_cov_ratio: float = option(
        0.0002, "clip_cov: fraction of the masked tokens whose gradient is cut (in (0, 1])."
    )
    clip_cov_lb: float = option(
        1.0, "clip_cov: lower bound (exclusive) of the covariance of the tokens that may be cut."
    )
    clip_cov_ub: float = option(
        5.0, "clip_cov: upper bound (exclusive) of that covariance (> clip_cov_lb)."
    )
    kl_cov_ratio: float = option(
        0.0002,
        "kl_cov: fraction of the masked tokens (highest covariance) given the KL penalty (in (0, 1]).",
    )
    ppo_kl_coef: float = option(
        0.1, "kl_cov: weight of the penalty |log pi - log pi_old| on those tokens (>= 0)."
    )


@dataclass(frozen=True)
class ActorConfig:
    strategy: Literal["fsdp"] = option(
        "fsdp", "Training strategy (FSDP2; one process runs it unsharded)."
    )
    ppo_mini_batch_size: int = option(
        256, "Prompts per optimizer step (times rollout.n trajectories)."
    )
    ppo_micro_batch_size_per_gpu: Union[int, None] = option(
        None,
        "Trajectories per forward/backward (gradient accumulation unit); None = whole mini batch.",
    )
    ppo_epochs: int = option(1, "Passes over each step's batch.")
    clip_ratio: float = option(0.2, "PPO clip epsilon.")
    clip_ratio_low: Union[float, None] = option(None, "Lower clip epsilon; None = clip_ratio.")
    clip_ratio_high: Union[float, None] = option(None, "Upper clip epsilon; None = clip_ratio.")
    clip_ratio_c: float = option(3.0, "Dual-clip constant for negative advantages (> 1).")
    tau_pos: float = option(
        1.0,
        "sapo: temperature of the gate for tokens with a positive advantage (> 0; larger = the "
        "update fades faster as the ratio leaves 1). verl's key and the SAPO paper's value.",
    )
    tau_neg: float = option(
        1.05,
        "sapo: temperature of the gate for tokens with an advantage <= 0 (> 0; the paper sets it "
        "above tau_pos). verl's key and the SAPO paper's value.",
    )
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = option("token-mean", "How the token losses are aggregated into one number.")
    loss_scale_factor: Union[int, None] = option(
        None,
        "seq-mean-token-sum-norm's constant divisor (Dr.GRPO's MAX_TOKENS): each sequence's token-sum "
        "is divided by it; None = the rollout's padded response length (rollout.response_length), "
        "as verl. Ignored by the other modes.",
    )
    entropy_coeff: float = option(0.0, "Entropy bonus weight (0 = entropy not in the loss).")
    use_kl_loss: bool = option(False, "Add a KL-to-reference term to the loss (GRPO style).")
    kl_loss_coef: float = option(0.001, "Weight of the KL loss.")
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"] = option(
        "low_var_kl", "KL estimator used in the loss; a trailing + (e.g. k3+) takes its value with k2's gradient, as verl."
    )
    grad_clip: float = option(1.0, "Gradient-norm clip (a non-finite norm skips the step).")
    use_dynamic_bsz: bool = option(
        False, "Build micro batches by token budget instead of by count (the update's and the old log-probs' pass; not the reference's)."
    )
    ppo_max_token_len_per_gpu: int = option(
        16384, "Token budget of a micro batch when use_dynamic_bsz."
    )
    shuffle: bool = option(False, "Shuffle trajectories before splitting into mini batches.")
    use_torch_compile: bool = option(
        False,
        "torch.compile (dynamic shapes) the policy's forward used for log-probs and the update; "
        "the rollout is unaffected. Off by default: on a CPU the first step compiles for minutes "
        "(verl's key of the same name, default on, compiles only its entropy helper). Ignored "
        "under FSDP (world size > 1).",
    )
    policy_loss: PolicyLossConfig = section(
        PolicyLossConfig, "The policy-loss function (verl's actor.policy_loss)."
    )
    optim: OptimConfig = section(OptimConfig, "Optimizer and learning-rate schedule.")
    fsdp_config: ActorFsdpConfig = section(ActorFsdpConfig, "FSDP memory options.")


@dataclass(frozen=True)
class RefFsdpConfig:
    param_offload: bool = option(False, "Keep the reference parameters on the CPU between uses.")


@dataclass(frozen=True)
class RefConfig:
    log_prob_micro_batch_size_per_gpu: Union[int, None] = option(
        None, "Sequences per reference forward; None = all at once."
    )
    use_torch_compile: Union[bool, None] = option(
        None, "torch.compile the reference forward; None = actor.use_torch_compile (as verl)."
    )
    fsdp_config: RefFsdpConfig = section(RefFsdpConfig, "FSDP memory options.")


@dataclass(frozen=True)
class ActorRolloutRefConfig:
    model: ModelConfig = section(ModelConfig, "The policy model.")
    rollout: RolloutConfig = section(RolloutConfig, "Sampling and the rollout engine.")
    actor: ActorConfig = section(ActorConfig, "The policy update.")
    ref: RefConfig = section(RefConfig, "The frozen reference model.")


def upgrade_stored(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A spec stored before ``actor.policy_loss`` became verl's section named the loss there as a
    string (``"vanilla"``): read it as ``actor.policy_loss.loss_mode``. Anything else is returned as
    it is (``build`` reports what is wrong with it)."""
    arr = d.get("actor_rollout_ref")
    actor = arr.get("actor") if isinstance(arr, Mapping) else None
    if not isinstance(actor, Mapping) or not isinstance(actor.get("policy_loss"), str):
        return d
    upgraded = {**actor, "policy_loss": {"loss_mode": actor["policy_loss"]}}
    return {**d, "actor_rollout_ref": {**arr, "actor": upgraded}}
