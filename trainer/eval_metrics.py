"""Checkpoint evaluation figures: mean@k, pass@k (the unbiased estimator) and maj@k, as pure functions.

For one prompt sampled n times, c of them correct:
  pass@k = 1 - C(n - c, k) / C(n, k)   (Chen et al. 2021, "Evaluating Large Language Models Trained on
           Code": the chance that at least one of k samples drawn without replacement from the n is
           correct; n >= k; computed as a running product, never with huge binomials)
  mean@k = the mean reward-function score of the k samples
  maj@k  = whether the majority answer of the k samples is a correct one: samples are grouped by their
           extracted answer (`answer_of`: the last number in the text, else the stripped last line),
           the largest group wins (ties: the group seen first), and it counts as correct when most of its
           samples are correct.
A sample is correct when its score reaches `CORRECT_AT` (1.0: the built-in scorers give 1.0 for a
right answer and at most `format_score` otherwise). Each figure of a checkpoint is the mean over prompts.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

CORRECT_AT = 1.0
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def is_correct(score: float) -> bool:
    return float(score) >= CORRECT_AT - 1e-9


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one prompt: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n) or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_at_k(scores: Sequence[float]) -> float:
    """The mean score of one prompt's samples."""
    if not scores:
        raise ValueError("mean@k of no samples")
    return sum(float(s) for s in scores) / len(scores)


def answer_of(text: str) -> str:
    """The answer a response gives, for majority voting: its last number (commas dropped), else its
    last non-empty line, stripped."""
    numbers = _NUMBER.findall(text or "")
    if numbers:
        return numbers[-1].replace(",", "")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def maj_at_k(answers: Sequence[str], scores: Sequence[float]) -> float:
    """1.0 when the majority answer of one prompt's samples is correct, else 0.0."""
    if not answers or len(answers) != len(scores):
        raise ValueError("maj@k needs one answer per score, at least one")
    counts = Counter(answers)
    top = max(counts.values())
    winner = next(a for a in answers if counts[a] == top)  # ties: the answer seen first
    group = [is_correct(s) for a, s in zip(answers, scores) if a == winner]
    return 1.0 if sum(group) * 2 > len(group) else 0.0


@dataclass
class PromptFigures:
    """One prompt's figures at one checkpoint."""

    n: int
    correct: int
    mean_at_k: float
    pass_at_k: float
    maj_at_k: float


def prompt_figures(texts: Sequence[str], scores: Sequence[float], k: int) -> PromptFigures:
    """All figures of one prompt's n >= k samples."""
    n = len(scores)
    c = sum(is_correct(s) for s in scores)
    return PromptFigures(n=n, correct=c, mean_at_k=mean_at_k(scores), pass_at_k=pass_at_k(n, c, k),
                         maj_at_k=maj_at_k([answer_of(t) for t in texts], scores))


def checkpoint_figures(prompts: Sequence[PromptFigures]) -> dict[str, float]:
    """A checkpoint's figures: each the mean over its prompts."""
    if not prompts:
        raise ValueError("no prompts")
    m = len(prompts)
    return {"mean_at_k": sum(p.mean_at_k for p in prompts) / m,
            "pass_at_k": sum(p.pass_at_k for p in prompts) / m,
            "maj_at_k": sum(p.maj_at_k for p in prompts) / m}
