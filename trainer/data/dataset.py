"""Prompt datasets: read rows with Hugging Face `datasets`, normalise them, template and tokenize them.

Owns the step from a file on disk to `PromptRecord`s (one per kept row): which files are readable
(JSONL / JSON / Parquet / a `save_to_disk` folder), the two accepted row shapes, the chat template with
the tool schemas offered, and the overlong-prompt policy (`data.filter_overlong_prompts`,
`data.truncation`). Batching, shuffling and uids live in `trainer.data.loader`.

Row shapes:
  verl:  {"prompt": [messages], "data_source": str, "reward_model": {"ground_truth": ...},
          "extra_info": {"tools_kwargs": {...}, "tools": [names or schemas], ...}}
  plain: {"messages": [...], "ground_truth": ..., "data_source"?: str}; the prompt is every message up
         to and including the last user message (a trailing assistant answer is the reference).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

# No hub access at run time, ever: make `datasets` fail fast instead of trying the network.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class DataError(ValueError):
    """A data file or row that cannot be used, with the file / row named."""


@dataclass
class PromptRecord:
    """One kept dataset row, templated and tokenized (PromptItem minus the per-step uid)."""

    index: int  # row index in the concatenated dataset (before filtering)
    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    data_source: str = ""
    ground_truth: Any = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tools_kwargs: dict[str, Any] = field(default_factory=dict)
    extra_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class PromptDataset:
    """Templated prompts plus what was dropped on the way (reported as a log event and metric)."""

    records: list[PromptRecord]
    num_rows: int  # rows read
    num_filtered_overlong: int  # rows dropped because the templated prompt exceeded max_prompt_length
    num_truncated: int = 0  # rows cut per data.truncation (left/right/middle)

    def __len__(self) -> int:
        return len(self.records)


def _as_list(files: str | Iterable[str] | None) -> list[str]:
    if files is None:
        return []
    if isinstance(files, (str, os.PathLike)):
        return [str(files)]
    return [str(f) for f in files]


def read_rows(files: str | Iterable[str]) -> list[dict[str, Any]]:
    """Read every row of `files` (JSONL/JSON, Parquet, or `datasets.save_to_disk` folders), in order."""
    import datasets  # heavy: imported only when data is really read

    rows: list[dict[str, Any]] = []
    paths = _as_list(files)
    if not paths:
        raise DataError("no data files given (data.train_files is empty)")
    for path in paths:
        p = Path(path).expanduser()
        if not p.exists():
            raise DataError(f"data file not found: {p}")
        if p.is_dir():
            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if len(ds) != 1 and "train" not in ds:
                    raise DataError(f"{p}: a DatasetDict with splits {list(ds)}; point at one split folder")
                ds = ds["train"] if "train" in ds else next(iter(ds.values()))
        else:
            suffix = p.suffix.lower()
            if suffix in {".jsonl", ".json"}:
                builder = "json"
            elif suffix in {".parquet", ".pq"}:
                builder = "parquet"
            else:
                raise DataError(f"{p}: unsupported data file type {suffix!r} (use .jsonl, .json, .parquet or a datasets folder)")
            ds = datasets.load_dataset(builder, data_files=str(p), split="train")
        rows.extend(ds.to_list())
    return rows


def _clean_message(msg: Any, where: str) -> dict[str, Any]:
    if not isinstance(msg, dict) or "role" not in msg:
        raise DataError(f"{where}: each message must be an object with a 'role', got {msg!r}")
    # Parquet/Arrow unify struct schemas across rows, so absent keys come back as None: drop them.
    return {k: v for k, v in msg.items() if v is not None}


def normalize_row(row: dict[str, Any], *, position: int, prompt_key: str = "prompt",
                  reward_fn_key: str = "data_source") -> dict[str, Any]:
    """Map either row shape to {messages, data_source, ground_truth, tools_kwargs, tool_specs, extra_info}."""
    where = f"row {position}"
    extra = dict(row.get("extra_info") or {})
    if prompt_key in row and row[prompt_key] is not None:
        prompt = row[prompt_key]
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = [_clean_message(m, where) for m in prompt]
        reward_model = row.get("reward_model") or {}
        ground_truth = reward_model.get("ground_truth", row.get("ground_truth"))
    elif "messages" in row and row["messages"] is not None:
        convo = [_clean_message(m, where) for m in row["messages"]]
        last_user = max((i for i, m in enumerate(convo) if m["role"] == "user"), default=-1)
        if last_user < 0:
            raise DataError(f"{where}: 'messages' has no user message")
        messages = convo[: last_user + 1]
        ground_truth = row.get("ground_truth")
        if ground_truth is None and isinstance(row.get("reward_model"), dict):
            ground_truth = row["reward_model"].get("ground_truth")
    else:
        raise DataError(f"{where}: needs a {prompt_key!r} (verl form) or 'messages' (plain form) column; "
                        f"has {sorted(row)}")
    if not messages:
        raise DataError(f"{where}: empty prompt")
    data_source = row.get(reward_fn_key) or row.get("data_source") or ""
    tools_kwargs = extra.get("tools_kwargs") or {}
    # Arrow fills missing nested keys with None; a tool entry of None means "not configured for this row".
    tools_kwargs = {k: v for k, v in tools_kwargs.items() if v is not None}
    tool_specs = extra.get("tools") or row.get("tools") or []
    return {"messages": messages, "data_source": str(data_source), "ground_truth": ground_truth,
            "tools_kwargs": tools_kwargs, "tool_specs": list(tool_specs), "extra_info": extra}


def template_prompt(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """Chat-template `messages` with the tool schemas and the generation prompt, then tokenize
    (`template_kwargs`: data.apply_chat_template_kwargs, e.g. enable_thinking)."""
    text = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                         tokenize=False, **(template_kwargs or {}))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _truncate(ids: list[int], limit: int, side: str) -> list[int]:
    if side == "left":
        return ids[-limit:]
    if side == "right":
        return ids[:limit]
    if side == "middle":
        head = limit // 2
        return ids[:head] + ids[len(ids) - (limit - head):]
    raise DataError(f"data.truncation must be one of error|left|right|middle, got {side!r}")


def build_prompt_dataset(rows: list[dict[str, Any]], *, tokenizer: Any, data_cfg: Any,
                         default_tools: list[dict[str, Any]] | None = None,
                         resolve_tool: Callable[[str], dict[str, Any]] | None = None) -> PromptDataset:
    """Template every row and apply the overlong policy.

    `default_tools`: the schemas of `tools.names` (offered to every row). A row's `extra_info.tools`
    (names resolved with `resolve_tool`, or full schemas) replaces them for that row.
    """
    max_len = int(data_cfg.max_prompt_length)
    records: list[PromptRecord] = []
    filtered = truncated = 0
    for position, row in enumerate(rows):
        norm = normalize_row(row, position=position, prompt_key=data_cfg.prompt_key,
                             reward_fn_key=data_cfg.reward_fn_key)
        tools = list(default_tools or [])
        if norm["tool_specs"]:
            tools = []
            for spec in norm["tool_specs"]:
                if isinstance(spec, str):
                    if resolve_tool is None:
                        raise DataError(f"row {position}: names tool {spec!r} but no tool registry was given")
                    tools.append(resolve_tool(spec))
                elif isinstance(spec, dict):
                    tools.append(spec)
                else:
                    raise DataError(f"row {position}: extra_info.tools entries must be names or schemas")
        ids = template_prompt(tokenizer, norm["messages"], tools,
                              getattr(data_cfg, "apply_chat_template_kwargs", None))
        if len(ids) > max_len:
            if data_cfg.filter_overlong_prompts:
                filtered += 1
                continue
            if data_cfg.truncation == "error":
                raise DataError(f"row {position}: prompt is {len(ids)} tokens > data.max_prompt_length={max_len} "
                                "(set data.filter_overlong_prompts=true or data.truncation=left|right|middle)")
            ids = _truncate(ids, max_len, data_cfg.truncation)
            truncated += 1
        records.append(PromptRecord(index=position, messages=norm["messages"], prompt_ids=ids,
                                    data_source=norm["data_source"], ground_truth=norm["ground_truth"],
                                    tools=tools, tools_kwargs=norm["tools_kwargs"], extra_info=norm["extra_info"]))
    return PromptDataset(records=records, num_rows=len(rows), num_filtered_overlong=filtered,
                         num_truncated=truncated)


def load_prompt_dataset(files: str | Iterable[str], **kwargs: Any) -> PromptDataset:
    """read_rows + build_prompt_dataset."""
    return build_prompt_dataset(read_rows(files), **kwargs)
