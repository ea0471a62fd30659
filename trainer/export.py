"""Turn any committed checkpoint (`global_step_N/`) of a run into a Hugging Face folder.

`export_checkpoint(config, step_path, out_dir)` writes into `out_dir`:

- `huggingface/`: the policy of that step as a plain model folder (config.json, model.safetensors,
  generation_config.json, the tokenizer) that `AutoModelForCausalLM.from_pretrained` loads, float32
  (the actor's master weights, as the trainer's own final export);
- with LoRA (`actor_rollout_ref.model.lora_rank > 0`) also `lora_adapter/`: the adapter
  (adapter_config.json + adapter_model.safetensors) that `PeftModel.from_pretrained(base, ...)`
  loads on the base model; `huggingface/` then holds the merged weights (W + B A * scaling).

The step's actor is read with `checkpoint.read_actor_model`: a plain `model.pt`, or the workers'
torch.distributed.checkpoint shards of any world size, consolidated here on the CPU (FSDP shards
merged). The base model is the run's `actor_rollout_ref.model.path`, loaded as the trainer loads it;
a LoRA checkpoint holds only the adapter matrices, which are loaded onto the base wrapped by
`trainer.workers.lora.wrap` with the run's own LoRA settings, then merged by the same function the
trainer uses to hand merged weights to its rollout engine.

Everything happens on the CPU in this process; memory: about twice the model in float32 (the base
model and the consolidated state). The folder is written under `out_dir.tmp` and renamed into place,
so a crash leaves no half export. No web code: the platform's export task calls it with paths it
took from the run's own record.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from trainer import checkpoint as ckpt

MODEL_DIR = "huggingface"


def _check_fit(missing: list[str], unexpected: list[str], model: Any, step_path: Path) -> None:
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    missing = [k for k in missing if not (tied and k.startswith("lm_head."))]  # the embedding's alias
    if missing or unexpected:
        raise ValueError(f"{step_path.name}: the checkpoint's weights do not fit the run's model: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")


def _lora_policy(base: Any, model_cfg: Any, state: dict[str, torch.Tensor], step_path: Path) -> tuple[Any, Any]:
    """(the base wrapped with the run's LoRA layers and the checkpoint's adapter loaded, its PeftModel)."""
    from trainer.workers import lora

    if not lora.enabled(model_cfg):
        raise ValueError(f"{step_path.name}: the checkpoint holds LoRA weights but the run's config has "
                         "actor_rollout_ref.model.lora_rank = 0")
    peft_model = lora.wrap(base, model_cfg)
    adapter_names = {n for n, _p in base.named_parameters() if lora.is_adapter_param(n)}
    missing = sorted(adapter_names - set(state))
    unexpected = sorted(set(state) - adapter_names)
    if missing or unexpected:
        raise ValueError(f"{step_path.name}: the checkpoint's adapter does not fit the run's LoRA settings: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    base.load_state_dict(state, strict=False)
    return base, peft_model


def export_checkpoint(config: dict[str, Any], step_path: Path, out_dir: Path, *,
                      base_model_name: str | None = None) -> dict[str, Any]:
    """Write `out_dir/huggingface/` (and, with LoRA, `out_dir/lora_adapter/`) from checkpoint
    `step_path` of a run whose frozen config is `config`. Returns {"lora": bool, "files": [relative
    paths written]}. ValueError when the checkpoint does not fit the config's model.

    The folder names no path of this machine: the adapter's `base_model_name_or_path` is
    `base_model_name` (None when not given; `PeftModel.from_pretrained` takes the base model as an
    argument anyway) and peft's own README.md, which names the base by its path, is left out
    (`lora.save_adapter`)."""
    from transformers import AutoModelForCausalLM

    from trainer.config import Config
    from trainer.models.hf_folder import load_tokenizer
    from trainer.workers import lora

    step_path, out_dir = Path(step_path), Path(out_dir)
    m = Config.from_dict(config).actor_rollout_ref.model
    ckpt.require_actor(step_path)  # before the base model is loaded
    tokenizer = load_tokenizer(m.tokenizer_path or m.path, model_path=m.path, trust_remote_code=m.trust_remote_code)
    base = AutoModelForCausalLM.from_pretrained(m.path, dtype=torch.float32, trust_remote_code=m.trust_remote_code)
    state = ckpt.read_actor_model(step_path)
    is_lora = any(lora.is_adapter_param(k) for k in state)

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir(parents=True)
        policy = _policy(m, base, state, step_path, tmp, is_lora=is_lora, base_model_name=base_model_name)
        policy.save_pretrained(tmp / MODEL_DIR)
        tokenizer.save_pretrained(tmp / MODEL_DIR)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return {"lora": is_lora, "files": files}


def load_step_policy(config: dict[str, Any], step_path: Path) -> Any:
    """The policy of checkpoint `step_path` of a run whose config is `config`, as `export_checkpoint`
    makes it (float32, on the CPU, eval mode; LoRA: the adapter merged), written nowhere: what the
    playground talks to. ValueError when the checkpoint does not fit the config's model."""
    from transformers import AutoModelForCausalLM

    from trainer.config import Config
    from trainer.workers import lora

    step_path = Path(step_path)
    m = Config.from_dict(config).actor_rollout_ref.model
    base = AutoModelForCausalLM.from_pretrained(m.path, dtype=torch.float32, trust_remote_code=m.trust_remote_code)
    state = ckpt.read_actor_model(step_path)
    is_lora = any(lora.is_adapter_param(k) for k in state)
    return _policy(m, base, state, step_path, None, is_lora=is_lora, base_model_name=None)


def _policy(m: Any, base: Any, state: dict[str, torch.Tensor], step_path: Path, tmp: Path | None, *,
            is_lora: bool, base_model_name: str | None) -> Any:
    """The step's policy as a plain HF model (LoRA: merged; its adapter folder written into `tmp`
    unless None)."""
    from trainer.workers import lora

    if not is_lora:
        if lora.enabled(m):
            raise ValueError(f"{step_path.name}: the run's config has LoRA (actor_rollout_ref.model.lora_rank > 0) "
                             "but the checkpoint holds no adapter weights")
        result = base.load_state_dict(state, strict=False)
        _check_fit(list(result.missing_keys), list(result.unexpected_keys), base, step_path)
        return base.eval()
    wrapped, peft_model = _lora_policy(base, m, state, step_path)
    if tmp is not None:
        lora.save_adapter(peft_model, lora.adapter_full_state(wrapped), tmp / lora.ADAPTER_DIR,
                          base_model_name=base_model_name)
    merged = lora.merged_state(wrapped)
    plain = peft_model.unload()  # the model's own modules back, LoRA layers removed (no second copy)
    del wrapped, peft_model
    result = plain.load_state_dict(merged, strict=False)
    del merged
    _check_fit(list(result.missing_keys), list(result.unexpected_keys), plain, step_path)
    return plain.eval()
