"""Short-answer and multiple-choice scoring: the rewards `exact_match` and `multiple_choice`.

exact_match: the response's final answer, normalised, equals the ground truth's (or one of a list's).
  The final answer is, in this order: the last <answer>...</answer> block, the last \\boxed{...}, the
  text after the last "####", the rest of the line after the last "answer:" / "answer is", else the
  whole response. Normalised: case-folded, whitespace collapsed, surrounding punctuation, quotes and
  markdown emphasis stripped ("**Paris**." == "paris"). Articles and inner punctuation are kept.
multiple_choice: the option letter A-J the response chose equals the ground truth's letter. The letter
  is, in this order: the last \\boxed{C}; the first letter after the last "answer" ("Answer: C",
  "the answer is (C)", "**Answer:** C"); the last "(C)" or "[C]"; the last capital A-J standing alone
  before a ")", ".", ",", ":", ";", "]", "*" or the end of a line. The ground truth is a letter ("C",
  "(c)", "C.") too; anything else scores 0.

Every scan is linear in the response's length (bounded windows, no backtracking patterns).
"""

from __future__ import annotations

import re
import string
from typing import Any

from trainer.rewards.math_answer import last_boxed, unwrap

MAX_ANSWER_CHARS = 1000
_EDGE = string.punctuation + string.whitespace + "\u201c\u201d\u2018\u2019\u00ab\u00bb\u00b4`"
_MARKERS = ("answer:", "answer is")


def _after_last_marker(text: str) -> str | None:
    """The rest of the line after the last "answer:" / "answer is" of `text` (case-insensitive)."""
    low = text.lower()
    at, marker = max((low.rfind(m), m) for m in _MARKERS)
    if at < 0:
        return None
    return text[at + len(marker) :].split("\n", 1)[0]


def final_answer(text: str) -> str:
    """The final answer of a response (see the module docstring for the order)."""
    low = text.lower()
    close = low.rfind("</answer>")
    open_ = low.rfind("<answer>", 0, close) if close >= 0 else -1
    if open_ >= 0:
        return text[open_ + len("<answer>") : close]
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    at = text.rfind("####")
    if at >= 0:
        return text[at + 4 :]
    marked = _after_last_marker(text)
    return marked if marked is not None else text


def normalize_text(text: str) -> str:
    """Case-folded, whitespace collapsed, surrounding punctuation, quotes and emphasis stripped."""
    if len(text) > MAX_ANSWER_CHARS:  # a final answer this long is compared as it is
        return text.strip()
    return " ".join(text.split()).strip(_EDGE).casefold()


def _truths(ground_truth: Any) -> list[str]:
    items = list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    return [str(item) for item in items if item is not None]


def exact_match_score(
    solution_str: str, ground_truth: Any, format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` when the final answer matches a ground truth after normalisation, else `format_score`
    (0.0 for an empty answer)."""
    answer = normalize_text(final_answer(solution_str or ""))
    if not answer:
        return 0.0
    truths = {normalize_text(t) for t in _truths(ground_truth)}
    return float(score) if answer in truths else float(format_score)


LETTERS = "ABCDEFGHIJ"
_AFTER_ANSWER = re.compile(
    r"[\s:*_=\-]*(?:is\b|was\b|would be\b|should be\b)?[\s:*_=\-]*"
    r"(?:option\s|choice\s)?[\s(\[$*]*(?:\\text(?:bf)?\{)?\s*([A-J])(?![A-Za-z])"
)
_BRACKETED = re.compile(r"[(\[]([A-J])[)\]]")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9\\])([A-J])(?=[).,:;\]*]|[ \t]*(?:\n|$))")
_WINDOW = 40


def _letter_of(text: str) -> str | None:
    """The letter of a short text that is only an option ("C", "(c)", "\\text{C}", "C."), else None."""
    letter = unwrap(text, ("text", "textbf", "mathrm", "mathbf")).strip().strip("()[]{}.*$ ")
    return letter.upper() if len(letter) == 1 and letter.upper() in LETTERS else None


def extract_choice(text: str) -> str | None:
    """The option letter A-J a response chose (see the module docstring for the order); None."""
    boxed = last_boxed(text)
    if boxed is not None and len(boxed) <= _WINDOW:
        letter = _letter_of(boxed)
        if letter:
            return letter
    at = text.lower().rfind("answer")
    if at >= 0:
        m = _AFTER_ANSWER.match(text[at + 6 : at + 6 + _WINDOW])
        if m:
            return m.group(1)
    last = None
    for last in _BRACKETED.finditer(text):
        pass
    if last is not None:
        return last.group(1)
    for last in _STANDALONE.finditer(text):
        pass
    return last.group(1) if last is not None else None


def multiple_choice_score(
    solution_str: str, ground_truth: Any, format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` when the chosen letter is a ground truth's letter; `format_score` when a letter was
    chosen but is wrong (or the ground truth is no letter); 0.0 when none was chosen."""
    choice = extract_choice(solution_str or "")
    if choice is None:
        return 0.0
    truths = {_letter_of(t) for t in _truths(ground_truth) if len(t) <= _WINDOW}
    return float(score) if choice in truths else float(format_score)
