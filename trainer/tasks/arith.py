"""The arithmetic tool-use demo task: "What is a op b?" answered with the calculator and ``#### n``.

Run: ``python -m trainer make-demo-data OUT_DIR [--train N --test N --sft N --seed S]`` writes
``train.jsonl`` and ``test.jsonl`` (RL rows in verl's format) and ``sft.jsonl`` (warm-start
conversations).

Task: a, b in 10..99, op in + - *. About 10% of the ordered operand pairs (a, b) are held out for
evaluation (chosen by a fixed hash, so the split never depends on a seed); every op of a held-out pair
is held out. The system prompt asks for the calculator tool and an answer line ``#### <number>``.

Warm start (SFT) data: ``tool_fraction`` (default 0.4) of the conversations call the calculator
(assistant tool call -> tool reply -> ``#### answer``); the rest answer directly, with the correct
answer only for easy sums and a plausible wrong number otherwise, so a short warm start teaches the
format but leaves the model unreliable (the GRPO demo needs room to improve).

Warm start: `trainer.models.demo.make_demo_model` trains first on conversations that all call the
tool (``tool_fraction=1.0``: the model learns to copy the operands into the call and the reply into
the answer), then on a mix (``tool_fraction=0.45``, at a third of the learning rate). Trained on
the 40% mix from the start, the demo model never learned to copy within 5 minutes (operand digits at
chance); see docs/demo.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

DATA_SOURCE = "arith"
OPS = ("+", "-", "*")
LOW, HIGH = 10, 99  # operands, inclusive
HELD_OUT_PERCENT = 10

SYSTEM_PROMPT = "Use the calculator tool, then give the answer as #### <number>."

# OpenAI function schema of the calculator tool; T-ROLLOUT's `calculator` tool must offer exactly
# this schema (the warm start renders it into the prompt, the RL prompts must match token for token).
CALCULATOR_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def question(a: int, b: int, op: str) -> str:
    """The user message for one problem."""
    return f"What is {a} {op} {b}?"


def answer(a: int, b: int, op: str) -> int:
    """The exact integer result."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown op {op!r}; allowed: {OPS}")


def is_held_out(a: int, b: int) -> bool:
    """True for the ~10% of operand pairs reserved for evaluation (seed independent)."""
    digest = hashlib.sha256(f"{a},{b}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < HELD_OUT_PERCENT


def problems(split: str) -> list[tuple[int, int, str]]:
    """All (a, b, op) of a split ("train" or "test"), in a fixed order."""
    if split not in {"train", "test"}:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    want_test = split == "test"
    return [
        (a, b, op)
        for a in range(LOW, HIGH + 1)
        for b in range(LOW, HIGH + 1)
        for op in OPS
        if is_held_out(a, b) == want_test
    ]


def prompt_messages(a: int, b: int, op: str) -> list[dict[str, str]]:
    """System + user messages of a problem (the tool schemas come from the tools config)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question(a, b, op)},
    ]


def tool_call_message(a: int, b: int, op: str) -> dict[str, Any]:
    """The assistant turn that calls the calculator on the problem."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "calculator",
                                              "arguments": {"expression": f"{a}{op}{b}"}}}
        ],
    }


def final_answer(value: int) -> str:
    """The answer line the reward parses."""
    return f"#### {value}"


def _direct_answer(a: int, b: int, op: str, rng: random.Random, correct_p: float) -> int:
    """A direct (no tool) answer: right with probability ``correct_p``, else off in one digit."""
    value = answer(a, b, op)
    if rng.random() < correct_p:
        return value
    sign = -1 if value < 0 else 1
    digits = list(str(abs(value)))
    pos = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[pos] and not (pos == 0 and d == "0"
                                                                      and len(digits) > 1)]
    digits[pos] = rng.choice(choices)
    return sign * int("".join(digits))


def make_rl_rows(split: str, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """RL prompt rows in verl's format, ``n`` distinct problems of ``split`` (all when None).

    Each row: ``{"prompt": [system, user], "data_source": "arith", "reward_model": {"style":
    "rule", "ground_truth": "1776"}, "extra_info": {"split", "index", "tools": ["calculator"]}}``.
    """
    pool = problems(split)
    rng = random.Random(seed)
    if n is None:
        chosen = pool[:]
        rng.shuffle(chosen)
    elif n > len(pool):
        raise ValueError(f"asked for {n} {split} rows but the split has only {len(pool)} problems")
    else:
        chosen = rng.sample(pool, n)
    return [
        {
            "prompt": prompt_messages(a, b, op),
            "data_source": DATA_SOURCE,
            "reward_model": {"style": "rule", "ground_truth": str(answer(a, b, op))},
            "extra_info": {"split": split, "index": i, "tools": ["calculator"],
                           "question": question(a, b, op)},
        }
        for i, (a, b, op) in enumerate(chosen)
    ]


def make_sft_conversations(n: int, seed: int = 0, tool_fraction: float = 0.4,
                           direct_correct_p: float = 0.25) -> list[dict[str, Any]]:
    """``n`` warm-start conversations on train-split problems (held-out pairs never appear).

    Each row is ``{"messages": [...], "tools": [CALCULATOR_SCHEMA]}``. With probability
    ``tool_fraction`` the assistant calls the calculator, reads the reply (a tool message with the
    plain integer, what the calculator tool returns) and answers ``#### value``; otherwise it answers
    directly, right only with probability ``direct_correct_p``.
    """
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must be in [0, 1], got {tool_fraction}")
    pool = problems("train")
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, op = rng.choice(pool)
        messages: list[dict[str, Any]] = prompt_messages(a, b, op)
        if rng.random() < tool_fraction:
            value = answer(a, b, op)
            messages += [tool_call_message(a, b, op),
                         {"role": "tool", "name": "calculator", "content": str(value)},
                         {"role": "assistant", "content": final_answer(value)}]
        else:
            guess = _direct_answer(a, b, op, rng, direct_correct_p)
            messages.append({"role": "assistant", "content": final_answer(guess)})
        rows.append({"messages": messages, "tools": [CALCULATOR_SCHEMA]})
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer make-demo-data",
                                 description="Write the arithmetic tool-use demo datasets.")
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=4096, help="RL train rows")
    ap.add_argument("--test", type=int, default=256, help="RL held-out rows")
    ap.add_argument("--sft", type=int, default=20000, help="warm-start conversations")
    ap.add_argument("--tool-fraction", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(out / "train.jsonl", make_rl_rows("train", args.train, args.seed))
    _write_jsonl(out / "test.jsonl", make_rl_rows("test", args.test, args.seed + 1))
    _write_jsonl(out / "sft.jsonl",
                 make_sft_conversations(args.sft, args.seed + 2, args.tool_fraction))
    print(f"wrote {out}/train.jsonl ({args.train}), test.jsonl ({args.test}), "
          f"sft.jsonl ({args.sft})")
    return 0
