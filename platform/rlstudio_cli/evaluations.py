"""`rlstudio evaluations list|start RUN_ID` and `evaluations show|stop|delete RUN_ID EVAL_ID`: a run's
evaluations of its checkpoints, under /api/v1/runs/{id}/evaluations/ (docs/api.md "Evaluations of a
run's checkpoints"); with `--model MODEL_ID` in place of RUN_ID, a catalog model's own evaluations,
under /api/v1/models/{id}/evaluations/ ("Evaluations of a registered model"). An evaluation belongs to
its run or model in the API, so `show`, `stop` and `delete` take both ids. The body of `start` is the
API's: `checkpoints` (`--steps`), `include_base`, `dataset`, `k`, `max_prompts`, `gpus`, `sampling`
and, for a model, `reward`, each sent only when given (the API's defaults otherwise).
"""
from __future__ import annotations

import argparse
from typing import Any

from .client import Client, ClientError
from .common import confirmed, emit_json, err, out, when
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


def _owner(args) -> tuple[str, str]:
    """The API path of the run's or model's evaluations and its name in messages ("run 15", "model 3"),
    from RUN_ID or `--model` (one of the two)."""
    run = getattr(args, "run", None)
    if args.model is not None and run is not None:
        raise ClientError(f"give a RUN_ID or --model, not both (got run {run} and model {args.model})",
                          field="--model", exit_code=2)
    if args.model is not None:
        return f"models/{args.model}/evaluations/", f"model {args.model}"
    if run is None:
        raise ClientError("give the RUN_ID whose evaluations these are, or --model MODEL_ID", field="RUN_ID",
                          exit_code=2)
    return f"runs/{run}/evaluations/", f"run {run}"


def _one(args) -> tuple[str, str]:
    """`show`, `stop` and `delete`: the evaluation's API path and its name ("evaluation 4 of run 15"),
    from `RUN_ID EVAL_ID` or `--model MODEL_ID EVAL_ID`."""
    ids = args.ids
    if args.model is not None and len(ids) == 1:
        return f"models/{args.model}/evaluations/{ids[0]}/", f"evaluation {ids[0]} of model {args.model}"
    if args.model is None and len(ids) == 2:
        return f"runs/{ids[0]}/evaluations/{ids[1]}/", f"evaluation {ids[1]} of run {ids[0]}"
    want = "--model MODEL_ID EVAL_ID" if args.model is not None else "RUN_ID EVAL_ID"
    raise ClientError(f"expected {want}, got {len(ids)} id{'s' if len(ids) != 1 else ''}", field="EVAL_ID",
                      exit_code=2)


def cmd_evaluations_list(client: Client, args) -> int:
    path, _ = _owner(args)
    rows = client.get(path) or []
    if args.json:
        emit_json(rows)
        return 0
    table(("ID", "STATUS", "COLUMNS", "K", "PROMPTS", "GPUS", "DATASET", "REWARD", "OWNER", "CREATED"),
          [(e.get("id"), e.get("status"), e.get("columns"), e.get("k"), e.get("max_prompts"), e.get("gpus"),
            e.get("dataset"), e.get("reward"), e.get("owner"), when(e.get("created"))) for e in rows])
    return 0


def cmd_evaluations_start(client: Client, args) -> int:
    path, label = _owner(args)
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
    if args.reward is not None:
        body["reward"] = args.reward
    ev = client.post(path, body)
    if args.json:
        emit_json(ev)
        return 0
    line = (f"evaluation {ev.get('id')} of {label} ({cell(ev.get('columns'))}, k={cell(ev.get('k'))}): "
            f"{clean(ev.get('status'))}")
    if ev.get("queue_reason"):
        line += f" ({clean(ev.get('queue_reason'))})"
    out(line)
    return 0


def _show(ev: dict, *, prompts: bool) -> None:
    items = [("id", ev.get("id"))]
    items += [("model", ev.get("model"))] if ev.get("model") is not None else [("run", ev.get("run"))]
    items.append(("status", ev.get("status")))
    if ev.get("queue_reason"):
        items.append(("queue reason", ev.get("queue_reason")))
    items += [("dataset", ev.get("dataset"))] + ([("reward", ev.get("reward"))] if ev.get("reward") else [])
    items += [("columns", ev.get("columns")), ("k", ev.get("k")),
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
    path, _ = _one(args)
    ev = client.get(path, change=args.change)
    if args.json:
        emit_json(ev)
    else:
        _show(ev, prompts=args.prompts)
    return 0


def cmd_evaluations_stop(client: Client, args) -> int:
    """POST .../stop/: a queued evaluation ends at once, a running one's job is asked to stop."""
    path, name = _one(args)
    ev = client.post(f"{path}stop/")
    if args.json:
        emit_json(ev)
        return 0
    asked = " (its job was asked to stop)" if ev.get("status") != "stopped" and ev.get("stop_requested") else ""
    out(f"{name}: {clean(ev.get('status'))}{asked}")
    return 0


def cmd_evaluations_delete(client: Client, args) -> int:
    """DELETE a finished evaluation, its figures, transcripts and job folder (asked for first)."""
    path, name = _one(args)

    def question() -> str:
        ev = client.get(path)
        return f"delete {name} ({clean(ev.get('status'))}, {cell(ev.get('columns'))}) with its figures and transcripts?"

    if not confirmed(args, question, what="an evaluation"):
        err(f"{name} not deleted")
        return 1
    client.delete(path)
    out(f"{name} deleted")
    return 0
