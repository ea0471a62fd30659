"""Launch latency of RL Studio: POST /api/v1/runs/ → the trainer's first heartbeat, and stop → stopped.

    RLSTUDIO_BASE_URL=http://127.0.0.1:8000 RLSTUDIO_TOKEN=<api token> \
        python bench/launch.py [--dataset ID] [--model ID] [--repeats 5] [--json out.json] \
                               [--write docs/benchmarks.md]

Talks only to a running platform (API + its Celery worker and beat + Ray), like a user's script:
launches `repeats` cpu_smoke runs one after the other (500 steps, so they are still running when
stopped); for each, times from the POST to the first `last_heartbeat` the platform reports (the
ingest API stamps it when the trainer's first event arrives), then asks for a graceful stop
(checkpoint first) and times until the run is `stopped`. Prints each run and the medians.

Without --dataset / --model it takes the token owner's newest ready dataset and newest model (the
launcher registers GSM8K's test split and the demo model for its admin). With --write, the figures,
the machine, its load and the command replace the text between `<!-- bench:launch:begin -->` and
`<!-- bench:launch:end -->` in that markdown file.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:launch:begin -->", "<!-- bench:launch:end -->"
TERMINAL = ("stopped", "failed", "lost", "succeeded")


def _call(base: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(base.rstrip("/") + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read().decode() or "{}")
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"{method} {path} answered {exc.code}: {exc.read().decode(errors='replace')[:500]}") from None


def _wait(base, token, run_id, pred, timeout, what) -> tuple[dict, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        run = _call(base, token, "GET", f"/api/v1/runs/{run_id}/")
        if pred(run):
            return run, time.monotonic() - t0
        if run["status"] in TERMINAL:
            raise SystemExit(f"run {run_id} ended {run['status']} before {what}: {run.get('error', '')[-800:]}")
        time.sleep(0.1)
    raise SystemExit(f"run {run_id}: {what} not reached in {timeout}s")


def _newest(base: str, token: str, path: str, what: str, **filters) -> int:
    body = _call(base, token, "GET", path)
    items = [x for x in body.get("results", body if isinstance(body, list) else [])
             if all(x.get(k) == v for k, v in filters.items())]
    if not items:
        raise SystemExit(f"no {what} for this token's user: register one or pass its id")
    return max(items, key=lambda x: x["id"])["id"]


ELIDED = {"--token": "<token>", "--platform": "…", "--note": "…"}  # a credential; texts shown apart


def _command(argv: list[str]) -> str:
    """The command line as run, without the token's value and the long texts."""
    out, hide = [], None
    for a in argv:
        name = a.split("=", 1)[0]
        if hide is not None:
            out.append(hide)
            hide = None
        elif a in ELIDED:
            out.append(a)
            hide = ELIDED[a]
        elif "=" in a and name in ELIDED:
            out.append(f"{name}={ELIDED[name]}")
        else:
            out.append(shlex.quote(a))
    return " ".join(["python bench/launch.py", *out])


def machine() -> str:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} cores"


def render(res: dict) -> str:
    rows = "\n".join(f"| {i + 1} | {run_id} | {hb:.2f} | {st:.2f} |" for i, (run_id, hb, st) in
                     enumerate(zip(res["run_ids"], res["post_to_first_heartbeat_s"], res["stop_to_stopped_s"])))
    return "\n".join([
        BEGIN,
        "## Launch and stop latency (RUNS, `bench/launch.py`)",
        "",
        f"Command: `{res['command']}`  ",
        f"Platform: {res['platform']}.  ",
        f"Machine: {res['machine']}; load average {res['load_before']:.2f} before, {res['load_after']:.2f} "
        f"after (other jobs shared the machine).",
        "",
        f"Median of {len(res['run_ids'])}: **POST → first heartbeat {res['median_first_heartbeat_s']:.2f} s**, "
        f"**stop → stopped {res['median_stop_s']:.2f} s** (cpu_smoke on the demo model, 0 GPUs; graceful "
        f"stop: the trainer finishes its step, checkpoints, exits 0).",
        "",
        "| # | run | POST → first heartbeat (s) | stop → stopped (s) |",
        "|---:|---:|---:|---:|",
        rows,
        "",
        "POST → first heartbeat covers the admission, the Celery submit task, Ray starting the job's driver, "
        "the trainer's Python start-up (torch, the model, the dataset) and its first event reaching the "
        "ingest API. stop → stopped covers the Celery stop task, Ray's SIGTERM, the trainer's step and "
        "checkpoint, Ray reporting the job over, and the next reconcile pass (Celery beat, every "
        "RLSTUDIO_RECONCILE_INTERVAL_S), or the trainer's own `stopped` report through the ingest API, "
        "whichever comes first. The trainer stops between steps, so a stop sent right after the first "
        "heartbeat waits for the first step (the slowest: it warms up) to end.",
        *(["", res["note"]] if res.get("note") else []),
        END,
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=os.environ.get("RLSTUDIO_BASE_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--token", default=os.environ.get("RLSTUDIO_TOKEN", ""))
    ap.add_argument("--dataset", type=int, help="dataset id (default: the newest ready one)")
    ap.add_argument("--model", type=int, help="model id (default: the newest one)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--platform", default="`python -m rlstudio.launcher` (local Ray head, Celery worker and beat)",
                    help="how the platform ran, for the written section")
    ap.add_argument("--note", default="", help="a paragraph added to the written section")
    ap.add_argument("--json", help="also write the raw timings here")
    ap.add_argument("--write", help="markdown file whose bench:launch section to replace")
    args = ap.parse_args(argv)
    if not args.token:
        print("an API token is needed (--token or RLSTUDIO_TOKEN)", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("--repeats must be at least 1", file=sys.stderr)
        return 2
    dataset = args.dataset or _newest(args.base, args.token, "/api/v1/datasets/", "ready dataset", status="ready")
    model = args.model or _newest(args.base, args.token, "/api/v1/models/", "model")
    load_before = os.getloadavg()[0]
    first_hb, stop, ids = [], [], []
    for i in range(args.repeats):
        t0 = time.monotonic()
        run = _call(args.base, args.token, "POST", "/api/v1/runs/", {
            "name": f"bench-launch-{i}", "dataset": dataset, "model": model, "preset": "cpu_smoke",
            "gpus": 0, "overrides": {"trainer.total_training_steps": 500, "trainer.save_freq": -1}})
        ids.append(run["id"])
        _wait(args.base, args.token, run["id"], lambda r: r["last_heartbeat"], 300, "first heartbeat")
        first_hb.append(time.monotonic() - t0)
        t1 = time.monotonic()
        _call(args.base, args.token, "POST", f"/api/v1/runs/{run['id']}/stop/", {"checkpoint": True})
        done, _ = _wait(args.base, args.token, run["id"], lambda r: r["status"] in TERMINAL, 300, "stopped")
        seconds = time.monotonic() - t1
        if done["status"] != "stopped":
            raise SystemExit(f"run {run['id']} ended {done['status']}: {done['error'][-500:]}")
        stop.append(seconds)
        print(f"run {run['id']}: first heartbeat {first_hb[-1]:.2f}s, stop→stopped {seconds:.2f}s", flush=True)
    result = {"run_ids": ids, "post_to_first_heartbeat_s": first_hb, "stop_to_stopped_s": stop,
              "median_first_heartbeat_s": statistics.median(first_hb), "median_stop_s": statistics.median(stop),
              "machine": machine(), "load_before": load_before, "load_after": os.getloadavg()[0],
              "platform": args.platform, "note": args.note,
              "command": _command(argv if argv is not None else sys.argv[1:])}
    print(f"median POST→first heartbeat {result['median_first_heartbeat_s']:.2f}s, "
          f"median stop→stopped {result['median_stop_s']:.2f}s (n={args.repeats})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.write:
        replace_section(Path(args.write), render(result), begin=BEGIN, end=END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
