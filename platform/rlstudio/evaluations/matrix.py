"""The prompts x columns matrix of an evaluation: each prompt's change between the first and the last
column evaluated ("got better" / "got worse"; the base model is the first column when included), and
the filter on it. Columns are the cells' keys ("base", or a step as a string). Pure functions."""
from __future__ import annotations

from typing import Any

CHANGES = ("better", "worse", "same")


def change_of(cells: dict[str, dict[str, Any]], columns: list, *, eps: float = 1e-9) -> str:
    """better | worse | same: the prompt's mean@k in the last column against the first."""
    if len(columns) < 2:
        return "same"
    first, last = cells.get(str(columns[0])), cells.get(str(columns[-1]))
    if not first or not last:
        return "same"
    delta = float(last["mean_at_k"]) - float(first["mean_at_k"])
    return "better" if delta > eps else "worse" if delta < -eps else "same"


def matrix_rows(results: dict[str, Any], columns: list, change: str | None = None) -> list[dict[str, Any]]:
    """The prompts of `results`, each with its `position` (what its transcripts are read by) and its
    `change`, keeping only `change` when given."""
    rows = []
    for position, prompt in enumerate((results or {}).get("prompts", [])):
        row = {**prompt, "position": position, "change": change_of(prompt.get("cells", {}), columns)}
        if change is None or row["change"] == change:
            rows.append(row)
    return rows
