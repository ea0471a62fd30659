"""Reward of the arithmetic tool demo (data_source "arith" / "demo_tool_arith").

1.0 when the strict `#### <number>` answer (the last one, trainer.rewards.gsm8k) equals the ground truth as an integer, else
`format_score` when an answer line exists but is wrong, else 0.0. Integer comparison so that a
ground truth stored as int (1776) or str ("1776") both work; "-0" equals 0.
"""
from __future__ import annotations

from typing import Any

from trainer.rewards.gsm8k import extract_solution


def _as_int(text: Any) -> int | None:
    try:
        value = float(str(text).replace(",", "").strip())
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def compute_score(solution_str: str, ground_truth: Any, format_score: float = 0.0) -> float:
    answer = extract_solution(solution_str, method="strict")
    if answer is None:
        return 0.0
    got, want = _as_int(answer), _as_int(ground_truth)
    if got is not None and want is not None and got == want:
        return 1.0
    return float(format_score)
