"""The model card (README.md) written into an export, from what the platform knows of the run.

`model_card(facts)` is pure: `CardFacts` is filled by the export service from the run's record, the
catalog, the stored metrics and the evaluations. The card has a Hugging Face YAML header
(base_model, library_name: transformers, pipeline_tag, tags) and a Markdown body: the base model
and datasets by their catalog names, the algorithm, LoRA settings, steps, the held-out reward (best
and last), the evaluations of that checkpoint, and the settings that differ from the trainer's
defaults (never a key the platform sets: no server path, no other user's name).

Names and values come from users, so they are kept plain text: control characters and line breaks
become spaces, length is bounded, Markdown and HTML punctuation is backslash-escaped in the body
(`plain`), and every header value is a JSON string (a valid YAML scalar, `yaml_str`).
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 200
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~!#(){}])")


@dataclass(frozen=True)
class HeldOut:
    metric: str
    best: float
    best_step: int
    last: float
    last_step: int


@dataclass(frozen=True)
class EvalFigures:
    model: str  # "step N" or "base model" (an evaluation's base column, next to the step's)
    dataset: str
    k: int
    prompts: int
    mean_at_k: float
    pass_at_k: float
    maj_at_k: float


@dataclass(frozen=True)
class CardFacts:
    run_id: int
    run_name: str
    step: int
    run_step: int  # the last step the run reached
    base_model: str  # the base model's catalog name
    datasets: list[tuple[str, str]]  # (role, catalog name)
    algorithm: str
    lora: dict[str, Any] | None  # {"rank", "alpha", "target_modules"} for a LoRA checkpoint
    settings: dict[str, Any]  # dotted user key -> value (only those that differ from the defaults)
    held_out: list[HeldOut] = field(default_factory=list)
    evaluations: list[EvalFigures] = field(default_factory=list)


def clean(text: Any, limit: int = MAX_TEXT) -> str:
    """One line of printable text: control and format characters and line breaks become spaces, runs
    of spaces one, at most `limit` characters."""
    s = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def plain(text: Any, limit: int = MAX_TEXT) -> str:
    """`clean` text with the characters Markdown or HTML would act on escaped (it renders as typed)."""
    return _MD_SPECIAL.sub(r"\\\1", clean(text, limit))


def yaml_str(text: Any) -> str:
    """`clean` text as a JSON string: a double-quoted YAML scalar nothing in the text can end (and
    with < > & as \\u escapes, so that no renderer that ignores the header sees markup in it)."""
    return json.dumps(clean(text)).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _num(value: float) -> str:
    return f"{value:.4f}"


def _value(value: Any) -> str:
    return plain(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def model_card(f: CardFacts) -> str:
    """The README.md text of an export."""
    tags = ["rlstudio", "reinforcement-learning", clean(f.algorithm, 40)] + (["lora"] if f.lora else [])
    lines = ["---",
             f"base_model: {yaml_str(f.base_model)}",
             "library_name: transformers",
             "pipeline_tag: text-generation",
             "tags:", *[f"- {yaml_str(t)}" for t in dict.fromkeys(tags) if t],
             "---", "",
             f"# {plain(f.run_name)}, step {f.step}", "",
             f"Exported by RL Studio from run {f.run_id}: its policy at step {f.step} "
             f"(the run reached step {f.run_step}).", "",
             "## Training", "",
             f"- Base model: {plain(f.base_model)}"]
    lines += [f"- {role.capitalize()} dataset: {plain(name)}" for role, name in f.datasets]
    lines.append(f"- Algorithm: {plain(f.algorithm)}")
    if f.lora:
        lines.append(f"- LoRA: rank {int(f.lora['rank'])}, alpha {_value(f.lora['alpha'])}, target modules "
                     f"{_value(f.lora['target_modules'])}. This folder holds the merged weights; the adapter "
                     "alone is in `lora_adapter/` beside it.")
    lines += ["", "## Held-out reward", ""]
    if f.held_out:
        lines += ["| metric | best | at step | last | at step |", "|---|---|---|---|---|"]
        lines += [f"| {plain(h.metric)} | {_num(h.best)} | {h.best_step} | {_num(h.last)} | {h.last_step} |"
                  for h in f.held_out]
    else:
        lines.append("The run reported no held-out reward.")
    lines += ["", "## Evaluations of this checkpoint", ""]
    if f.evaluations:
        lines += ["| model | dataset | k | prompts | mean@k | pass@k | maj@k |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {plain(e.model)} | {plain(e.dataset)} | {e.k} | {e.prompts} | {_num(e.mean_at_k)} | {_num(e.pass_at_k)} | "
                  f"{_num(e.maj_at_k)} |" for e in f.evaluations]
    else:
        lines.append(f"No evaluation of step {f.step} yet.")
    lines += ["", "## Configuration", "",
              "The settings of the run that differ from the trainer's defaults (the ones the platform "
              "sets, such as paths, are left out):", ""]
    if f.settings:
        lines += ["| key | value |", "|---|---|"]
        lines += [f"| {plain(k)} | {_value(v)} |" for k, v in sorted(f.settings.items())]
    else:
        lines.append("None: the trainer's defaults.")
    lines += ["", "## Use", "", "```python",
              "from transformers import AutoModelForCausalLM, AutoTokenizer",
              "",
              'model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")',
              'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")',
              "```", ""]
    return "\n".join(lines)
