"""`rlstudio evaluations list RUN_ID`, `evaluations start RUN_ID ...` and `evaluations show RUN_ID
EVAL_ID`: a run's evaluations of its checkpoints, under /api/v1/runs/{id}/evaluations/ (docs/api.md
"Evaluations of a run's checkpoints"). An evaluation belongs to its run in the API, so `show` takes
both ids. The body of `start` is the API's: `checkpoints` (`--steps`), `include_base`, `dataset`, `k`,
`max_prompts`, `gpus` and `sampling`, each sent only when given (the API's defaults otherwise).
"""
from __future__ import annotations

import argparse
from typing import Any

from .client import Client
from .common import emit_json, err, out, when
from .output import cell, clean, pairs, table

SAMPLING = ("temperature", "top_p", "top_k", "max_new_tokens", "seed")  # the API's `sampling` keys


def steps_arg(value: str) -> list[int]:
    """argparse's type for `--steps`: one step or several, comma-separated (each a whole number >= 0)."""
    steps = []
    for part in value.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit():
            raise argparse.ArgumentTypeError(f"a step is a whole number, 0 or more, got {part!r}")
        steps.append(int(part))
    return steps


def _column(figure: dict) -> Any:
    if figure.get("key") is not None:
        return figure.get("key")
    return "base" if figure.get("base") else figure.get("step")


def cmd_evaluations_list(client: Client, args) -> int:
    rows = client.get(f"runs/{args.run}/evaluations/") or []
    if args.json:
        emit_json(rows)
        return 0
    table(("ID", "STATUS", "COLUMNS", "K", "PROMPTS", "GPUS", "DATASET", "OWNER", "CREATED"),
          [(e.get("id"), e.get("status"), e.get("columns"), e.get("k"), e.get("max_prompts"), e.get("gpus"),
            e.get("dataset"), e.get("owner"), when(e.get("created"))) for e in rows])
    return 0


def cmd_evaluations_start(client: Client, args) -> int:
    body: dict[str, Any] = {"dataset": args.dataset, "k": args.k}
    if args.steps is not None:
        body["checkpoints"] = sorted({s for group in args.steps for s in group})
    if args.include_base:
        body["include_base"] = True
    if args.max_prompts is not None:
        body["max_prompts"] = args.max_prompts
    if args.gpus is not None:
        body["gpus"] = args.gpus
    sampling = {key: getattr(args, key) for key in SAMPLING if getattr(args, key) is not None}
    if sampling:
        body["sampling"] = sampling
    ev = client.post(f"runs/{args.run}/evaluations/", body)
    if args.json:
        emit_json(ev)
        return 0
    line = (f"evaluation {ev.get('id')} of run {args.run} ({cell(ev.get('columns'))}, k={cell(ev.get('k'))}): "
            f"{clean(ev.get('status'))}")
    if ev.get("queue_reason"):
        line += f" ({clean(ev.get('queue_reason'))})"
    out(line)
    return 0


def _show(ev: dict, *, prompts: bool) -> None:
    items = [("id", ev.get("id")), ("run", ev.get("run")), ("status", ev.get("status"))]
    if ev.get("queue_reason"):
        items.append(("queue reason", ev.get("queue_reason")))
    items += [("dataset", ev.get("dataset")), ("columns", ev.get("columns")), ("k", ev.get("k")),
              ("max prompts", ev.get("max_prompts")), ("gpus", ev.get("gpus")),
              ("sampling", ", ".join(f"{clean(k)}={cell(v)}" for k, v in (ev.get("sampling") or {}).items())),
              ("owner", ev.get("owner")), ("created", when(ev.get("created"))),
              ("finished", when(ev.get("finished")))]
    if ev.get("error"):
        items.append(("error", ev.get("error")))
    pairs(items)
    figures = ev.get("figures") or []
    if figures:
        out("")
        table(("COLUMN", "STEP", "MEAN@K", "PASS@K", "MAJ@K", "SAMPLES", "SECONDS", "SAMPLES/S"),
              [(_column(f), f.get("step"), f.get("mean_at_k"), f.get("pass_at_k"), f.get("maj_at_k"),
                f.get("samples"), f.get("seconds"), f.get("samples_per_s")) for f in figures])
    elif ev.get("status") == "succeeded":
        err("the evaluation reported no figures")
    if prompts:
        columns = [clean(c) for c in ev.get("columns") or []]
        out("")
        table(["POS", "CHANGE", "PROMPT"] + [f"MEAN@K {c}" for c in columns],
              [[p.get("position"), p.get("change"), p.get("prompt")]
               + [((p.get("cells") or {}).get(c) or {}).get("mean_at_k") for c in columns]
               for p in ev.get("prompts") or []], max_width=40)


def cmd_evaluations_show(client: Client, args) -> int:
    ev = client.get(f"runs/{args.run}/evaluations/{args.id}/", change=args.change)
    if args.json:
        emit_json(ev)
    else:
        _show(ev, prompts=args.prompts)
    return 0
