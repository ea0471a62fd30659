"""Pages of a run's telemetry: the live run page, a sample's transcript and token view, a GRPO group,
one prompt across training, and runs compared side by side (/runs/compare/?ids=1,2,3). Server-rendered
from stored data (the run page holds the run's metric rows, at most 1,000 of them: telemetry/overview.py);
static/js/run_live.js fetches a zoomed range's rows from the overview API and makes the run page live (websocket with resume_after), static/js/telemetry_tokens.js colours the token view and keeps the transcript page's
tab and colouring in its address (?view=tokens&colour=adv: token_view_state, rendered by the server).
All model and tool text is rendered through Django's autoescaping (never |safe).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.contrib import messages as django_messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from rlstudio.accounts.teams import team_names_for_sharing
from rlstudio.api.errors import ApiError
from rlstudio.api.params import int_param
from rlstudio.runs.models import RunStatus
from rlstudio.runs.preview import memory as memory_estimate
from rlstudio.runs.shapes import ShapeUnknown, StepShapes
from rlstudio.runs.selectors import (
    latest_reward,
    run_config_for,
    run_get_for,
    run_header_context,
    run_shared_teams,
    run_shared_users,
)

from . import codec
from . import overview as ov
from . import selectors as sel
from .api import STEP_MAX, prompt_key_from, sample_filter_from
from .models import RetentionMode, RunRetention, Sample
from .tensorboard import tensorboard_folder

SAMPLES_PAGE = 50
SAMPLES_ORDER = "-step"


def _header(run) -> dict[str, Any]:
    """What the header shows; the runs app's run_header_context (controls, badges, times) is merged on top."""
    progress = min(100, round(100 * run.step / run.total_steps)) if run.total_steps else None
    return {"row": {"run": run, "reward": latest_reward(run), "progress": progress}}


def _flash(request, run) -> list[dict[str, str]]:
    """The request's flash messages; one saying this run "is <status>." (what launching it says) is
    split into its prefix, and the page shows the run's status now after it (kept live)."""
    out = []
    for m in django_messages.get_messages(request):
        text = str(m)
        for prefix in (f"Run “{run.name}” is ", f"Demo run “{run.name}” is "):
            if text.startswith(prefix) and text.endswith(".") and text[len(prefix):-1] in RunStatus.values:
                out.append({"tags": m.tags, "prefix": prefix})
                break
        else:
            out.append({"tags": m.tags, "text": text})
    return out


@login_required
def run_detail(request, run_id: int):
    run = run_get_for(user=request.user, run_id=run_id)
    ctx = _header(run)
    ctx.update(run_header_context(run=run, user=request.user))
    ctx["flash"] = _flash(request, run)
    try:
        flt = sample_filter_from(request.GET)
    except ApiError:
        flt = sel.SampleFilter()
    if not request.GET.get("order"):  # the table starts at the newest step (the API's default is seq)
        flt = dataclasses.replace(flt, order=SAMPLES_ORDER)
    samples = sel.sample_rows(samples=list(sel.samples_for(run=run, flt=flt)[:SAMPLES_PAGE]))
    retention = RunRetention.objects.filter(run=run).first()
    # Read before the rows: the socket replays every event after it, so none falls between the two.
    last_seq = sel.last_seq(run_id=run.pk)
    # At most ov.POINTS_DEFAULT rows for the charts, whatever the run's length (buckets of consecutive
    # steps past it); run_live.js fetches a zoomed range's rows from the overview API.
    charts = ov.overview(run=run, max_points=ov.POINTS_DEFAULT)
    memory, memory_truncated = sel.memory_window(run=run)  # the latest points: a long run has tens of thousands
    ctx.update({
        "run": run,
        "shared_users": run_shared_users(run=run) if ctx["can_manage"] else [],
        "shared_teams": run_shared_teams(run=run) if ctx["can_manage"] else [],
        "team_choices": team_names_for_sharing(user=request.user) if ctx["can_manage"] else [],
        # A reader (not the owner or staff) sees the config without the platform's keys (server paths).
        "config_json": json.dumps(run_config_for(user=request.user, run=run), indent=2, sort_keys=True),
        "live": {"run_id": run.pk, "last_seq": last_seq, "status": run.status,
                 "metrics": ov.columns(charts.steps), "metrics_points": charts.points,
                 "metrics_downsampled": charts.downsampled, "chart_points": ov.POINTS_DEFAULT,
                 "metrics_overview_api": f"/api/v1/runs/{run.pk}/metrics/overview/",
                 "memory": memory_table(memory),
                 "samples_api": f"/api/v1/runs/{run.pk}/samples/", "page_size": SAMPLES_PAGE},
        # The new-run form's estimate of this run's config (with LoRA, next to full fine-tuning's).
        "memory_estimate": memory_estimate(model=run.model, config=run.config, gpus=run.gpus,
                                           val_dataset=run.val_dataset),
        "chart_rows": len(charts.steps),
        "memory_points": len(memory), "memory_from_step": memory[0]["step"] if memory else None,
        "memory_truncated": memory_truncated, "memory_points_max": f"{sel.MEMORY_POINTS_DEFAULT:,}",
        "samples": samples,
        "samples_recorded": samples_recorded(run.config),
        "sample_filter": flt,
        "logs": sel.logs_tail(run=run, user=request.user, tail=200),
        "retention": retention.get_mode_display() if retention else RetentionMode.ALL.label,
        "retention_k": retention.k if retention else None,
        "annotate_draft": _annotate_draft(request, run),
        # The tensorboard sink's event files in the run's folder: offered as one .tar.gz.
        "tensorboard_logs": tensorboard_folder(run) is not None,
    })
    # The page's data (up to 1,000 metric rows and the memory timeline: megabytes on a long run) through orjson.
    ctx["live_script"] = codec.script_json(ctx["live"], "live-data")
    return render(request, "runs/run_detail.html", ctx)


MEMORY_FIELDS = ("seq", "t", "step", "phase", "device", "allocated", "reserved", "peak", "rss", "rank", "device_used")


def memory_table(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's memory points as a table: each field named once (5,000 points naming 12 fields each
    were two thirds of a long run's page); static/js/run_live.js reads it back into points."""
    return {"fields": list(MEMORY_FIELDS), "rows": [[p[f] for f in MEMORY_FIELDS] for p in points]}


def samples_recorded(config: dict[str, Any]) -> dict[str, int] | None:
    """What the trainer records of a step (report.samples_per_step): {budget, reported (at most),
    trajectories (of the step's batch)}; None when the config does not say (an older or odd one)."""
    budget = (config.get("report") or {}).get("samples_per_step") if isinstance(config, dict) else None
    if not isinstance(budget, int) or isinstance(budget, bool):
        return None
    try:
        shapes = StepShapes.of(config)
    except ShapeUnknown:
        return None
    return {"budget": budget, "reported": shapes.step_reported(budget), "trajectories": shapes.trajectories}


def _annotate_draft(request, run) -> dict | None:
    """What was typed in this run's tags-and-note form when it was refused (shown once), else None."""
    from rlstudio.runs.control_views import ANNOTATE_DRAFT

    draft = request.session.pop(ANNOTATE_DRAFT, None)
    return draft if isinstance(draft, dict) and draft.get("run") == run.pk else None


def _pretty_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for the chat view, with each tool call's arguments as indented JSON text; `final` marks
    the answer (the last assistant message, when only interaction replies follow it) and `reply` a
    user message after the first assistant turn (an interaction's, multi_turn.interaction)."""
    roles = [m.get("role", "") if isinstance(m, dict) else "" for m in messages]
    assistant = [i for i, role in enumerate(roles) if role == "assistant"]
    final = assistant[-1] if assistant and all(r == "user" for r in roles[assistant[-1] + 1:]) else None
    out = []
    for i, m in enumerate(messages):
        calls = []
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):  # model text: any string at all
                    pass
            calls.append({"name": str(fn.get("name", "")) if isinstance(fn, dict) else "",
                          "arguments": json.dumps(args, indent=2, ensure_ascii=False)
                          if not isinstance(args, str) else args})
        # A tool call the trainer could not parse: the turn's text as the model wrote it, and why.
        raw = m.get("raw") if isinstance(m.get("raw"), str) else ""
        errors = [f"{e.get('reason', '')}: {e.get('message', '')}" for e in m.get("tool_call_errors") or []
                  if isinstance(e, dict)]
        out.append({"role": m.get("role", ""), "content": m.get("content"), "tool_calls": calls,
                    "raw": raw, "call_errors": errors, "final": i == final,
                    "reply": roles[i] == "user" and bool(assistant) and i > assistant[0]})
    return out


def _tokens(view: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not view:
        return []
    ref = view.get("ref_logprobs") or [None] * len(view["ids"])
    rollout = view.get("rollout_logprobs") or [None] * len(view["ids"])
    # gap: the rollout engine's log-prob minus the actor's, on the tokens the engine sampled (the
    # training-inference mismatch of that token; rollout correction's log r with the sign flipped).
    return [{"id": i, "piece": p, "mask": m, "lp": lp, "ref": r, "adv": a, "rollout": ro,
             "gap": round(ro - lp, 6) if ro is not None and lp is not None else None}
            for i, p, m, lp, r, a, ro in zip(view["ids"], view["pieces"], view["loss_mask"],
                                             view["logprobs"], ref, view["advantages"], rollout)]


# The token view's colourings, in the select's order: (value, label, what the colours mean, what the
# token view must carry for it: None, "ref" or "rollout"). The first is the default; ?colour= takes a value.
LOG_PROB_KEY = "orange: less likely than the others in view (the least likely the deepest); none: the most likely"
TOKEN_COLOURINGS = (
    ("lp", "log-prob", LOG_PROB_KEY, None),
    ("ref", "reference log-prob", LOG_PROB_KEY, "ref"),
    ("adv", "advantage", "green: advantage above 0; red: below 0 (deeper: larger)", None),
    ("rollout", "rollout log-prob", LOG_PROB_KEY, "rollout"),
    ("gap", "rollout − actor log-prob (mismatch)",
     "blue: the rollout engine more sure of the token than the actor; purple: less sure (deeper: a larger gap)",
     "rollout"),
)


def token_view_state(params, *, has_tokens: bool, has_ref: bool, has_rollout: bool) -> dict[str, Any]:
    """The transcript page's view from its address: `view` ("tokens" for ?view=tokens when the sample has a
    token view, else "chat") and `colourings` (the select's options, the one ?colour= names selected, the
    first when it names none the sample offers). An unknown or unavailable value is the default, never an
    error: the address is a shared link, static/js/telemetry_tokens.js writes it back as the user switches."""
    carried = {None: True, "ref": has_ref, "rollout": has_rollout}
    offered = [(value, label, legend) for value, label, legend, needs in TOKEN_COLOURINGS if carried[needs]]
    wanted = params.get("colour")
    chosen = wanted if any(value == wanted for value, _, _ in offered) else offered[0][0]
    return {"view": "tokens" if has_tokens and params.get("view") == "tokens" else "chat",
            "colour": chosen, "colour_default": offered[0][0],
            "colourings": [{"value": value, "label": label, "legend": legend, "selected": value == chosen}
                           for value, label, legend in offered]}


# The parts of a combined reward (trainer.rewards.combine.PART_KEYS) as the sample page lists them:
# (reward_extra key, label, the reward_model weight that multiplies it).
REWARD_PARTS = (("rule_score", "Reward function (rule)", "rule_weight"), ("rm_score", "Reward model", "rm_weight"),
                ("tool_reward", "Tools' rewards", "tool_reward_weight"),
                ("overlong_reward", "Overlong penalty", None), ("total", "Total", None))


def reward_breakdown(extra: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per reward part the sample recorded: its value, the run's weight and the weighted value
    (a part the run did not compute, e.g. no rule for the data source, shows as absent)."""
    weights = (config or {}).get("reward_model") or {}
    rows = []
    for key, label, weight_key in REWARD_PARTS:
        if key not in (extra or {}):
            continue
        value = extra[key]
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        weight = weights.get(weight_key) if weight_key else None
        weight = weight if isinstance(weight, (int, float)) and not isinstance(weight, bool) else None
        rows.append({"key": key, "label": label, "value": number, "weight": weight,
                     "weighted": number * weight if number is not None and weight is not None else None})
    return rows


@login_required
def sample_detail(request, run_id: int, sample_id: int):
    run = sel.run_visible(user=request.user, run_id=run_id)
    sample = sel.sample_detail_dict(sel.sample_get(run=run, sample_id=sample_id))
    tokens = _tokens(sample["token_view"])
    has_ref = bool(sample["token_view"] and sample["token_view"].get("ref_logprobs"))
    has_rollout = bool(sample["token_view"] and sample["token_view"].get("rollout_logprobs"))
    return render(request, "telemetry/sample_detail.html", {
        "run": run, "sample": sample, "transcript": _pretty_tool_calls(sample["messages"]),
        "reward_parts": json.dumps(sample["reward_extra"], indent=2, ensure_ascii=False),
        "reward_breakdown": reward_breakdown(sample["reward_extra"], run.config),
        "ground_truth": json.dumps(sample["ground_truth"], ensure_ascii=False),
        "tokens": tokens, "has_ref": has_ref, "has_rollout": has_rollout,
        **token_view_state(request.GET, has_tokens=bool(tokens), has_ref=has_ref, has_rollout=has_rollout),
    })


def _step_param(request) -> int:
    """`?step=` of a group page: an ApiError naming `step` when it is missing or not a step (the page
    answers 400 with the message, not a 404 that reads as if the run were not there)."""
    step = int_param(request.GET, "step", minimum=0, maximum=STEP_MAX)
    if step is None:
        raise ApiError("step is required: the training step whose groups to show, e.g. ?step=3", field="step")
    return step


def _with_prompts(run, step: int, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step's groups, each with its prompt's text (`prompt_short`, `prompt`) and split (`prompt_split`:
    "val" marks a validation draw) read from one sample of it, so the overview names each prompt by what
    it asks, not only by its 32-digit uid."""
    firsts = list(Sample.objects.filter(run=run, step=step).only(*sel.SUMMARY_FIELDS)
                  .order_by("uid", "index", "seq").distinct("uid"))
    by_uid = {row["uid"]: row for row in sel.sample_rows(samples=firsts)}
    out = []
    for g in groups:
        row = by_uid.get(g["uid"], {})
        out.append({**g, "prompt": row.get("prompt", ""), "prompt_short": row.get("prompt_short", ""),
                    "prompt_split": row.get("prompt_split")})
    return out


@login_required
def group_detail(request, run_id: int):
    """`?step=&uid=`: one group side by side; `?step=` alone: every group of the step, flat ones flagged."""
    run = sel.run_visible(user=request.user, run_id=run_id)
    try:
        step = _step_param(request)
    except ApiError as exc:
        return render(request, "400.html", {"message": str(exc.detail), "field": exc.field}, status=400)
    uid = request.GET.get("uid") or ""
    if not uid:
        return render(request, "telemetry/step_groups.html",
                      {"run": run, "step": step, "groups": _with_prompts(run, step, sel.groups_of_step(run=run, step=step))})
    group = sel.group_for(run=run, step=step, uid=uid)
    for s in group["samples"]:
        s["final"] = next((m.get("content") or m.get("raw") for m in reversed(s["messages"])
                           if m.get("role") == "assistant" and (m.get("content") or m.get("raw"))), "")
    return render(request, "telemetry/group_detail.html", {"run": run, "group": group})


@login_required
def prompt_history(request, run_id: int):
    """One prompt of the run at every step it was drawn: `?prompt_split=&prompt_hash=` (its stable key,
    looked up within this run only). `?uid=` (one draw's id, as older links name it) redirects to the
    key of that draw's samples, or shows that draw alone where they carry none (samples stored before
    the trainer reported the key: their history is unknown)."""
    run = sel.run_visible(user=request.user, run_id=run_id)
    try:
        split, digest = prompt_key_from(request.GET)
    except ApiError as exc:
        return render(request, "400.html", {"message": str(exc.detail), "field": exc.field}, status=400)
    uid = request.GET.get("uid") or ""
    if digest is None or split is None:
        if not uid:
            field = "prompt_split" if digest is not None else "prompt_hash"
            return render(request, "400.html", {"message": f"{field} is required (a prompt is named by "
                                                           "prompt_split and prompt_hash, or by a draw's uid)",
                                                "field": field}, status=400)
        key = sel.prompt_key_of(run=run, uid=uid)
        if key is not None:
            return redirect(f"{reverse('telemetry:prompt', args=[run.pk])}?"
                            f"{urlencode({'prompt_split': key[0], 'prompt_hash': key[1]})}")
        draws = sel.draw_history(run=run, uid=uid)
    else:
        draws = sel.prompt_history(run=run, prompt_split=split, prompt_hash=digest)
    text = sel.prompt_text(sample_id=draws[0]["samples"][0]["id"]) if draws else ""
    return render(request, "telemetry/prompt_history.html", {
        "run": run, "uid": uid, "prompt_split": split, "prompt_hash": digest, "steps": draws,
        "known": digest is not None, "prompt": text, "rows": sorted({d["prompt_index"] for d in draws
                                                                     if d["prompt_index"] is not None}),
        "curve": learning_curve(draws)})


CURVE_W, CURVE_H, CURVE_PAD = 640, 180, 28


def learning_curve(draws: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An SVG's coordinates for one prompt's rewards over steps: a dot per sample (its reward) and the
    line through each draw's group mean; None with fewer than one reward to draw."""
    rewards = [s["reward"] for d in draws for s in d["samples"] if s["reward"] is not None]
    means = [d["mean"] for d in draws if d["mean"] is not None]
    if not rewards:
        return None
    lo, hi = min(rewards + means), max(rewards + means)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    steps = [d["step"] for d in draws]
    s0, s1 = min(steps), max(steps)

    def x(step: int) -> float:
        span = CURVE_W - 2 * CURVE_PAD
        return round(CURVE_PAD + (span / 2 if s1 == s0 else span * (step - s0) / (s1 - s0)), 1)

    def y(v: float) -> float:
        return round(CURVE_H - CURVE_PAD - (CURVE_H - 2 * CURVE_PAD) * (v - lo) / (hi - lo), 1)

    return {"w": CURVE_W, "h": CURVE_H, "lo": lo, "hi": hi, "first": s0, "last": s1,
            "y_lo": y(lo), "y_hi": y(hi), "x_first": x(s0), "x_last": x(s1),
            "mean_points": " ".join(f"{x(d['step'])},{y(d['mean'])}" for d in draws if d["mean"] is not None),
            "dots": [{"x": x(d["step"]), "y": y(s["reward"]), "step": d["step"], "reward": s["reward"]}
                     for d in draws for s in d["samples"] if s["reward"] is not None]}


# Colours of the compared runs, in order (Tableau 10, as the run page's charts): the summary's swatch
# and the run's lines share one.
COMPARE_COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                   "#9c755f", "#bab0ac")


@login_required
def run_compare(request):
    """`?ids=1,2,3` (or `ids` repeated, as the runs list's checkboxes send it): the runs' metrics
    overlaid (`?metrics=` repeated, or `a,b`: those charts; else the default ones), their summary and the config keys
    that differ. The data is compare.compare_runs's (the
    API's), embedded with json_script; static/js/run_compare.js draws it and fetches other metrics
    from GET /api/v1/runs/compare/. A run the user may not read is a 404."""
    from . import compare

    try:
        ids = compare.parse_ids(request.GET.getlist("ids"))
        metrics = compare.parse_metrics(request.GET.getlist("metrics"))  # the charts shown (run_compare.js keeps them here)
        data = compare.compare_runs(user=request.user, run_ids=ids, metrics=metrics)
    except ValueError as exc:
        return render(request, "runs/run_compare.html", {"error": str(exc)}, status=400)
    for i, r in enumerate(data["runs"]):
        r["colour"] = COMPARE_COLOURS[i % len(COMPARE_COLOURS)]
        seconds = int(r["duration_s"]) if r["duration_s"] is not None else None
        r["duration"] = f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds is not None else ""
        r["held"] = r["held_out"].get(data["held_out_metric"]) if data["held_out_metric"] else None
    rows = [{"key": d["key"], "cells": [json.dumps(v, ensure_ascii=False) if p else None
                                         for v, p in zip(d["values"], d["present"])]}
            for d in data["config_diff"]]
    page = {k: v for k, v in data.items() if k != "config_diff"}  # the table is in the HTML already
    return render(request, "runs/run_compare.html", {
        "compare": data, "runs": data["runs"], "diff_rows": rows,
        "page": {"ids": [r["id"] for r in data["runs"]], "api": "/api/v1/runs/compare/",
                 "max_metrics": compare.MAX_METRICS, **page},
    })
