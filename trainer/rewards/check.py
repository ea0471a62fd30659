"""Score rows with a reward function in a process of its own: the check the platform runs before it
accepts an operator's reward function, and the scoring of a dataset page's reward check with one.

    python -m trainer.rewards.check REQUEST.json RESULT.json

REQUEST: {"path": "/abs/file.py"} or {"module": "dotted.module"}, plus "function" (default
compute_score) and "rows": [{"data_source", "solution_str", "ground_truth", "extra_info"}, ...].
The function is loaded as a run's trainer loads it (`load_custom_function` on the file; a module is
first resolved to its file with `module_file`) and called as the trainer's loop calls it:
`fn(data_source, solution_str, ground_truth, {**extra_info, "tool_rewards": [], "num_turns": 1, "turn_scores": []})`.
RESULT gets one JSON object:
    {"ok": true, "path": "<file loaded>", "results": [{"score": 1.0, "extra": {...}} | {"error": "..."}]}
    {"ok": false, "stage": "load" | "function", "error": "<why, with the file and line>"}
A row's score must be a finite number, or a dict whose "score" is one (the other keys are logged by
the trainer); anything else is that row's error. The exit status is 0 once RESULT is written; no
RESULT means the process died (the platform also kills it after its time limit).
"""
from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any

MAX_ERROR_CHARS = 4000


def describe_error(exc: BaseException) -> str:
    """`Type: message` plus where it happened (the innermost frames; a SyntaxError's file and line)."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "".join(traceback.format_list(frames)).rstrip()
    if where and not isinstance(exc, SyntaxError):
        text = f"{text}\n{where}"
    return text[:MAX_ERROR_CHARS]


def score_value(out: Any) -> tuple[float, dict[str, Any]]:
    """(score, extra fields) of what a reward function returned; ValueError naming what is wrong."""
    extra: dict[str, Any] = {}
    value = out
    if isinstance(out, dict):
        if "score" not in out:
            raise ValueError(f"returned a dict without 'score' (keys: {sorted(map(str, out))})")
        value = out["score"]
        extra = {str(k): v for k, v in out.items() if k != "score"}
    if value is None or isinstance(value, (str, bytes, bool, list, tuple, dict)):
        raise ValueError(f"returned {type(value).__name__} {value!r:.80}; expected a number (float) "
                         "or a dict with a numeric 'score'")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"returned {type(value).__name__}, which is not a number") from None
    if not math.isfinite(score):
        raise ValueError(f"returned {score}, which is not a finite number")
    return score, json.loads(json.dumps(extra, default=str))


def score_rows(request: dict[str, Any]) -> dict[str, Any]:
    """The check's result for one request (never raises for a broken function)."""
    from trainer.rewards import custom_function, load_custom_module, module_file

    function = request.get("function") or "compute_score"
    try:
        path = request.get("path") or module_file(str(request.get("module") or ""))
        module = load_custom_module(path)
    except BaseException as exc:  # SyntaxError, ImportError, SystemExit from the file's top level...
        return {"ok": False, "stage": "load", "error": describe_error(exc)}
    try:
        fn = custom_function(module, function)
    except (AttributeError, TypeError) as exc:
        return {"ok": False, "stage": "function", "error": str(exc)}
    results = []
    for row in request.get("rows") or []:
        extra_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        try:
            out = fn(row.get("data_source") or "", str(row.get("solution_str") or ""), row.get("ground_truth"),
                     {**extra_info, "tool_rewards": [], "num_turns": 1, "turn_scores": []})
            score, extra = score_value(out)
            results.append({"score": score, "extra": extra})
        except BaseException as exc:  # sys.exit() in a reward function is that row's error too
            results.append({"error": describe_error(exc)})
    return {"ok": True, "path": str(Path(path).resolve()), "results": results}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trainer.rewards.check REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    result = score_rows(request)
    Path(args[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
