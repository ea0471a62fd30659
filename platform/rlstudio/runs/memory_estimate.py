"""Memory per device of a run, estimated before it starts: from the model's config.json and the run's config.

What the trainer keeps on each device (trainer/parallel/worker.py, trainer/workers/actor.py), for P
parameters over W workers (W = the GPUs; 1 on the CPU; FSDP shards by W when W > 1):

- actor weights: float32 master weights, 4 P / W bytes; gradients 4 P / W (during the update);
  AdamW's two float32 moments 8 P / W;
- with LoRA (actor_rollout_ref.model.lora_rank = r > 0, trainer/workers/lora.py): the base stays
  float32 and frozen (4 P / W), the adapter adds A = r x (in + out) parameters per adapted linear
  layer (`lora_parameters`), and only the adapter has gradients (4 A / W) and AdamW moments (8 A / W);
- with actor.fsdp_config.param_offload on a GPU (trainer/parallel/offload.py) the actor's weights
  wait in host memory during the rollout, validation and the critic's update (not when the one-worker
  `hf` engine generates on them: they stay), and with optimizer_offload its AdamW moments wait there
  in every phase but the update;
- reference (only with a KL term: actor.use_kl_loss or algorithm.use_kl_in_reward): P / W in the
  compute dtype (bfloat16 on a GPU for dtype=auto, float32 on the CPU); nothing resident on a GPU
  with ref.fsdp_config.param_offload (on one worker, without FSDP2, it comes whole for its pass);
  nothing with LoRA (the actor's base with the adapter disabled);
- rollout engine: `hf` on one worker runs on the actor's own float32 module (no copy, a float32 KV
  cache); `hf` under FSDP, or with LoRA (it generates with merged weights), holds a full copy in the
  compute dtype; `sglang` and `vllm` reserve gpu_memory_utilization of the device (their weights
  and KV pool) while they generate (auto is never vllm: trainer/rollout/base.py);
- rollout KV cache (hf): every trajectory of the worker's share of a generation batch at once
  (train_batch_size, or gen_batch_size with dynamic sampling when larger, x n / W rows) x (max prompt
  + response) tokens x 2 x layers x kv heads x head dim;
- validation KV cache (hf, with a validation set: data.val_files): one validation batch the same way
  (data.val_batch_size prompts, or the whole validation set, `val_rows`, when unset, x val_kwargs.n / W
  rows), its own phase;
- update activations, rough: per token and layer about 6 h + 2 kv_heads x head_dim + 4 ffn values are
  kept for backward (norm inputs, q/k/v, attention output, the MLP's gate/up/act; no attention matrix
  with SDPA); with gradient checkpointing one hidden state per layer plus one layer recomputed; plus
  the response logits (compute dtype and their float32 copy) of a micro batch;
- old / reference log-prob passes: the response logits of a log-prob micro batch;
- critic (only with algorithm.adv_estimator=gae, trainer/workers/critic.py): a second full model, the
  body with a scalar head, trained in full whatever LoRA does: float32 weights 4 P / W and AdamW
  moments 8 P / W resident, gradients 4 P / W and activations (as the actor's, no logits) in its own
  update, which runs before the actor's.

Phases do not overlap: the peak is the largest of rollout, log-prob, update (and validation), each on top of what
stays resident (weights, optimizer, reference). The step's and the validation batch's trajectories and
lengths are `shapes.StepShapes`' (the launch gate bounds the same ones). `estimate` is a pure function
(unit-tested against numbers worked by hand); `read_model_config` reads a catalog model's config.json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .shapes import StepShapes

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Rollout engines that reserve gpu_memory_utilization of the device as their own pool, by label.
POOL_ENGINES = {"sglang": "SGLang", "vllm": "vLLM"}
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB


class ModelConfigUnreadable(ValueError):
    """The model folder's config.json is missing, too large, or lacks the sizes an estimate needs."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that memory depends on."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    num_parameters: int
    tie_word_embeddings: bool = False  # the LM head shares the embedding matrix


def _int(cfg: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def count_parameters(*, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vocab: int,
                     ffn: int, tied: bool, qkv_bias: bool) -> int:
    """Parameters of a Llama / Qwen2-style decoder: embeddings (+ an untied LM head), per layer q/k/v/o
    projections (+ q/k/v biases), a gated MLP (gate, up, down) and two RMSNorms, and a final norm."""
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden + ((q + 2 * kv) if qkv_bias else 0)
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


# The linear layers of a Llama / Qwen2-style decoder layer that "all-linear" adapts (peft: every
# linear layer but the output head), as (input, output) sizes of a ModelShape.
LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _linear_sizes(shape: "ModelShape") -> dict[str, tuple[int, int]]:
    h, q, kv, ffn = shape.hidden_size, shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim, \
        shape.intermediate_size
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, ffn), "up_proj": (h, ffn), "down_proj": (ffn, h)}


def lora_parameters(shape: "ModelShape", *, rank: int, target_modules: Any = "all-linear",
                    exclude_modules: Any = None) -> int:
    """LoRA's adapter parameters: rank x (in + out) for every adapted linear layer of every decoder
    layer. "all-linear", or any string that is not a known layer name (a regular expression: counted
    as all of them, an upper bound), adapts the seven; a list adapts the layers it names."""
    sizes = _linear_sizes(shape)
    if isinstance(target_modules, (list, tuple)):
        chosen = {t for t in target_modules if t in sizes}
    elif isinstance(target_modules, str) and target_modules in sizes:
        chosen = {target_modules}
    else:
        chosen = set(sizes)
    excluded = exclude_modules if isinstance(exclude_modules, (list, tuple)) else [exclude_modules]
    chosen -= {e for e in excluded if isinstance(e, str)}
    return int(rank) * shape.num_layers * sum(sum(sizes[name]) for name in chosen)


def shape_from_config(cfg: Mapping[str, Any], *, num_parameters: int | None = None) -> ModelShape:
    """A ModelShape from a Hugging Face config.json (a multimodal one's text_config); the parameter
    count is `num_parameters` when the catalog knows it, else counted from the sizes."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigUnreadable("config.json is not an object")
    top = cfg
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    tied = bool(cfg.get("tie_word_embeddings", top.get("tie_word_embeddings", False)))
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head")
    vocab = _int(cfg, "vocab_size")
    missing = [n for n, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                              ("num_attention_heads", heads), ("vocab_size", vocab)) if v is None]
    if missing:
        raise ModelConfigUnreadable(f"config.json lacks {', '.join(missing)}")
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim") or hidden // heads
    ffn = _int(cfg, "intermediate_size", "n_inner") or 4 * hidden
    if not num_parameters:
        qkv_bias = bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2"))
        num_parameters = count_parameters(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                                          head_dim=head_dim, vocab=vocab, ffn=ffn,
                                          tied=tied, qkv_bias=qkv_bias)
    return ModelShape(hidden_size=hidden, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
                      head_dim=head_dim, vocab_size=vocab, intermediate_size=ffn, num_parameters=int(num_parameters),
                      tie_word_embeddings=tied)


def read_model_config(folder: str | Path) -> dict[str, Any]:
    """<folder>/config.json of a catalog model (the catalog's own path, never user input)."""
    path = Path(folder) / "config.json"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        raise ModelConfigUnreadable("the model folder has no readable config.json") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ModelConfigUnreadable("config.json is larger than 1 MiB")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ModelConfigUnreadable("config.json is not valid JSON") from None
    if not isinstance(data, dict):
        raise ModelConfigUnreadable("config.json is not an object")
    return data


@dataclass(frozen=True)
class MemoryLine:
    name: str
    bytes: int
    note: str = ""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device: each line, the peak phase, the device's capacity, and whether it fits."""

    device: str  # "cpu" or "cuda"
    workers: int
    lines: tuple[MemoryLine, ...]
    phases: dict[str, int]
    peak_phase: str
    peak_bytes: int
    capacity_bytes: int
    engine: str

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def warning(self) -> str:
        if self.fits:
            return ""
        where = "the machine's memory" if self.device == "cpu" else "a GPU's memory"
        return (f"estimated peak {self.peak_bytes / GIB:.1f} GiB per device (in the {self.peak_phase} phase) is more "
                f"than {where}, {self.capacity_bytes / GIB:.1f} GiB: it will probably run out of memory")

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "workers": self.workers, "engine": self.engine,
            "lines": [{"name": x.name, "bytes": x.bytes, "gib": round(x.bytes / GIB, 3), "note": x.note}
                      for x in self.lines],
            "phases": {k: round(v / GIB, 3) for k, v in self.phases.items()},
            "peak_phase": self.peak_phase, "peak_bytes": self.peak_bytes, "peak_gib": round(self.peak_bytes / GIB, 3),
            "capacity_bytes": self.capacity_bytes, "capacity_gib": round(self.capacity_bytes / GIB, 3),
            "fits": self.fits, "warning": self.warning,
        }


def config_section(cfg: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
    """The mapping at `dotted` in a nested config ({} when it is missing or not a mapping)."""
    node: Any = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def estimate(shape: ModelShape, cfg: Mapping[str, Any], *, gpus: int, capacity_bytes: int,
             sglang_available: bool = False, val_rows: int | None = None) -> MemoryEstimate:
    """The memory per device of a run of `cfg` (a config as stored: nested dicts) on `gpus` GPUs (0: CPU);
    `val_rows`: the validation dataset's rows, when the run has one. shapes.ShapeUnknown when
    data.train_batch_size or actor_rollout_ref.rollout.n is not an integer."""
    model, rollout = config_section(cfg, "actor_rollout_ref.model"), config_section(cfg, "actor_rollout_ref.rollout")
    actor, ref = config_section(cfg, "actor_rollout_ref.actor"), config_section(cfg, "actor_rollout_ref.ref")
    algorithm = config_section(cfg, "algorithm")
    gpu = gpus > 0
    world = max(int(gpus), 1)
    sharded = world > 1
    dtype = model.get("dtype", "auto")
    cb = DTYPE_BYTES.get(dtype, 2 if gpu else 4)  # auto: bfloat16 on a GPU, float32 on the CPU
    p = shape.num_parameters

    shapes = StepShapes.of(cfg, val_rows)  # the gate bounds the same shapes
    response, seq, n = shapes.response_length, shapes.sequence_length, shapes.n
    rows = shapes.train_trajectories // world  # trajectories of one step on one worker
    gen_rows = shapes.trajectories // world  # of the step's largest generation batch
    val_gen_rows = (shapes.val_trajectories or 0) // world
    mini_rows = int(actor.get("ppo_mini_batch_size") or 1) * n // world

    engine = rollout.get("name", "auto")
    if engine == "auto":
        engine = "sglang" if (gpu and sglang_available) else "hf"

    lines: list[MemoryLine] = []
    shard_note = f", sharded over {world} workers" if sharded else ""
    rank = int(model.get("lora_rank") or 0)
    lora = rank > 0
    if lora:
        a = lora_parameters(shape, rank=rank, target_modules=model.get("target_modules", "all-linear"),
                            exclude_modules=model.get("exclude_modules"))
        weights = 4 * (p + a) // world
        grads = 4 * a // world
        optim = 8 * a // world
        lines.append(MemoryLine("actor weights", weights, f"LoRA rank {rank}: {p:,} frozen float32 base parameters "
                                                          f"+ {a:,} adapter parameters{shard_note}"))
        lines.append(MemoryLine("actor gradients", grads, "float32, the adapter's only, during the update"))
        lines.append(MemoryLine("optimizer states", optim, "AdamW: two float32 moments of the adapter only"))
    else:
        weights = 4 * p // world
        grads = 4 * p // world
        optim = 8 * p // world
        lines.append(MemoryLine("actor weights", weights, f"float32 master weights, {p:,} parameters{shard_note}"))
        lines.append(MemoryLine("actor gradients", grads, "float32, during the update"))
        lines.append(MemoryLine("optimizer states", optim, "AdamW: two float32 moments"))
    actor_fsdp = config_section(actor, "fsdp_config")
    on_actor = engine == "hf" and not sharded and not lora  # the one-worker hf engine generates on its weights
    # offload.py: host memory between phases; not the weights the one-worker hf engine generates on
    params_away = bool(actor_fsdp.get("param_offload")) and gpu and not on_actor
    optim_away = bool(actor_fsdp.get("optimizer_offload")) and gpu
    if params_away or optim_away:
        away = " and ".join(w for w, on in (("weights", params_away), ("optimizer states", optim_away)) if on)
        lines.append(MemoryLine("actor offload", 0, f"its {away} wait in host memory between the phases that use them"))

    ref_bytes = ref_visit = 0  # ref_visit: the reference brought whole to the device for its pass
    if lora and (actor.get("use_kl_loss") or algorithm.get("use_kl_in_reward")):
        lines.append(MemoryLine("reference weights", 0, "LoRA: the actor's base weights with the adapter disabled"))
    elif actor.get("use_kl_loss") or algorithm.get("use_kl_in_reward"):
        offload = bool(config_section(ref, "fsdp_config").get("param_offload")) and gpu
        ref_bytes = 0 if offload else cb * p // world
        # sharded, FSDP2 brings a layer at a time; one worker has no FSDP2: it comes whole for its pass
        ref_visit = cb * p if offload and not sharded else 0
        note = f"{cb}-byte weights{shard_note}"
        if offload:
            note = "in host memory (param_offload)" + (", on the device whole for its log-prob pass" if ref_visit else "")
        lines.append(MemoryLine("reference weights", ref_bytes, note))
    else:
        lines.append(MemoryLine("reference weights", 0, "no KL term: no reference model"))

    kv_per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim
    pool = 0
    pooled = engine in POOL_ENGINES  # an engine with a memory pool of its own
    if pooled:
        label = POOL_ENGINES[engine]
        pool = int(float(rollout.get("gpu_memory_utilization") or 0.5) * capacity_bytes)
        engine_bytes, kv_bytes = pool, 0
        lines.append(MemoryLine(f"rollout engine ({label})", pool,
                                "gpu_memory_utilization x the device: its weights and KV cache pool"))
        kv_need = gen_rows * seq * kv_per_token * cb
        lines.append(MemoryLine("rollout KV cache", 0,
                                f"inside {label}'s pool (the step's batch would need {kv_need / GIB:.2f} GiB; "
                                f"{label} queues what does not fit)"))
        val_kv_bytes = 0
    else:
        shared = not sharded and not lora
        engine_bytes = 0 if shared else cb * p
        kvb = 4 if shared else cb  # the shared module is the actor's float32 one
        kv_bytes = gen_rows * seq * kv_per_token * kvb
        copy_note = "a full copy of the merged weights (LoRA)" if lora else "a full copy of the weights"
        lines.append(MemoryLine("rollout engine (hf)", engine_bytes,
                                "runs on the actor's own weights" if shared else copy_note))
        lines.append(MemoryLine("rollout KV cache", kv_bytes,
                                f"{gen_rows} trajectories x {seq} tokens at once, {kvb}-byte values"))
        val_kv_bytes = val_gen_rows * seq * kv_per_token * kvb
        if val_gen_rows:
            lines.append(MemoryLine("validation KV cache", val_kv_bytes,
                                    f"{val_gen_rows} trajectories of one validation batch x {seq} tokens at once "
                                    "(data.val_batch_size cuts it)"))

    h, kvd, ffn = shape.hidden_size, shape.num_kv_heads * shape.head_dim, shape.intermediate_size
    micro = actor.get("ppo_micro_batch_size_per_gpu") or mini_rows
    tokens = int(actor.get("ppo_max_token_len_per_gpu") or seq) if actor.get("use_dynamic_bsz") else micro * seq
    per_layer = 6 * h + 2 * kvd + 4 * ffn
    if model.get("enable_gradient_checkpointing"):
        act = tokens * (shape.num_layers * h + per_layer) * cb
        act_note = "gradient checkpointing: one hidden state per layer, one layer recomputed"
    else:
        act = tokens * shape.num_layers * per_layer * cb
        act_note = "rough: what backward keeps per token and layer"
    response_tokens = tokens * response // max(seq, 1)
    logits = response_tokens * shape.vocab_size * (cb + 4)
    lines.append(MemoryLine("update activations", act, f"{tokens} tokens per micro batch; {act_note}"))
    lines.append(MemoryLine("update logits", logits, "response logits of a micro batch (and a float32 copy)"))
    lp_rows = rollout.get("log_prob_micro_batch_size_per_gpu") or rows
    lp_logits = int(lp_rows) * response * shape.vocab_size * (cb + 4)
    lines.append(MemoryLine("log-prob logits", lp_logits, f"{lp_rows} trajectories per old / reference log-prob pass"))

    critic_bytes = critic_phase = 0
    if algorithm.get("adv_estimator") == "gae":
        critic = config_section(cfg, "critic")
        critic_bytes = 12 * p // world
        lines.append(MemoryLine("critic weights and optimizer", critic_bytes,
                                f"PPO with GAE: a float32 value model of {p:,} parameters and its AdamW "
                                f"moments{shard_note}"))
        c_mini = int(critic.get("ppo_mini_batch_size") or actor.get("ppo_mini_batch_size") or 1) * n // world
        c_micro = critic.get("ppo_micro_batch_size_per_gpu") or c_mini
        c_tokens = int(c_micro) * seq
        c_act = c_tokens * shape.num_layers * per_layer * cb
        lines.append(MemoryLine("critic update", 4 * p // world + c_act,
                                f"its float32 gradients and activations of {c_tokens} tokens per micro batch"))
        critic_phase = 4 * p // world + c_act

    resident = weights + optim + ref_bytes + critic_bytes + (engine_bytes if engine == "hf" else 0)
    optim_off = optim if optim_away else 0  # away outside the update
    weights_off = weights if params_away else 0  # away outside the actor's own passes
    generating_off = optim_off + weights_off
    free_cache = rollout.get("free_cache_engine", True)
    held_pool = 0 if (not pooled or free_cache) else pool
    phases = {
        "rollout": resident - generating_off + (pool if pooled else kv_bytes),
        "log-prob": resident - optim_off + max(0, ref_visit - weights_off) + held_pool + lp_logits,
        "update": resident + held_pool + grads + act + logits,
    }
    if critic_phase:
        phases["critic update"] = resident - generating_off + held_pool + critic_phase
    if val_kv_bytes:
        phases["validation"] = resident - generating_off + val_kv_bytes
    peak_phase = max(phases, key=lambda k: phases[k])
    return MemoryEstimate(device="cuda" if gpu else "cpu", workers=world, lines=tuple(lines), phases=phases,
                          peak_phase=peak_phase, peak_bytes=phases[peak_phase], capacity_bytes=int(capacity_bytes),
                          engine=engine)


def device_capacity(*, gpus: int) -> int:
    """Bytes of one device: RLSTUDIO_GPU_MEMORY_GB GiB per GPU (80 by default), the machine's RAM on the CPU."""
    if gpus > 0:
        from django.conf import settings

        return int(float(settings.RLSTUDIO_GPU_MEMORY_GB) * GIB)
    import psutil

    return int(psutil.virtual_memory().total)


def estimate_for(*, model, cfg: Mapping[str, Any], gpus: int, val_rows: int | None = None) -> MemoryEstimate:
    """The estimate of a run of `cfg` on a catalog model (its folder's config.json); `val_rows`: the
    rows of the run's validation dataset."""
    import importlib.util

    shape = shape_from_config(read_model_config(model.path), num_parameters=getattr(model, "num_parameters", None))
    return estimate(shape, cfg, gpus=gpus, capacity_bytes=device_capacity(gpus=gpus),
                    sglang_available=importlib.util.find_spec("sglang") is not None, val_rows=val_rows)
