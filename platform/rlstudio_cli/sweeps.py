"""The `rlstudio sweeps ...` commands: list (GET /api/v1/sweeps/), show (GET /api/v1/sweeps/{id}/: the
mode, seed, axes and a row per run with its axis values, state, step, latest reward and the best run
marked), launch (POST /api/v1/sweeps/: a run launch's flags plus `--axis`, and `--random --runs N
[--seed S]` for random search) and stop (POST /api/v1/sweeps/{id}/stop/, asked first unless `--yes`).

`--axis KEY=V1,V2,...` is a list of values, each read as the web form reads it (`parse_value`);
`--axis KEY=MIN..MAX[:log][:int]` (or, as in the web form, `'MIN..MAX log int'`) a range, for random
search. The client only shapes the axes; the API checks them and names the field it refuses
(`axes[0].min`, `runs`, `seed`).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from .client import Client, ClientError
from .common import confirmed, emit_json, err, footer, out, paged, when
from .output import cell, clean, fmt_number, pairs, table
from .runs import _load_config_file, overrides

# A range: MIN..MAX, then words (log / linear, int / float) after a colon or a space each.
RANGE = re.compile(r"^(?P<low>[^\s:]+?)\.\.(?P<high>[^\s:]+)(?P<words>(?:[\s:]+\w+)*)\s*$")
INT = re.compile(r"[+-]?\d+")
SCALES, TYPES = ("linear", "log"), ("float", "int")
# YAML 1.1's booleans and nulls, as the web form's values box reads them.
TRUE, FALSE, NULL = {"true", "yes", "on"}, {"false", "no", "off"}, {"null", "~", ""}


def _axis_error(text: str, message: str) -> ClientError:
    return ClientError(f"{text[:80]!r}: {message}", field="--axis", exit_code=2)


def parse_value(text: str) -> Any:
    """One value of a list axis, as the web form reads it (a YAML scalar): a JSON scalar (`"a,b"` quoted
    keeps its text), a whole number, a finite number (`1e-6`, `.5`), true/false/yes/no/on/off (a
    boolean), null or `~`; anything else is the text itself (`cpu_smoke`)."""
    try:
        value = json.loads(text)
    except ValueError:
        pass
    else:
        if isinstance(value, (str, int, float, bool)) or value is None:
            if not (isinstance(value, float) and not math.isfinite(value)):
                return value
    if INT.fullmatch(text):
        return int(text)
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and math.isfinite(number):
        return number
    low = text.lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    if low in NULL:
        return None
    return text


def _split_values(text: str) -> list[str]:
    """Comma-separated values; a JSON-quoted one may hold commas (`"a,b"`)."""
    parts, buf, quoted, escaped = [], [], False, False
    for ch in text:
        if quoted:
            buf.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
            buf.append(ch)
        elif ch == ",":
            parts.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf).strip())
    return parts


def _end(text: str, whole: str) -> int | float:
    if INT.fullmatch(text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise _axis_error(whole, f"{text[:40]!r} is not a number (a range is MIN..MAX, e.g. 1e-7..1e-5:log; "
                                 "one text value with '..' in it is written in double quotes: KEY='\"a..b\"')") \
            from None
    if not math.isfinite(value):
        raise _axis_error(whole, f"{text[:40]!r} is not a finite number")
    return value


def parse_axis(item: str) -> dict[str, Any]:
    """`--axis KEY=...` as one of the API's axes: {"key", "values"} for `V1,V2,...`, {"key", "min", "max",
    "scale", "type"} for a range `MIN..MAX` (no comma in it) followed by `log`/`linear` and `int`/`float`
    after colons or spaces. ClientError on `--axis` (exit 2) for a missing key or an empty value."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise _axis_error(item, "expected KEY=V1,V2,... or KEY=MIN..MAX[:log][:int]")
    if ".." in text and "," not in text and not text.startswith('"'):
        m = RANGE.match(text)
        if m is None:
            raise _axis_error(item, "a range is MIN..MAX, then optionally :log and/or :int (e.g. 1e-7..1e-5:log)")
        axis: dict[str, Any] = {"key": key, "min": _end(m["low"], item), "max": _end(m["high"], item),
                                "scale": "linear", "type": "float"}
        for word in re.split(r"[\s:]+", m["words"].strip(" :\t")) if m["words"].strip(" :\t") else []:
            if word in SCALES:
                axis["scale"] = word
            elif word in TYPES:
                axis["type"] = word
            else:
                raise _axis_error(item, f"{word[:40]!r} after a range: write log, linear, int or float")
        return axis
    parts = _split_values(text)
    if not any(parts):
        raise _axis_error(item, "give the values after KEY=, separated by commas")
    if not all(parts):
        raise _axis_error(item, "an empty value between two commas")
    return {"key": key, "values": [parse_value(p) for p in parts]}


def axis_text(axis: dict) -> str:
    """An axis as the pages write it: `1e-06, 3e-06`, or `1e-07 .. 1e-05 (log, float)` for a range."""
    if "values" in axis:
        return ", ".join(fmt_number(v) if v is not None else "null" for v in axis.get("values") or [])
    return f"{fmt_number(axis.get('min'))} .. {fmt_number(axis.get('max'))} " \
           f"({clean(axis.get('scale') or 'linear')}, {clean(axis.get('type') or 'float')})"


def _headers(keys: list[str]) -> list[str]:
    """Column headers for the axis keys: each key's last part (`lr`), the whole key where two share it."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return [clean(part if last.count(part) == 1 else key) for key, part in zip(keys, last)]


def _steps(row: dict) -> str:
    step, total = row.get("step"), row.get("total_steps")
    return f"{step if step is not None else '-'}/{total}" if total else cell(step)


SWEEP_COLUMNS = ("ID", "NAME", "MODE", "RUNS", "SEED", "AXES", "CREATED")


def cmd_sweeps_list(client: Client, args) -> int:
    rows, count = paged(client, "sweeps/", args)
    if args.json:
        emit_json({"count": count, "results": rows})
        return 0
    table(SWEEP_COLUMNS, [(s.get("id"), s.get("name"), s.get("mode"), s.get("run_count"), s.get("seed"),
                           [a.get("key") for a in s.get("axes") or [] if isinstance(a, dict)],
                           when(s.get("created"))) for s in rows])
    footer(len(rows), count, args)
    return 0


def _runs_table(sweep: dict, *, progress: bool) -> None:
    """A row per run: its id, axis values, state (with `progress`: step, latest reward, `*` on the best)
    and its name last and whole (`<sweep>/<key=value,...>`: long, so it pushes no column)."""
    keys = [a.get("key") for a in sweep.get("axes") or [] if isinstance(a, dict)]
    heads = ["RUN"] + _headers(keys) + ["STATUS"] + (["STEP", "REWARD", "BEST"] if progress else []) + ["NAME"]
    rows = []
    for r in sweep.get("runs") or []:
        params = r.get("params") or {}
        row = [r.get("run")] + [fmt_number(params.get(k)) if k in params else "-" for k in keys] + [r.get("status")]
        if progress:
            row += [_steps(r), r.get("latest_reward"), "*" if r.get("best") else ""]
        rows.append(row + [r.get("name")])
    table(heads, rows, max_width=400)


def _show_sweep(sweep: dict, *, progress: bool) -> None:
    items = [("id", sweep.get("id")), ("name", sweep.get("name")), ("owner", sweep.get("owner")),
             ("mode", sweep.get("mode")), ("seed", sweep.get("seed")), ("dataset", sweep.get("dataset"))]
    if sweep.get("val_dataset"):
        items.append(("val dataset", sweep.get("val_dataset")))
    items += [("model", sweep.get("model")), ("gpus", sweep.get("gpus")), ("runs", sweep.get("run_count"))]
    if progress:
        items.append(("best by", sweep.get("metric")))
    items.append(("created", when(sweep.get("created"))))
    pairs(items)
    out("\naxes:")
    axes = [a for a in sweep.get("axes") or [] if isinstance(a, dict)]
    width = max((len(clean(a.get("key"))) for a in axes), default=0)
    for axis in axes:
        out(f"  {clean(axis.get('key')):<{width}}  {axis_text(axis)}")
    out("")
    _runs_table(sweep, progress=progress)


def cmd_sweeps_show(client: Client, args) -> int:
    sweep = client.get(f"sweeps/{args.id}/", metric=args.metric)
    if args.json:
        emit_json(sweep)
    else:
        _show_sweep(sweep, progress=True)
    return 0


def cmd_sweeps_launch(client: Client, args) -> int:
    for flag, value, kind in (("--dataset", args.dataset, "dataset"), ("--model", args.model, "model")):
        if value is None:  # asked here: the API would only say the field is required
            raise ClientError(f"a sweep needs a {kind}: give {flag} ID (`rlstudio {kind}s list`)",
                              field=flag, exit_code=2)
    if not args.axis:
        raise ClientError("a sweep needs at least one --axis KEY=V1,V2,... (or KEY=MIN..MAX with --random)",
                          field="--axis", exit_code=2)
    body: dict[str, Any] = {"name": args.name, "dataset": args.dataset, "model": args.model, "gpus": args.gpus,
                            "mode": "random" if args.random else "grid",
                            "axes": [parse_axis(item) for item in args.axis]}
    for key, value in (("val_dataset", args.val_dataset), ("reward_model_id", args.reward_model),
                       ("preset", args.preset), ("config_id", args.config_id), ("tool_set", args.tool_set),
                       ("runs", args.runs), ("seed", args.seed)):
        if value is not None:  # `runs`/`seed` without --random: sent, and the API refuses them by name
            body[key] = value
    if args.config:
        body["config"] = _load_config_file(args.config)
    if args.set:
        body["overrides"] = overrides(args.set)
    sweep = client.post("sweeps/", body)
    if args.json:
        emit_json(sweep)
        return 0
    seed = f", seed {sweep.get('seed')}" if sweep.get("seed") is not None else ""
    out(f"sweep {sweep.get('id')} {clean(sweep.get('name'))}: {clean(sweep.get('mode'))}, "
        f"{len(sweep.get('runs') or [])} runs{seed}")
    _runs_table(sweep, progress=False)
    return 0


def cmd_sweeps_stop(client: Client, args) -> int:
    """POST .../stop/ once asked (or with --yes); exit 1 when a run could not be stopped now."""

    def question() -> str:
        sweep = client.get(f"sweeps/{args.id}/")
        live = [r for r in sweep.get("runs") or [] if r.get("status") in
                ("queued", "submitting", "running", "stopping")]
        ids = ", ".join(str(r.get("run")) for r in live) or "none"
        return f"stop sweep {args.id} {clean(sweep.get('name'))}: its {len(live)} runs that have not ended ({ids})?"

    refusal = f"stopping sweep {args.id}'s runs asks first: pass --yes to stop them without being asked"
    if not confirmed(args, question, refusal=refusal, final=False):
        err(f"sweep {args.id} not stopped")
        return 1
    done = client.post(f"sweeps/{args.id}/stop/") or {}
    if args.json:
        emit_json(done)
    else:
        stopped = done.get("stopped") or []
        out(f"sweep {args.id}: " + (f"stopped runs {', '.join(str(i) for i in stopped)}" if stopped else
                                   "no run to stop"))
    refused = done.get("refused") or {}
    for run_id, why in refused.items():
        err(f"run {clean(run_id)} not stopped: {clean(why)}")
    return 1 if refused else 0
