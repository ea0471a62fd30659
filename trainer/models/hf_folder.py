"""A Hugging Face model folder as the trainer reads it.

Real checkpoints come in several shapes: one ``model.safetensors`` or shards listed in
``model.safetensors.index.json``; bf16 weights; ``generation_config.json`` with a list of end-of-turn
ids and the publisher's sampling defaults; tied or untied embeddings; the tokenizer as
``tokenizer.json`` + ``tokenizer_config.json``, as ``tokenizer.json`` alone (the template in
``chat_template.jinja``), or as the slow files ``vocab.json`` + ``merges.txt``. This module owns what
the trainer takes from such a folder beyond ``from_pretrained``:

- ``read_generation_config``: the end-of-turn ids (``eos_token_id``, an int or a list; config.json's
  when there is no generation_config.json, as transformers does) and only the sampling keys the file
  itself sets (``temperature``, ``top_p``, ``top_k``), never transformers' class defaults.
- ``fill_sampling_defaults``: ``actor_rollout_ref.rollout.temperature`` / ``top_p`` / ``top_k`` left
  unset (None) take the model's values, else verl's defaults (1.0, 1.0, -1); a value the user set is
  never replaced.
- ``load_tokenizer``: ``AutoTokenizer.from_pretrained`` with the special tokens a bare folder does not
  declare completed from the model's files: without a tokenizer_config.json naming it, the EOS is
  generation_config's first end-of-turn id; no pad token -> generation_config's ``pad_token_id``,
  else the EOS; no BOS while the chat template writes ``bos_token`` -> config.json's ``bos_token_id``.
- ``weight_files``: the safetensors files of a folder (index first), for checks and tests.
- ``tokenizer_files``: the files a folder's tokenizer is read from (``load_tokenizer`` refuses a folder
  with none: transformers would build an empty tokenizer from config.json's model type alone; a model
  trusted with remote code whose tokenizer is the folder's own code, ``custom_tokenizer``, is let through).

Standard library only at import; ``load_tokenizer`` imports transformers when called.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# verl's rollout defaults, used where neither the user nor generation_config.json set a value.
VERL_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


@dataclass(frozen=True)
class GenerationDefaults:
    """What a model folder says about generation (None / () where it says nothing)."""

    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # -1 = off (generation_config's 0 means off too)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, bool):
        return ()
    if isinstance(value, int):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ()


def _one_id(value: Any) -> int | None:
    ids = _ids(value)
    return ids[0] if ids else None


def read_generation_config(folder: str | Path) -> GenerationDefaults:
    """The folder's generation_config.json (config.json's token ids where the file is absent)."""
    folder = Path(folder)
    gen = _read_json(folder / "generation_config.json")
    cfg = _read_json(folder / "config.json")
    src = gen if gen else cfg

    def num(key: str) -> float | None:
        v = gen.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    top_k = gen.get("top_k")
    top_k = (-1 if top_k <= 0 else int(top_k)) if isinstance(top_k, int) and not isinstance(top_k, bool) else None
    return GenerationDefaults(
        eos_token_ids=_ids(src.get("eos_token_id")) or _ids(cfg.get("eos_token_id")),
        bos_token_id=_one_id(src.get("bos_token_id", cfg.get("bos_token_id"))),
        pad_token_id=_one_id(src.get("pad_token_id", cfg.get("pad_token_id"))),
        temperature=num("temperature"), top_p=num("top_p"), top_k=top_k,
    )


def fill_sampling_defaults(cfg: Any, gen: GenerationDefaults) -> tuple[Any, dict[str, Any]]:
    """`cfg` with rollout.temperature / top_p / top_k that are None filled (the model's value, else
    verl's default); returns (new cfg, {key: (value, "generation_config.json" | "default")})."""
    rollout = cfg.actor_rollout_ref.rollout
    changes: dict[str, Any] = {}
    filled: dict[str, Any] = {}
    for key, default in VERL_SAMPLING_DEFAULTS.items():
        if getattr(rollout, key) is not None:
            continue
        value = getattr(gen, key)
        changes[key] = default if value is None else value
        filled[key] = (changes[key], "default" if value is None else "generation_config.json")
    if not changes:
        return cfg, {}
    arr = dataclasses.replace(cfg.actor_rollout_ref, rollout=dataclasses.replace(rollout, **changes))
    return dataclasses.replace(cfg, actor_rollout_ref=arr), filled


def complete_special_tokens(tokenizer: Any, model_folder: str | Path, tokenizer_folder: str | Path | None = None
                            ) -> dict[str, str]:
    """Set the EOS / pad / BOS a bare tokenizer folder does not declare (see the module docstring);
    returns {attribute: token} for what was set."""
    gen = read_generation_config(model_folder)
    tok_cfg = _read_json(Path(tokenizer_folder or model_folder) / "tokenizer_config.json")
    vocab_size = len(tokenizer)
    set_: dict[str, str] = {}

    def token(i: int | None) -> str | None:
        return tokenizer.convert_ids_to_tokens(int(i)) if i is not None and 0 <= i < vocab_size else None

    if not tok_cfg.get("eos_token") and gen.eos_token_ids:
        eos = token(gen.eos_token_ids[0])
        if eos is not None and eos != tokenizer.eos_token:
            tokenizer.eos_token = set_["eos_token"] = eos
    if tokenizer.pad_token is None:
        pad = token(gen.pad_token_id) or tokenizer.eos_token
        if pad is not None:
            tokenizer.pad_token = set_["pad_token"] = pad
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    if tokenizer.bos_token is None and "bos_token" in template:
        bos = token(gen.bos_token_id)
        if bos is not None:
            tokenizer.bos_token = set_["bos_token"] = bos
    return set_


# Each tuple: the files one tokenizer format needs (fast; slow BPE; sentencepiece under its usual names;
# WordPiece).
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",),
                       ("spm.model",), ("spiece.model",), ("vocab.txt",))


def tokenizer_files(folder: str | Path) -> list[str]:
    """The names of the first complete tokenizer file set in `folder` ([] when it has none)."""
    folder = Path(folder)
    for names in TOKENIZER_FILE_SETS:
        if all((folder / name).is_file() for name in names):
            return list(names)
    return []


def custom_tokenizer(folder: str | Path) -> bool:
    """Whether the folder's tokenizer_config.json names a tokenizer class of the folder's own code
    (`auto_map`'s AutoTokenizer): that code reads files of its own naming (Qwen-1's `qwen.tiktoken`),
    which TOKENIZER_FILE_SETS cannot list."""
    auto_map = _read_json(Path(folder) / "tokenizer_config.json").get("auto_map")
    return isinstance(auto_map, dict) and bool(auto_map.get("AutoTokenizer"))


def load_tokenizer(path: str | Path, *, model_path: str | Path | None = None, trust_remote_code: bool = False):
    """The tokenizer of `path` (tokenizer.json, tokenizer.json alone, or the slow vocab.json +
    merges.txt), with its special tokens completed from `model_path`'s files (default: `path`).
    FileNotFoundError when the folder holds no tokenizer files, unless the model is trusted with remote
    code and the folder's tokenizer is its own code (`custom_tokenizer`)."""
    from transformers import AutoTokenizer

    if Path(path).is_dir() and not tokenizer_files(path) and not (trust_remote_code and custom_tokenizer(path)):
        wanted = ", or ".join(" + ".join(names) for names in TOKENIZER_FILE_SETS)
        raise FileNotFoundError(f"no tokenizer files in the folder: it needs {wanted}")
    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    complete_special_tokens(tok, model_path or path, tokenizer_folder=path)
    return tok


def weight_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a model folder: the index's shards (in order), else model.safetensors."""
    folder = Path(folder)
    index = _read_json(folder / "model.safetensors.index.json")
    if index.get("weight_map"):
        return [folder / name for name in dict.fromkeys(sorted(index["weight_map"].values()))]
    single = folder / "model.safetensors"
    return [single] if single.exists() else []
