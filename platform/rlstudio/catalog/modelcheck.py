"""The check a model folder passes before it is registered: what `model_register` stores about it.

`check_model_folder(path)` refuses (CatalogRefused on `path`, saying why) a folder that is not under
RLSTUDIO_MODEL_ROOTS, has no loadable config.json or tokenizer, whose weights cannot be read (a
sharded checkpoint's index naming a missing shard included), or whose chat template cannot work for
multi-turn RL (`trainer.chat.check_template`: token deltas, the tool-call parser, a stop token that
ends a turn). Otherwise it returns a `ModelCheck`: the parameter count (from the safetensors headers:
no tensor is read), architecture, dtype, shards, tied embeddings, and the chat family with its
tool-call parser and stop tokens, which runs of the model use.

A folder whose config names a `*ForSequenceClassification` architecture is a reward model (kind
"reward"): it must have one label (`num_labels=1`: one score per conversation) and a chat template
that renders a whole transcript, tool call and tool reply included (trainer.chat.transcript: a reward
model reads conversations, it never generates, so the multi-turn check of a policy does not apply).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from .errors import CatalogRefused

INDEX_FILE = "model.safetensors.index.json"


@dataclass
class ModelCheck:
    """What the check found in a folder that passed it."""

    folder: Path
    num_parameters: int
    architecture: str = ""
    dtype: str = ""
    shards: int = 1
    tied_embeddings: bool | None = None
    kind: str = "policy"  # policy | reward (a one-label sequence-classification model)
    chat_family: str = ""  # qwen2.5 | qwen3 | llama3 | chatml | "" (none of ours, checked as it is)
    tool_parser: str = ""  # SGLang's parser name; "" when the template renders no tool calls
    stop_tokens: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)  # trainer.chat.TemplateReport.to_dict()


def _refuse(message: str) -> CatalogRefused:
    return CatalogRefused(message, code="bad_model", field="path")


def _safetensors_count(path: Path) -> int:
    """Parameters in a .safetensors file, from its JSON header only (no tensor is read)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n <= 0 or n > 100 << 20:
            raise ValueError(f"{path.name}: not a safetensors file")
        header = json.loads(f.read(n))
    total = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        count = 1
        for d in info["shape"]:
            count *= int(d)
        total += count
    return total


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint: the shards its index names (each must exist), else every
    *.safetensors in the folder."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _refuse(f"{INDEX_FILE} is not a safetensors index: {exc}") from None
        missing = [n for n in names if not (folder / n).is_file() or Path(n).name != n]
        if missing:
            raise _refuse(f"{INDEX_FILE} names shards that are not in the folder: {', '.join(missing[:5])}")
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))


def count_parameters(folder: Path) -> tuple[int, int]:
    """(parameter count, weight files) of a checkpoint folder: safetensors headers, else a memory-mapped
    torch load."""
    st = weight_files(folder)
    if st:
        return sum(_safetensors_count(p) for p in st), len(st)
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise _refuse("no weights found (model.safetensors or pytorch_model.bin)")
    import torch

    total = 0
    for p in bins:
        state = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
        total += sum(t.numel() for t in state.values())
    return total, len(bins)


def _inside_roots(path: str, roots: list[Path] | None = None) -> Path:
    if not path or not isinstance(path, str):
        raise CatalogRefused("a folder path is required", field="path")
    if "\x00" in path:
        raise CatalogRefused("the path must not contain the NUL character", field="path")
    roots = roots if roots is not None else settings.RLSTUDIO_MODEL_ROOTS

    def outside(resolved: list[Path]) -> CatalogRefused:
        return _refuse(f"model folders must be under {', '.join(map(str, resolved))} (RLSTUDIO_MODEL_ROOTS)")

    try:
        folder = Path(path).expanduser()
    except RuntimeError:  # "~name/..." where no user `name` exists: pathlib cannot find that home. The
        # answer is any outside folder's (as for "~root/..."), so that it does not say which accounts exist.
        raise outside([Path(r).resolve() for r in roots]) from None
    try:
        if not folder.is_absolute():
            raise CatalogRefused("the path must be absolute", field="path")
        folder = folder.resolve()
        resolved_roots = [Path(r).resolve() for r in roots]
        if not any(folder == r or r in folder.parents for r in resolved_roots):
            raise outside(resolved_roots)
        if not folder.is_dir():
            raise _refuse("no such folder")
        if not (folder / "config.json").is_file():
            raise _refuse("no config.json in the folder")
    except (OSError, ValueError) as exc:  # a name too long for the file system (ENAMETOOLONG), a loop, ...
        raise _refuse(f"the path cannot be read: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    return folder


def _template(tokenizer) -> dict[str, Any]:
    """trainer.chat.check_template's report, refused with its problems when the template cannot work."""
    from trainer.chat import check_template

    try:
        report = check_template(tokenizer)
    except Exception as exc:  # a template that breaks the checker itself
        raise _refuse(f"the chat template cannot be checked: {type(exc).__name__}: {exc}") from None
    if not report.ok:
        raise _refuse("the chat template cannot be used for multi-turn RL: " + "; ".join(report.problems))
    return report.to_dict()


def _reward_template(config, tokenizer) -> dict[str, Any]:
    """A reward model's check: one label, and a template that renders a transcript with tool turns."""
    from trainer.chat.transcript import check_transcript_template

    labels = int(getattr(config, "num_labels", 0) or 0)
    if labels != 1:
        raise _refuse(f"a sequence-classification model is a reward model only with one label (num_labels=1), "
                      f"this one has {labels}")
    problems = check_transcript_template(tokenizer)
    if problems:
        raise _refuse("the chat template cannot be used to score transcripts: " + "; ".join(problems))
    return {"ok": True, "kind": "reward", "num_labels": labels, "problems": []}


def check_model_folder(path: str, *, roots: list[Path] | None = None) -> ModelCheck:
    """The ModelCheck of a Hugging Face–format checkpoint folder, or CatalogRefused naming what is wrong.

    The folder must lie under RLSTUDIO_MODEL_ROOTS, or under `roots` when the platform gives them (a
    run's export is checked inside that run's own folder: a path from the run's record, never a user's).
    """
    folder = _inside_roots(path, roots)
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(folder))
    except Exception as exc:
        raise _refuse(f"config.json does not load: {exc}") from None
    try:
        from trainer.models.hf_folder import load_tokenizer

        # As a run loads it: EOS / pad / BOS a bare tokenizer folder lacks come from the model's files.
        tokenizer = load_tokenizer(folder)
    except Exception as exc:
        raise _refuse(f"the tokenizer does not load: {exc}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise _refuse("the tokenizer has no chat template")
    architectures = list(getattr(config, "architectures", None) or [])
    kind = "reward" if any(a.endswith("ForSequenceClassification") for a in architectures) else "policy"
    if kind == "reward":
        report = _reward_template(config, tokenizer)
    else:
        report = _template(tokenizer)
    try:
        params, shards = count_parameters(folder)
    except CatalogRefused:
        raise
    except Exception as exc:
        raise _refuse(f"the weights cannot be read: {exc}") from None
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or ""
    return ModelCheck(
        folder=folder, num_parameters=params,
        architecture=",".join(getattr(config, "architectures", None) or []) or str(getattr(config, "model_type", "")),
        dtype=str(dtype).removeprefix("torch."), shards=shards, kind=kind,
        tied_embeddings=getattr(config, "tie_word_embeddings", None),
        chat_family=report.get("family") or "", tool_parser=report.get("parser") or "",
        stop_tokens=list(report.get("stop_tokens") or []), report=report,
    )
