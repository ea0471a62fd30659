"""The trainer's command line: ``python -m trainer <command> ...``.

Commands (each owned by one module exposing ``main(argv) -> int``):
  run              train with GRPO from a run spec or a recipe   (trainer.run)
  make-tiny-model  build a tiny Qwen2-architecture model locally (trainer.models.tiny)
  make-tiny-reward-model  build a tiny sequence-classification reward model (trainer.models.tiny_rm)
  make-demo-reward-model  train the demo's tiny reward model on rule-labelled transcripts (trainer.models.demo_rm)
  make-demo-data   write the arithmetic tool-use demo datasets   (trainer.tasks.arith)
  sft              supervised warm start on conversations        (trainer.sft)
  recipes          list the recipes and their descriptions       (trainer.recipes)
  evaluate         evaluate checkpoints from a platform-written spec (trainer.evaluate_job)
"""
from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("trainer.run", "train with GRPO from a run spec or a recipe"),
    "make-tiny-model": ("trainer.models.tiny", "build a tiny Qwen2-architecture model locally"),
    "make-tiny-reward-model": ("trainer.models.tiny_rm", "build a tiny sequence-classification reward model"),
    "make-demo-reward-model": ("trainer.models.demo_rm", "train the demo's tiny reward model"),
    "make-demo-data": ("trainer.tasks.arith", "write the arithmetic tool-use demo datasets"),
    "sft": ("trainer.sft", "supervised warm start on conversations"),
    "recipes": ("trainer.recipes", "list the recipes"),
    "evaluate": ("trainer.evaluate_job", "evaluate checkpoints from a spec (the platform's evaluation job)"),
}


def _usage() -> str:
    lines = ["usage: python -m trainer <command> [args...]", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)
