"""LoRA on the actor (actor_rollout_ref.model.lora_rank > 0), with the `peft` library.

verl's keys, in `actor_rollout_ref.model`: `lora_rank` (0 = off), `lora_alpha` (the update is scaled
by lora_alpha / lora_rank), `target_modules` ("all-linear": every linear layer but the output head,
or a list of module names) and `exclude_modules`. What the rest of the trainer does with it:

- **The actor**: `wrap(model, model_cfg)` injects peft's LoRA layers into the HF module in place
  (`get_peft_model`) and freezes every base weight; the ActorWorker keeps calling the HF module (its
  LoRA layers are part of it: forwards, the shared-prompt path, FSDP2 sharding, gradient
  checkpointing all see the same module), the optimizer takes only the parameters that still
  require a gradient (the adapter's), and a checkpoint holds those and their optimizer state.
- **The reference** is the same module with the adapter switched off (`PeftModel.disable_adapter()`):
  the base policy without a second copy of its weights.
- **The rollout engine** gets merged weights under the base model's names: `merged_full_tensors`
  yields W + (B @ A) * scaling for every adapted linear layer and the other weights as they are,
  computed into new tensors (the trained module is never merged in place, so training continues on
  exactly the weights it had; merging and unmerging in place would leave float rounding in W).
- **The export**: the merged model (a plain HF folder, `merged_full_tensors`) and the adapter folder
  (`adapter_config.json` + `adapter_model.safetensors`, what `PeftModel.from_pretrained` loads on the
  base), written next to it as `lora_adapter/` (`ADAPTER_DIR`).

Names: inside the wrapped HF module an adapted layer's weight is `<layer>.base_layer.weight` and its
adapter `<layer>.lora_A.<adapter>.weight` / `lora_B`; `base_name` maps the former back to the HF name
`<layer>.weight` the engine and `from_pretrained` know.

Every function that gathers (`merged_full_tensors`, `adapter_full_state`) walks the parameters in
the module's fixed order and calls `full_tensor` on each it needs: under FSDP2 that is a collective,
so every rank must call it, in the same order (which the fixed order guarantees).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import torch

ADAPTER_DIR = "lora_adapter"  # next to the merged export (trainer.default_local_dir/huggingface)
_ADAPTER_PARAM = re.compile(r"\.lora_(A|B)\.[^.]+\.weight$")


def enabled(model_cfg: Any) -> bool:
    """Whether the config asks for LoRA (actor_rollout_ref.model.lora_rank > 0)."""
    return int(getattr(model_cfg, "lora_rank", 0) or 0) > 0


def _modules(value: Any) -> Any:
    """target_modules / exclude_modules as peft takes them: "all-linear", a regex string, or a list."""
    if value is None or isinstance(value, str):
        return value
    return list(value)


def lora_config(model_cfg: Any) -> Any:
    """The peft LoraConfig of `actor_rollout_ref.model` (plain LoRA: no dropout, no bias, no DoRA)."""
    from peft import LoraConfig

    return LoraConfig(r=int(model_cfg.lora_rank), lora_alpha=float(model_cfg.lora_alpha),
                      target_modules=_modules(model_cfg.target_modules),
                      exclude_modules=_modules(model_cfg.exclude_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


def wrap(model: torch.nn.Module, model_cfg: Any) -> Any:
    """Inject LoRA layers into `model` in place and freeze its base weights; returns the PeftModel
    (whose `get_base_model()` is `model` itself). Refuses targets that are not linear layers: the
    merge here handles LoRA on linear layers only."""
    from peft import get_peft_model
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    peft_model = get_peft_model(model, lora_config(model_cfg))
    odd = [n for n, m in model.named_modules() if isinstance(m, LoraLayer) and not isinstance(m, LoraLinear)]
    if odd:
        raise ValueError("actor_rollout_ref.model.target_modules: LoRA is supported on linear layers only; "
                         f"these are not: {', '.join(odd[:5])}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("actor_rollout_ref.model.target_modules matched no module of the model: nothing to train")
    return peft_model


def base_name(name: str) -> str:
    """The HF name of a parameter of the wrapped module: `<layer>.base_layer.weight` -> `<layer>.weight`."""
    return name.replace(".base_layer.", ".")


def is_adapter_param(name: str) -> bool:
    """Whether `name` is a LoRA A or B matrix of the wrapped module."""
    return _ADAPTER_PARAM.search(name) is not None


def _full(t: torch.Tensor) -> torch.Tensor:
    from trainer.parallel.fsdp import full_tensor

    return full_tensor(t)


def _lora_layer(model: torch.nn.Module, name: str) -> Any:
    """The LoRA layer that owns base weight `name` (`<layer>.base_layer.weight`), else None."""
    if not name.endswith(".base_layer.weight"):
        return None
    from peft.tuners.lora import LoraLayer

    layer = model.get_submodule(name[: -len(".base_layer.weight")])
    return layer if isinstance(layer, LoraLayer) else None


def merged_weight(layer: Any, weight: torch.Tensor) -> torch.Tensor:
    """W + sum over the active adapters of (B @ A) * scaling, in a new tensor (`weight` is the full
    base weight; A and B are gathered here). peft's own delta: transpose(B @ A, fan_in_fan_out) * s."""
    out = weight
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a = _full(layer.lora_A[adapter].weight).to(weight.dtype)
        b = _full(layer.lora_B[adapter].weight).to(weight.dtype)
        delta = b @ a
        if getattr(layer, "fan_in_fan_out", False):
            delta = delta.T
        out = out + delta * layer.scaling[adapter]
    return out


def merged_full_tensors(model: torch.nn.Module, bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Buckets of (HF base name, full merged tensor), each about `bucket_bytes`: the weights the
    policy computes with, as a plain model holds them. The adapter matrices themselves are not
    yielded (they are inside the merged weights); tied weights come once, as `named_parameters`."""
    plan: list[tuple[str, torch.Tensor, Any]] = []
    for name, param in model.named_parameters():
        if is_adapter_param(name):
            continue
        plan.append((base_name(name), param, _lora_layer(model, name)))

    def gather(entries: list[tuple[str, torch.Tensor, Any]]) -> list[tuple[str, torch.Tensor]]:
        out = []
        for name, param, layer in entries:
            w = _full(param)
            out.append((name, merged_weight(layer, w) if layer is not None else w))
        return out

    bucket: list[tuple[str, torch.Tensor, Any]] = []
    size = 0
    for entry in plan:
        nbytes = entry[1].numel() * entry[1].element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield gather(bucket)
            bucket, size = [], 0
        bucket.append(entry)
        size += nbytes
    if bucket:
        yield gather(bucket)


def merged_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole merged model state on the CPU under HF names (collective under FSDP)."""
    state: dict[str, torch.Tensor] = {}
    for bucket in merged_full_tensors(model, 1 << 62):
        state.update({k: v.detach().cpu() for k, v in bucket})
    return state


def adapter_full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's full matrices on the CPU, keyed as the PeftModel's own state dict
    (`base_model.model.<name>`; collective under FSDP)."""
    return {f"base_model.model.{name}": _full(p).detach().cpu().clone()
            for name, p in model.named_parameters() if is_adapter_param(name)}


def save_adapter(peft_model: Any, state: dict[str, torch.Tensor], out_dir: Path, *,
                 base_model_name: str | None = None) -> Path:
    """Write the adapter folder (adapter_config.json + adapter_model.safetensors) from `state`
    (adapter_full_state), replacing `out_dir` atomically. `PeftModel.from_pretrained(base, out_dir)`
    loads it on the base model.

    The folder names no path of this machine: the config's `base_model_name_or_path` (peft writes the
    base model's folder there) becomes `base_model_name`, and peft's generated README.md, which names
    that folder too, is left out (the platform writes its own model card)."""
    import json

    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    peft_model.save_pretrained(str(tmp), state_dict=state, safe_serialization=True)
    cfg = json.loads((tmp / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = base_model_name
    (tmp / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (tmp / "README.md").unlink(missing_ok=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts of the wrapped module (global sizes under FSDP)."""
    trainable = total = 0
    for p in model.parameters():
        total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
    return trainable, total
