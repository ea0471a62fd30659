"""GSM8K answer scoring with verl's semantics (docs/design.md §4.4; verl's reward_score/gsm8k.py as of
its multi-turn interaction examples).

Both methods read only the last SOLUTION_CLIP_CHARS (300) characters of the text, as verl does (the
final answer is at the end; a multi-turn response holds every attempt, and the last one counts).
strict:   the LAST `#### <number>` match (number = -?[0-9.,]+), with "," and "$" removed;
          no match -> None.
flexible: the LAST number-like run (-?[0-9.,]+) that is not "" or "." (no comma stripping, as verl).
score:    extracted == ground_truth (string compare; a non-string ground truth compares as str) ->
          `score`; extracted but different -> `format_score`; nothing extracted -> 0.0.
"""
from __future__ import annotations

import re
from typing import Any

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")
SOLUTION_CLIP_CHARS = 300


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    solution_str = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(solution_str)
        return found[-1].replace(",", "").replace("$", "") if found else None
    for candidate in reversed(_NUMBER.findall(solution_str)):
        if candidate not in ("", "."):
            return candidate
    return None


def compute_score(solution_str: str, ground_truth: Any, method: str = "strict",
                  format_score: float = 0.0, score: float = 1.0) -> float:
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)
