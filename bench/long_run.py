"""A long run's pages and API: how they cost on a run of real size (thousands of steps, 300k samples).

    .venv/bin/python bench/long_run.py [--steps 3000] [--samples-per-step 100] [--keys 80] [--repeats 5]
                                       [--reuse] [--keep] [--only PART ...] [--json out.json]
                                       [--before earlier.json] [--write docs/benchmarks.md]

Builds, in a PostgreSQL database of its own (`bench_long_run` on 127.0.0.1:5432, migrated; dropped at
the end unless `--keep`; `--reuse` measures a kept one again without building it), one finished run of
`--steps` steps owned by a user, stored by the ingest's own statements (telemetry/services.py
`_insert_run_events`, `_upsert_metrics`, `_store_samples`, `_link_sample_ids`, `_insert_memory`: what
POST /api/v1/runs/<id>/events/ runs, without its HTTP, validation and live push):

  * a metrics event a step with `--keys` metrics (verl's names, a held-out reward every 10 steps);
  * `--samples-per-step` sample events a step (groups of 8 with their trainer statistics; every fourth
    group multi-turn with a tool call and its answer; a 32-token view on each), each a RunEvent and a
    Sample as the ingest stores them;
  * 4 memory points, a heartbeat and a log line a step, status events, and a checkpoint every 100
    steps (a checkpoint event and its global_step_N/actor folder in the run's folder).

Next to it: 20 short runs of the same user (30 steps each) for the run list, and 2 runs of 1,000 steps
for the compare page. Each endpoint is then fetched with Django's test Client logged in as the owner
(in this process: no HTTP server, no network): the first request, then the median of `--repeats`, and
the SQL queries of one request (django.test.utils.CaptureQueriesContext). Redis db 5 is the channel
layer (nothing is pushed: the run is finished).

Before/after: build once with `--keep --json before.json` on the old code, then `--reuse --keep --json
after.json --before before.json --write docs/benchmarks.md` on the new (after its migrations); the table
shows both.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform"), str(REPO), str(REPO / "bench")]
from md_sections import cpu_name, replace_section  # noqa: E402

BEGIN, END = "<!-- bench:long_run:begin -->", "<!-- bench:long_run:end -->"
PG = "postgresql://postgres@127.0.0.1:5432"
DB = "bench_long_run"
VAL = "val-core/arith/reward/mean@1"
_FAMILIES = ("critic/score", "critic/rewards", "critic/advantages", "critic/returns", "response_length",
             "prompt_length", "num_turns", "tool_calls")
_NAMES = ([f"{fam}/{stat}" for fam in _FAMILIES for stat in ("mean", "max", "min")]
          + [f"actor/{k}" for k in ("pg_loss", "pg_clipfrac", "ppo_kl", "entropy", "grad_norm", "lr", "kl_loss",
                                    "kl_coef", "pg_clipfrac_lower")]
          + [f"timing_s/{k}" for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step",
                                       "update_weights", "testing")]
          + [f"perf/{k}" for k in ("total_num_tokens", "time_per_step", "throughput", "cpu_memory_used_gb",
                                   "max_memory_allocated_gb", "max_memory_reserved_gb")]
          + [f"response_length/clip_ratio_{i}" for i in range(8)]
          + [f"timing_per_token_ms/{k}" for k in ("gen", "ref", "update_actor", "adv")]
          + [f"training/{k}" for k in ("global_step", "epoch")]
          + [f"extra/metric_{i}" for i in range(40)])


def metric_names(keys: int) -> list[str]:
    return _NAMES[: keys - 1]  # + the held-out reward every 10 steps


def step_metrics(step: int, names: list[str]) -> dict:
    m = {name: round(math.sin(step * 0.01 + k) + k, 5) for k, name in enumerate(names)}
    m["critic/score/mean"] = round(1 - math.exp(-0.002 * step) + 0.05 * math.sin(step), 5)
    if step % 10 == 0:
        m[VAL] = round(0.9 * (1 - math.exp(-0.002 * step)), 5)
    return m


def sample_event(seq: int, step: int, i: int, t: float, rng: random.Random) -> dict:
    """A sample event as the trainer sends it: group i // 8, every fourth group multi-turn with a tool."""
    group, index = divmod(i, 8)
    reward = float(rng.random() < 0.5)
    q = f"Step {step} problem {group}: what is {step} * {group + 3} + {index}? " * 3
    if group % 4 == 3:
        messages = [{"role": "user", "content": q},
                    {"role": "assistant", "content": "Let me compute.", "tool_calls": [
                        {"type": "function", "function": {"name": "calculator",
                                                          "arguments": json.dumps({"expr": f"{step}*{group + 3}"})}}]},
                    {"role": "tool", "content": str(step * (group + 3))},
                    {"role": "assistant", "content": f"The answer is #### {step * (group + 3) + index}"}]
    else:
        messages = [{"role": "user", "content": q},
                    {"role": "assistant", "content": "Working it out step by step. " * 6 + f"#### {step * 3}"}]
    lps = [round(-rng.expovariate(2.0), 6) for _ in range(32)]
    return {"seq": seq, "type": "sample", "time": t, "data": {
        "step": step, "uid": f"s{step}-g{group}", "index": index, "reward": reward,
        "advantage": round(rng.gauss(0, 0.8), 6), "response_length": 40 + (seq % 200),
        "num_turns": 2 if group % 4 == 3 else 1, "finish_reason": "length" if seq % 17 == 0 else "stop",
        "messages": messages, "ground_truth": str(step * 3), "data_source": "arith",
        "reward_extra": {"rule_score": reward, "total": reward},
        "group_size": 8, "group_mean": 0.5, "group_std": 0.5,
        "prompt_split": "train", "prompt_index": (step * 13 + group) % 5000,
        "prompt_hash": f"{(step * 13 + group) % 5000:032x}",
        "token_view": {"ids": list(range(32)), "pieces": ["tok"] * 32, "loss_mask": [1] * 32,
                       "logprobs": lps, "ref_logprobs": lps, "advantages": [0.1] * 32}}}


def step_events(seq: int, step: int, t: float, names: list[str], per_step: int, rng: random.Random) -> list[dict]:
    """All events of one step, seqs from `seq` on."""
    evs = [sample_event(seq + i, step, i, t, rng) for i in range(per_step)]
    n = seq + per_step
    for k, phase in enumerate(("rollout", "ref", "update_actor", "sync")):
        evs.append({"seq": n + k, "type": "memory", "time": t, "data": {
            "step": step, "phase": phase, "device": "cuda:0", "allocated": 10**9 + step, "reserved": 2 * 10**9,
            "peak": 3 * 10**9, "rss": None, "rank": 0, "device_used": 4 * 10**9}})
    n += 4
    evs.append({"seq": n, "type": "metrics", "time": t, "data": {"step": step, "metrics": step_metrics(step, names)}})
    evs.append({"seq": n + 1, "type": "heartbeat", "time": t, "data": {"step": step}})
    evs.append({"seq": n + 2, "type": "log", "time": t, "data": {"level": "info", "message": f"step {step} done"}})
    return evs


def store(run, events: list[dict]) -> None:
    """Store a batch as the ingest does (its own statements; no HTTP, no validation, no live push)."""
    from django.db import transaction

    from rlstudio.telemetry import services as svc

    compact = {ev["seq"]: (svc.sample_summary(ev["data"], sample_id=None) if ev["type"] == "sample" else ev["data"])
               for ev in events}
    with transaction.atomic():
        svc._insert_run_events(run.pk, events, compact)
        svc._upsert_metrics(run.pk, [ev for ev in events if ev["type"] == "metrics"])
        samples = [ev for ev in events if ev["type"] == "sample"]
        ids = svc._store_samples(run, samples) if samples else {}
        svc._link_sample_ids(run.pk, ids)
        svc._insert_memory(run.pk, [ev for ev in events if ev["type"] == "memory"])


def make_run(user, ds, model, *, name: str, steps: int, per_step: int, keys: int, checkpoints: bool = False):
    """A finished run of `steps` steps stored as above; the Run."""
    from datetime import timedelta

    from django.utils import timezone

    from rlstudio.runs.launch import run_folder
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import RunIngestCount
    from trainer.recipes import REGISTRY

    config = REGISTRY["cpu_smoke"].build().to_dict()
    config["actor_rollout_ref"]["actor"]["optim"]["lr"] = 1e-6 * (1 + len(name) % 3)
    run, _ = run_create(owner=user, name=name, dataset=ds, model=model, config=config, gpus=1, total_steps=steps)
    names = metric_names(keys)
    rng = random.Random(run.pk)
    start = time.time() - 10 * steps
    seq, batch = 1, [{"seq": 1, "type": "status", "time": start, "data": {"state": "running", "total_steps": steps}}]
    folder = run_folder(run)
    counts = {"events": 1, "samples": 0, "metric_rows": 0, "metric_names": []}
    kept: set[str] = set()
    for step in range(1, steps + 1):
        evs = step_events(seq + 1, step, start + 10 * step, names, per_step, rng)
        seq += len(evs)
        if checkpoints and step % 100 == 0:
            seq += 1
            path = folder / f"global_step_{step}"
            (path / "actor").mkdir(parents=True, exist_ok=True)
            evs.append({"seq": seq, "type": "checkpoint", "time": start + 10 * step,
                        "data": {"step": step, "path": str(path)}})
        batch += evs
        counts["events"] += len(evs)
        counts["samples"] += per_step
        counts["metric_rows"] += 1
        kept.update(k for ev in evs if ev["type"] == "metrics" for k in ev["data"]["metrics"])
        if len(batch) >= 2000 or step == steps:
            store(run, batch)
            batch = []
    store(run, batch + [{"seq": seq + 1, "type": "status", "time": start + 10 * steps + 5,
                         "data": {"state": "succeeded"}}])
    RunIngestCount.objects.update_or_create(run=run, defaults={**counts, "metric_names": sorted(kept)})  # as the ingest keeps them
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(status="succeeded", step=steps, started=now - timedelta(seconds=10 * steps),
                                         finished=now, checkpoint_path=str(folder / f"global_step_{steps // 100 * 100}")
                                         if checkpoints and steps >= 100 else "")
    return Run.objects.get(pk=run.pk)


def build(args) -> dict:
    """The user, the long run, the short runs and the two compared runs; their ids and the build time."""
    from django.contrib.auth import get_user_model

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.telemetry.models import Sample

    t0 = time.perf_counter()
    user = get_user_model().objects.create_user("longrun", password="x")
    ds = Dataset.objects.create(owner=user, name="arith", file_path="/tmp/x.jsonl", sha256="ab" * 32)
    model = ModelAsset.objects.create(owner=user, name="tiny", path="/models/x")
    short = [make_run(user, ds, model, name=f"short-{i}", steps=30, per_step=8, keys=args.keys).pk for i in range(20)]
    others = [make_run(user, ds, model, name=f"peer-{i}", steps=1000, per_step=8, keys=args.keys).pk for i in range(2)]
    t1 = time.perf_counter()
    long_run = make_run(user, ds, model, name="long", steps=args.steps, per_step=args.samples_per_step,
                        keys=args.keys, checkpoints=True)
    t2 = time.perf_counter()
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")  # what autovacuum does to an insert-only table: index-only scans work
    samples = Sample.objects.filter(run=long_run).order_by("-num_turns", "-seq").values_list("pk", flat=True)
    sample = samples.first()  # a multi-turn one where the run has any
    return {"user": user.pk, "run": long_run.pk, "short": short, "others": others, "sample": sample,
            "build_s": round(time.perf_counter() - t0, 1), "long_build_s": round(t2 - t1, 1)}


def measure(client, path: str, repeats: int) -> dict:
    """First request's ms, the median of `repeats` more, the queries of one request, the body's size."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def get() -> tuple[int, int]:
        r = client.get(path)
        body = b"".join(r.streaming_content) if r.streaming else r.content
        assert r.status_code == 200, (path, r.status_code, body[:300])
        return len(body), r.status_code

    from django.core.cache import cache

    cache.clear()  # the first request finds no figure cached by an earlier URL (the compare page's for its API)
    t = time.perf_counter()
    with CaptureQueriesContext(connection) as ctx:
        size, _ = get()
    first = time.perf_counter() - t
    queries = list(ctx.captured_queries)  # read now: the next request's request_started empties the log
    times = []
    for _ in range(repeats):
        with CaptureQueriesContext(connection) as warm:
            t = time.perf_counter()
            get()
            times.append(time.perf_counter() - t)
        warm_queries = list(warm.captured_queries)
    return {"first_ms": round(1000 * first, 1), "ms_median": round(1000 * statistics.median(times), 1),
            "queries": len(queries), "queries_warm": len(warm_queries), "bytes": size,
            "sql_ms_warm": round(1000 * sum(float(q["time"]) for q in warm_queries), 1), "sql_ms": round(1000 * sum(float(q["time"]) for q in queries), 1),
            "slowest_query": max(queries, key=lambda q: float(q["time"])) if queries else None}


def endpoints(ids: dict) -> list[tuple[str, str]]:
    run, sid = ids["run"], ids["sample"]
    cmp_ids = ",".join(map(str, [run, *ids["others"]]))
    return [
        ("run page `/runs/<id>/`", f"/runs/{run}/"),
        ("metrics API, first page `/api/v1/runs/<id>/metrics/`", f"/api/v1/runs/{run}/metrics/"),
        ("metrics API, last page (`?after_step=` steps − 500)", f"/api/v1/runs/{run}/metrics/?after_step={max(ids['steps'] - 500, 0)}"),
        ("metrics overview API, whole run (1,000 points) `/api/v1/runs/<id>/metrics/overview/`",
         f"/api/v1/runs/{run}/metrics/overview/"),
        ("metrics overview API, a zoomed range (500 steps: every step)",
         f"/api/v1/runs/{run}/metrics/overview/?after_step={ids['steps'] // 3}&until_step={ids['steps'] // 3 + 500}"),
        ("samples API, first page", f"/api/v1/runs/{run}/samples/"),
        ("samples API, filtered (`finish_reason=length&min_reward=1&order=-reward`)",
         f"/api/v1/runs/{run}/samples/?finish_reason=length&min_reward=1&order=-reward"),
        ("samples API, one step (`?step=` the middle one)", f"/api/v1/runs/{run}/samples/?step={ids['steps'] // 2}"),
        ("samples API, deep offset (`?offset=` samples − 100)",
         f"/api/v1/runs/{run}/samples/?offset={ids['samples'] - 100}"),
        ("samples table on the run page, filtered (`?min_reward=1&order=-response_length`)",
         f"/runs/{run}/?min_reward=1&order=-response_length"),
        ("transcript page `/runs/<id>/samples/<sid>/` (multi-turn)", f"/runs/{run}/samples/{sid}/"),
        ("sample API `/api/v1/runs/<id>/samples/<sid>/`", f"/api/v1/runs/{run}/samples/{sid}/"),
        ("group page (`/runs/<id>/groups/?step=`)", f"/runs/{run}/groups/?step={ids['steps'] // 2}"),
        ("summary card `/runs/<id>/summary/card/`", f"/runs/{run}/summary/card/"),
        ("memory API `/api/v1/runs/<id>/memory/`", f"/api/v1/runs/{run}/memory/"),
        ("logs API `/api/v1/runs/<id>/logs/`", f"/api/v1/runs/{run}/logs/"),
        ("checkpoints API `/api/v1/runs/<id>/checkpoints/`", f"/api/v1/runs/{run}/checkpoints/"),
        ("run list page `/runs/` (23 runs)", "/runs/"),
        ("run list API `/api/v1/runs/`", "/api/v1/runs/"),
        ("run API `/api/v1/runs/<id>/`", f"/api/v1/runs/{run}/"),
        ("compare page, this run + 2 of 1,000 steps", f"/runs/compare/?ids={cmp_ids}"),
        ("compare API, same runs", f"/api/v1/runs/compare/?ids={cmp_ids}"),
        ("metrics CSV `/api/v1/runs/<id>/metrics.csv`", f"/api/v1/runs/{run}/metrics.csv"),
    ]


def database(create: bool) -> None:
    """Drop the bench database (a kept one too) and, with `create`, make it afresh."""
    import psycopg2

    con = psycopg2.connect(f"{PG}/postgres")
    con.autocommit = True
    cur = con.cursor()
    cur.execute(f'DROP DATABASE IF EXISTS "{DB}"')
    if create:
        cur.execute(f'CREATE DATABASE "{DB}"')
    con.close()


def run_all(args) -> dict:
    state = Path(args.state_dir)
    os.environ.update(DATABASE_URL=f"{PG}/{DB}", DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test",
                      REDIS_URL="redis://127.0.0.1:6379/5", RLSTUDIO_STATE_DIR=str(state),
                      RLSTUDIO_ROLLOUT_DIR=str(state / "runs"))
    if not args.reuse:
        database(create=True)
    import django
    from django.core.management import call_command

    django.setup()
    from django.conf import settings
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections
    from django.test import Client

    # As Django's own test cases do: one connection for the whole bench (its queries are counted on it).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)

    settings.ALLOWED_HOSTS = ["testserver"]
    out: dict = {"machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "load_1min_at_start": round(os.getloadavg()[0], 2),
                             "python": sys.version.split()[0]}}
    ids_file = state / "ids.json"
    if args.reuse:
        ids = json.loads(ids_file.read_text())
    else:
        call_command("migrate", verbosity=0)
        ids = build(args)
        ids.update(steps=args.steps, samples=args.steps * args.samples_per_step, keys=args.keys,
                   samples_per_step=args.samples_per_step)
        ids_file.write_text(json.dumps(ids))
        print(f"[bench] built in {ids['build_s']} s (the long run {ids['long_build_s']} s)", flush=True)
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(pk=ids["user"]))
    out["sizes"] = {k: ids[k] for k in ("steps", "samples", "keys", "samples_per_step", "build_s", "long_build_s")}
    out["results"] = []
    for label, path in endpoints(ids):
        if args.only and not any(o in path for o in args.only):
            continue
        r = {"label": label, "path": path, **measure(client, path, args.repeats)}
        print(json.dumps({k: v for k, v in r.items() if k != "slowest_query"}), flush=True)
        out["results"].append(r)
    for label, path in live_endpoints(ids):
        if args.only and not any(o in path for o in args.only):
            continue
        r = {"label": label, "path": path, **measure_live(client, path, ids["run"], args.repeats)}
        print(json.dumps({k: v for k, v in r.items() if k != "slowest_query"}), flush=True)
        out["results"].append(r)
    out["machine"]["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    return out


def live_endpoints(ids: dict) -> list[tuple[str, str]]:
    run = ids["run"]
    return [("run page of a live run (a new step stored before each view)", f"/runs/{run}/?view=live"),
            ("metrics overview API of a live run (a new step before each request)",
             f"/api/v1/runs/{run}/metrics/overview/?max_points=1000")]


def measure_live(client, path: str, run_id: int, repeats: int) -> dict:
    """`measure` with a new metric row (the last one's metrics, one step on) stored before each of the
    repeats, as a live run reports between two views; the rows are deleted afterwards."""
    from django.utils import timezone

    from rlstudio.telemetry.models import MetricRow

    last = MetricRow.objects.filter(run_id=run_id).order_by("-step").first()
    added: list[int] = []

    def step() -> None:
        s = last.step + len(added) + 1
        MetricRow.objects.create(run_id=run_id, step=s, time=timezone.now(), metrics=last.metrics)
        added.append(s)

    class Live:  # a client whose every GET but the first follows a new step
        calls = 0

        def get(self, p):
            if Live.calls:
                step()
            Live.calls += 1
            return client.get(p)

    try:
        return measure(Live(), path, repeats)
    finally:
        MetricRow.objects.filter(run_id=run_id, step__in=added).delete()


def _queries(r: dict) -> str:
    """Queries of the first request, and of a later one where it differs (a cache filled by the first)."""
    warm = r.get("queries_warm", r["queries"])
    return f"{r['queries']}" if warm == r["queries"] else f"{r['queries']} (then {warm})"


def render(out: dict, before: dict | None) -> str:
    m, s = out["machine"], out["sizes"]
    prev = {r["path"]: r for r in (before or {}).get("results", [])}
    lines = [BEGIN, "## A long run's pages and API (`bench/long_run.py`)", "",
             f"Command: `.venv/bin/python bench/long_run.py {out['command']}`. One finished run of "
             f"**{s['steps']:,} steps** ({s['keys']} metric keys a step, {s['samples']:,} samples: "
             f"{s['samples_per_step']} a step, a quarter multi-turn with a tool call, each with a 32-token view; "
             "4 memory points, a heartbeat and a log line a step; a checkpoint every 100 steps) stored by the "
             "ingest's own statements, then VACUUM ANALYZE (as autovacuum would), next to 20 runs of 30 steps and "
             f"2 of 1,000 steps of the same user (build: {s['build_s']} s). Each URL fetched with Django's test "
             "Client as the owner, in-process (no HTTP server); ms = first request (Django's cache emptied before it) / median of the "
             f"{out['repeats']} after it; queries = SQL statements of the first request (and of a later one "
             f"where a cache made it fewer). Machine: {m['cpus']} cores ({m['cpu']}), Python {m['python']}, load "
             f"{m['load_1min_at_start']} at start, {m['load_1min_at_end']} at end (other jobs share the cores: "
             "ms move by ±30% between runs, queries and bytes do not).", ""]
    if before:
        bm = before["machine"]
        lines += [f"Before: the same command and database with the code before the change (load {bm['load_1min_at_start']} "
                  f"at start, {bm['load_1min_at_end']} at end); \"new\": a URL the earlier code did not have.", "",
                  "| request | queries before → after | ms before (first / median) | ms after (first / median) "
                  "| bytes before → after |", "|---|---:|---:|---:|---:|"]
        for r in out["results"]:
            b = prev.get(r["path"])
            if b is None:
                lines.append(f"| {r['label']} | new → {_queries(r)} | new | {r['first_ms']:,} / **{r['ms_median']:,}** "
                             f"| new → {r['bytes']:,} |")
                continue
            size = f"{b['bytes']:,}" if b["bytes"] == r["bytes"] else f"{b['bytes']:,} → **{r['bytes']:,}**"
            lines.append(f"| {r['label']} | {_queries(b)} → {_queries(r)} | {b['first_ms']:,} / {b['ms_median']:,} "
                         f"| {r['first_ms']:,} / **{r['ms_median']:,}** | {size} |")
    else:
        lines += ["| request | queries | first ms | median ms | bytes |", "|---|---:|---:|---:|---:|"]
        for r in out["results"]:
            lines.append(f"| {r['label']} | {_queries(r)} | {r['first_ms']:,} | **{r['ms_median']:,}** | {r['bytes']:,} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--samples-per-step", type=int, default=100)
    p.add_argument("--keys", type=int, default=80, help="metric keys a step (at most %d)" % (len(_NAMES) + 1))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--reuse", action="store_true", help="measure the kept bench_long_run database again")
    p.add_argument("--keep", action="store_true", help="keep the database (and its state folder) for --reuse")
    p.add_argument("--state-dir", default=str(Path(tempfile.gettempdir()) / "rls-bench-long-run"))
    p.add_argument("--only", nargs="*", help="measure only the URLs containing one of these")
    p.add_argument("--before", type=Path, help="a --json of an earlier measurement: the table shows both")
    p.add_argument("--json", type=Path)
    p.add_argument("--write", type=Path, help="replace the bench:long_run section of this markdown file")
    args = p.parse_args(argv)
    argv = list(argv if argv is not None else sys.argv[1:])
    Path(args.state_dir).mkdir(parents=True, exist_ok=True)
    try:
        out = run_all(args)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            database(create=False)
    out["command"], out["repeats"] = " ".join(argv), args.repeats
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if args.write:
        before = json.loads(args.before.read_text()) if args.before else None
        replace_section(args.write, render(out, before), begin=BEGIN, end=END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
