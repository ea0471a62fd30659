"""The prompts x checkpoints matrix of an evaluation: each prompt's change between the first and the
last checkpoint evaluated ("got better" / "got worse"), and the filter on it. Pure functions."""
from __future__ import annotations

from typing import Any

CHANGES = ("better", "worse", "same")


def change_of(cells: dict[str, dict[str, Any]], steps: list[int], *, eps: float = 1e-9) -> str:
    """better | worse | same: the prompt's mean@k at the last step against the first."""
    if len(steps) < 2:
        return "same"
    first, last = cells.get(str(steps[0])), cells.get(str(steps[-1]))
    if not first or not last:
        return "same"
    delta = float(last["mean_at_k"]) - float(first["mean_at_k"])
    return "better" if delta > eps else "worse" if delta < -eps else "same"


def matrix_rows(results: dict[str, Any], steps: list[int], change: str | None = None) -> list[dict[str, Any]]:
    """The prompts of `results`, each with its `change`, keeping only `change` when given."""
    rows = []
    for prompt in (results or {}).get("prompts", []):
        row = {**prompt, "change": change_of(prompt.get("cells", {}), steps)}
        if change is None or row["change"] == change:
            rows.append(row)
    return rows
