"""The compare page's speed (issue 19): /runs/compare/ with 10 runs x 200 steps, served over HTTP.

    .venv/bin/python bench/compare.py [--runs 10] [--steps 200] [--long-steps 20000] [--repeats 20]
                                      [--json out.json] [--write docs/benchmarks.md]

The real stack of bench/live.py (a fresh PostgreSQL database `rlstudio_bench_<pid>`, migrated and
dropped at the end; Redis as the channel layer; Daphne serving the ASGI app in a subprocess). The runs
report through the real ingest endpoint, as the trainer does: one metrics event per step with 60
metrics (verl's names and a held-out reward every 10 steps), and carry the cpu_smoke recipe's config
with a different lr and rollout.n each. Then, with a logged-in session:

  1. the compare page `/runs/compare/?ids=<the 10 runs>` (summary, default charts' data, config diff):
     server time per request (request sent to last byte read), median and max of `--repeats`;
  2. the same data through `GET /api/v1/runs/compare/?ids=...` with its default metrics, and with
     5 metrics at once;
  3. long runs: 2 runs of `--long-steps` steps each, compared (their series downsampled to 1,000
     points each on the server): page and API time.

Target: the page with 10 runs x 200 steps served in <= 500 ms. `--write` replaces the bench:compare
section of docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import sys
import time
from datetime import timedelta
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform"), str(REPO)]
from bench.live import Stack, machine  # noqa: E402
from bench.md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:compare:begin -->", "<!-- bench:compare:end -->"
VAL = "val-core/arith/reward/mean@1"
TARGET_MS = 500
# 60 metrics per step in verl's names (the trainer reports about this many on a CPU run).
NAMES = ([f"{fam}/{stat}" for fam in ("critic/score", "critic/rewards", "critic/advantages", "critic/returns",
                                      "response_length", "prompt_length", "num_turns")
          for stat in ("mean", "max", "min")]
         + [f"actor/{k}" for k in ("pg_loss", "pg_clipfrac", "ppo_kl", "entropy", "grad_norm", "lr", "kl_loss",
                                   "kl_coef", "pg_clipfrac_lower")]
         + [f"timing_s/{k}" for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step",
                                      "update_weights", "testing")]
         + [f"perf/{k}" for k in ("total_num_tokens", "time_per_step", "throughput", "cpu_memory_used_gb")]
         + [f"tool_calls/{k}" for k in ("mean", "max", "min")]
         + [f"response_length/clip_ratio_{i}" for i in range(14)])[:60]


def step_metrics(run_index: int, step: int) -> dict:
    level = 1 - math.exp(-(0.01 + 0.004 * run_index) * step)
    m = {name: round(math.sin(step * 0.1 + k) + k, 5) for k, name in enumerate(NAMES)}
    m["critic/score/mean"] = round(level + 0.05 * math.sin(step), 5)
    if step % 10 == 0:
        m[VAL] = round(level * 0.9, 5)
    return m


def config_for(run_index: int) -> dict:
    from trainer.recipes import REGISTRY

    config = REGISTRY["cpu_smoke"].build().to_dict()
    config["actor_rollout_ref"]["actor"]["optim"]["lr"] = 1e-6 * (1 + run_index)
    config["actor_rollout_ref"]["rollout"]["n"] = 2 + run_index % 3
    return config


def make_runs(stack: Stack, count: int, steps: int, prefix: str) -> tuple[list[int], float]:
    """`count` finished runs of `steps` steps, their metrics through the ingest API; (ids, seconds)."""
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create

    ds = Dataset.objects.create(owner=stack.user, name=f"{prefix}-data", file_path="/tmp/x.jsonl", sha256="ab" * 32)
    model = ModelAsset.objects.create(owner=stack.user, name=f"{prefix}-model", path="/models/x")
    ids, t0 = [], time.perf_counter()
    start = time.time() - steps * 10
    for i in range(count):
        run, token = run_create(owner=stack.user, name=f"{prefix}-{i}", dataset=ds, model=model,
                                config=config_for(i), gpus=1)
        events = [{"seq": s, "type": "metrics", "time": start + 10 * s, "data": {"step": s, "metrics": step_metrics(i, s)}}
                  for s in range(1, steps + 1)]
        for k in range(0, len(events), 500):
            body = gzip.compress(json.dumps({"events": events[k:k + 500]}).encode(), compresslevel=1)
            assert stack.post(run.pk, token, body)["accepted"] == len(events[k:k + 500])
        Run.objects.filter(pk=run.pk).update(status="succeeded", step=steps, total_steps=steps,
                                             started=timezone.now() - timedelta(seconds=10 * steps),
                                             finished=timezone.now())
        ids.append(run.pk)
    return ids, time.perf_counter() - t0


def timed_get(stack: Stack, path: str, repeats: int) -> dict:
    """Median and max server time of GET `path` (a logged-in session), and the body's size."""
    times, size = [], 0
    for _ in range(repeats + 1):  # the first request warms the server's connection and caches: not counted
        req = urllib.request.Request(stack.base + path, headers={"Cookie": f"sessionid={stack.session}"})
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
            assert r.status == 200, (path, r.status)
        times.append(time.perf_counter() - t)
        size = len(body)
    times = times[1:]
    return {"ms_median": round(1000 * statistics.median(times), 1), "ms_max": round(1000 * max(times), 1),
            "bytes": size, "repeats": repeats}


def run_all(args) -> dict:
    with Stack() as stack:
        ids, fill_s = make_runs(stack, args.runs, args.steps, "cmp")
        q = ",".join(map(str, ids))
        out = {"machine": machine(), "runs": args.runs, "steps": args.steps, "metrics_per_step": len(NAMES) + 1,
               "fill_s": round(fill_s, 1),
               "page": timed_get(stack, f"/runs/compare/?ids={q}", args.repeats),
               "api_default": timed_get(stack, f"/api/v1/runs/compare/?ids={q}", args.repeats),
               "api_5_metrics": timed_get(stack, f"/api/v1/runs/compare/?ids={q}&metrics=" + ",".join(
                   ["critic/score/mean", VAL, "actor/entropy", "actor/pg_loss", "response_length/mean"]),
                   args.repeats)}
        if args.long_steps:
            long_ids, long_fill = make_runs(stack, 2, args.long_steps, "long")
            lq = ",".join(map(str, long_ids))
            out["long"] = {"runs": 2, "steps": args.long_steps, "fill_s": round(long_fill, 1),
                           "page": timed_get(stack, f"/runs/compare/?ids={lq}", max(3, args.repeats // 4)),
                           "api_default": timed_get(stack, f"/api/v1/runs/compare/?ids={lq}", max(3, args.repeats // 4))}
        out["command"] = "bench/compare.py " + " ".join(args.argv)
        return out


def render(out: dict) -> str:
    m = out["machine"]
    ok = "meets" if out["page"]["ms_median"] <= TARGET_MS else "misses"
    lines = [BEGIN, "## Compare page (issue 19): 10 runs x 200 steps", "",
             f"Command: `.venv/bin/python {out['command'].strip()}` (fresh PostgreSQL database, one Daphne process, "
             f"the runs' {out['metrics_per_step']} metrics per step stored through the ingest API; server time = "
             "request sent to last byte read, a logged-in session, after one warm-up request). Machine: "
             f"{m['cpus']} × {m['cpu']}, load {m['load_1min_at_start']} at start, Python {m['python']}.", "",
             "| request | median ms | max ms | bytes |", "|---|---:|---:|---:|"]
    rows = [(f"page `/runs/compare/?ids=…`, {out['runs']} runs × {out['steps']} steps", out["page"]),
            ("`GET /api/v1/runs/compare/?ids=…` (default metrics)", out["api_default"]),
            ("`GET /api/v1/runs/compare/?ids=…&metrics=` 5 metrics", out["api_5_metrics"])]
    if "long" in out:
        lg = out["long"]
        rows += [(f"page, {lg['runs']} runs × {lg['steps']:,} steps (downsampled to 1,000 points)", lg["page"]),
                 (f"API default, {lg['runs']} runs × {lg['steps']:,} steps", lg["api_default"])]
    for label, r in rows:
        lines.append(f"| {label} | {r['ms_median']} | {r['ms_max']} | {r['bytes']:,} |")
    lines += ["", f"Target: the page with 10 runs × 200 steps served in ≤ {TARGET_MS} ms: **{ok}** it "
              f"({out['page']['ms_median']} ms median over {out['page']['repeats']} requests).", ""]
    if "long" in out:
        lines += ["Where a long comparison's time goes: the medians are of requests after a warm-up one, which "
                  "find each run's series and held-out figures in the per-run cache (`compare.cached_per_run`, "
                  "kept while the run's rows do not change). A first view of a run (or one after a new step) "
                  "reads each stored row's metrics object once per metric shown (its value extracted in "
                  "PostgreSQL, the 1,000 buckets averaged there: `telemetry/compare.py` `_SERIES_SQL`); the "
                  "metric picker's names come from the ingest (`RunIngestCount.metric_names`), not from the "
                  "rows; the runs list, summary and config diff cost a few milliseconds.", ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--long-steps", type=int, default=20000, help="steps of each of 2 long runs (0: skip)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", type=Path)
    p.add_argument("--write", type=Path, help="replace the bench:compare section of this markdown file")
    args = p.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    out = run_all(args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if args.write:
        replace_section(args.write, render(out), begin=BEGIN, end=END)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
