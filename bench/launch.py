"""Launch latency of RL Studio: POST /api/v1/runs/ → the trainer's first heartbeat, and stop → stopped.

    RLSTUDIO_BASE_URL=http://127.0.0.1:8000 RLSTUDIO_TOKEN=<api token> \
        python bench/launch.py --dataset ID --model ID [--repeats 5] [--json out.json]

Talks only to a running platform (API + its Celery worker and beat + Ray), like a user's script:
launches `repeats` cpu_smoke runs one after the other; for each, times from the POST to the first
`last_heartbeat` the platform reports (the trainer's heartbeat, read from its events), then asks
for a graceful stop (checkpoint first) and times until the run is `stopped`. Prints the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request


def _call(base: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(base.rstrip("/") + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read().decode() or "{}")


def _wait(base, token, run_id, pred, timeout, what) -> tuple[dict, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        run = _call(base, token, "GET", f"/api/v1/runs/{run_id}/")
        if pred(run):
            return run, time.monotonic() - t0
        time.sleep(0.1)
    raise SystemExit(f"run {run_id}: {what} not reached in {timeout}s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=os.environ.get("RLSTUDIO_BASE_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--token", default=os.environ.get("RLSTUDIO_TOKEN", ""))
    ap.add_argument("--dataset", type=int, required=True)
    ap.add_argument("--model", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the raw timings here")
    args = ap.parse_args(argv)
    if not args.token:
        print("an API token is needed (--token or RLSTUDIO_TOKEN)", file=sys.stderr)
        return 2
    first_hb, stop = [], []
    for i in range(args.repeats):
        t0 = time.monotonic()
        run = _call(args.base, args.token, "POST", "/api/v1/runs/", {
            "name": f"bench-launch-{i}", "dataset": args.dataset, "model": args.model, "preset": "cpu_smoke",
            "gpus": 0, "overrides": {"trainer.total_training_steps": 500, "trainer.save_freq": -1}})
        _run, _ = _wait(args.base, args.token, run["id"], lambda r: r["last_heartbeat"], 300, "first heartbeat")
        first_hb.append(time.monotonic() - t0)
        _call(args.base, args.token, "POST", f"/api/v1/runs/{run['id']}/stop/", {"checkpoint": True})
        done, seconds = _wait(args.base, args.token, run["id"],
                              lambda r: r["status"] in ("stopped", "failed", "lost", "succeeded"), 300, "stopped")
        if done["status"] != "stopped":
            raise SystemExit(f"run {run['id']} ended {done['status']}: {done['error'][-500:]}")
        stop.append(seconds)
        print(f"run {run['id']}: first heartbeat {first_hb[-1]:.2f}s, stop→stopped {seconds:.2f}s", flush=True)
    result = {"post_to_first_heartbeat_s": first_hb, "stop_to_stopped_s": stop,
              "median_first_heartbeat_s": statistics.median(first_hb), "median_stop_s": statistics.median(stop)}
    print(f"median POST→first heartbeat {result['median_first_heartbeat_s']:.2f}s, "
          f"median stop→stopped {result['median_stop_s']:.2f}s (n={args.repeats})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
