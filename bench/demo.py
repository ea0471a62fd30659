"""Benchmark: the one-click demo through the real platform, from `make run` to GRPO learning.

Run: .venv/bin/python bench/demo.py [--state /tmp/rls-demo-bench] [--port 8790] [--grpo-seconds 420]
     [--target 0.8] [--warm-steps N] [--write docs/benchmarks.md]

1. `python -m rlstudio.launcher` on a FRESH state folder (PostgreSQL, Redis, Ray, Celery, Daphne; the
   demo is prepared in the background): time until /healthz answers (the platform is usable).
2. Waits for STATE/demo/status.json to say "ready" (demo model warm-started with the default steps,
   arithmetic datasets validated by the worker, demo config saved): the time until the demo button
   works, and the warm start's own steps / seconds from the model's warm_start.json.
3. A sampled (temperature 1) evaluation of the warm-started model on the demo's held-out dataset
   (trainer.models.demo.evaluate_sampled): the held-out reward GRPO starts from.
4. Logs in as the admin through the login form and POSTs the "Launch the demo" form with its CSRF
   token: the one click.
5. Follows the run's events.jsonl (STATE/runs/<id>/): the held-out validation reward
   (val-core/arith/reward/mean@1, sampled) against step and seconds since the click, until the run
   ends or --grpo-seconds pass; then stops the launcher (Ctrl-C: everything it started stops).
6. With --write, the figures, the machine, its load and the command replace the text between
   `<!-- bench:demo:begin -->` and `<!-- bench:demo:end -->`.
"""
from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.learning import VAL_KEY, copy_gate_text, machine  # noqa: E402
from bench.md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:demo:begin -->", "<!-- bench:demo:end -->"
PASSWORD = "demo-bench-pw-1"


def wait_for(pred, *, timeout: float, what: str, proc: subprocess.Popen, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the launcher exited ({proc.returncode}) while waiting for {what}")
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout:.0f} s")


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def one_click(base: str, user: str) -> int:
    """Log in through the form, then POST the runs page's demo form; returns the new run's id."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    token = lambda page: re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)  # noqa: E731
    page = opener.open(base + "/accounts/login/", timeout=10).read().decode()
    data = urllib.parse.urlencode({"username": user, "password": PASSWORD, "csrfmiddlewaretoken": token(page)})
    opener.open(base + "/accounts/login/", data=data.encode(), timeout=10).read()
    page = opener.open(base + "/runs/", timeout=10).read().decode()
    if "Launch the demo" not in page:
        raise RuntimeError("the runs page has no 'Launch the demo' button")
    with opener.open(base + "/runs/demo/launch/",
                     data=urllib.parse.urlencode({"csrfmiddlewaretoken": token(page)}).encode(), timeout=120) as r:
        m = re.search(r"/runs/(\d+)/$", r.url)
        if not m:
            raise RuntimeError(f"the click did not lead to a run page but to {r.url}")
        return int(m.group(1))


def curve_since(events: Path, t_click: float) -> tuple[list[dict], dict | None]:
    """Validation points [{step, seconds (since the click), reward}] and the run's end event."""
    points, end = [], None
    if not events.is_file():
        return points, end
    for line in events.read_text(encoding="utf-8").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line being written
        if ev.get("type") == "metrics" and VAL_KEY in ev["data"]["metrics"]:
            points.append({"step": ev["data"]["step"], "seconds": round(ev["time"] - t_click, 1),
                           "reward": round(ev["data"]["metrics"][VAL_KEY], 3)})
        elif ev.get("type") == "status" and ev["data"].get("state") in ("stopped", "succeeded", "failed"):
            end = ev
    return points, end


def render(res: dict) -> str:
    w = res["warm"]
    first = next((p for p in res["curve"] if p["reward"] >= res["target"]), None)
    lines = [BEGIN, "## The one-click demo through the platform (`bench/demo.py`)", "",
             f"Command: `{res['command']}`  ", f"Machine: {res['machine']}; load average {res['load_end']:.2f} "
             "at the end (the platform's own processes and the run included).", "",
             f"- `make run`'s launcher on a fresh state folder: platform up (/healthz 200) in **{res['up_s']:.0f} s**; "
             f"the demo prepared in the background, button ready **{res['demo_ready_s']:.0f} s** after the start.",
             f"- Warm start (`trainer.models.demo`, bounded by steps): {w['steps']}/{w['steps_requested']} steps in "
             f"**{w['seconds']:.0f} s**{' (SAFETY CAP HIT)' if w.get('cap_hit') else ''}{copy_gate_text(w)}, seed {w['seed']}, "
             f"{w['threads']} torch thread.",
             f"- Held-out reward after the warm start, sampled at temperature 1 on {res['eval']['episodes']} "
             f"held-out prompts: **{res['eval']['reward']:.3f}** (calculator called in "
             f"{100 * res['eval']['tool_use']:.0f}% of episodes).",
             f"- One click (login form, then the runs page's CSRF-protected POST) -> run {res['run_id']}: recipe "
             "`demo_tool_arith` as saved (8 prompts x 8 samples, lr 3e-4, no KL, 60 steps, validation every 5 "
             "steps on the 128 held-out prompts at temperature 1), a Ray job whose torch threads are the cores "
             f"it may use; followed for {res['followed_s']:.0f} s.", "",
             "| step | seconds since the click | held-out reward (val-core/arith/reward/mean@1, sampled) |",
             "|---:|---:|---:|"]
    lines += [f"| {p['step']} | {p['seconds']} | {p['reward']:.3f} |" for p in res["curve"]]
    if first:
        lines += ["", f"Reached {res['target']} at step {first['step']}, **{first['seconds']} s after the click** "
                      f"({first['seconds'] - res['curve'][0]['seconds']:.0f} s after the first validation)."]
    else:
        lines += ["", f"Did not reach {res['target']} within {res['followed_s']:.0f} s of the click."]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", default="/tmp/rls-demo-bench", help="state folder (emptied first)")
    ap.add_argument("--port", type=int, default=8790)
    ap.add_argument("--warm-steps", type=int, default=0, help="0: the demo's default")
    ap.add_argument("--grpo-seconds", type=float, default=420.0)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--keep", action="store_true", help="keep the state folder afterwards")
    ap.add_argument("--write", default=None)
    args = ap.parse_args(argv)

    state = Path(args.state)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    base = f"http://127.0.0.1:{args.port}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE")}
    env.update(RLSTUDIO_STATE_DIR=str(state), PORT=str(args.port), RLSTUDIO_ADMIN_PASSWORD=PASSWORD,
               PYTHONUNBUFFERED="1")
    if args.warm_steps:
        env["RLSTUDIO_DEMO_WARM_STEPS"] = str(args.warm_steps)
    mach = machine()
    console = open(state.parent / f"{state.name}-console.txt", "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rlstudio.launcher"], cwd=ROOT, env=env, stdout=console,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: healthy(base), timeout=300, what="/healthz", proc=proc)
        up_s = time.monotonic() - t0
        print(f"platform up in {up_s:.1f} s", flush=True)

        def demo_ready():
            st = read_json(state / "demo" / "status.json") or {}
            if st.get("state") == "failed":
                raise RuntimeError(f"demo preparation failed: {st.get('error')}")
            return st.get("state") == "ready"

        wait_for(demo_ready, timeout=1800, what="the demo", proc=proc, interval=2.0)
        ready_s = time.monotonic() - t0
        warm_dir = next((state / "models").glob("demo-tiny-warm-*steps"))
        warm = json.loads((warm_dir / "warm_start.json").read_text())
        print(f"demo ready {ready_s:.1f} s after start; warm start {warm['steps']} steps in {warm['seconds']} s",
              flush=True)

        from trainer.models.demo import evaluate_sampled

        held_out = [json.loads(line) for line in (state / "demo" / "data" / "demo-arith-heldout.jsonl")
                    .read_text(encoding="utf-8").splitlines() if line.strip()]
        ev = evaluate_sampled(warm_dir, held_out, temperature=1.0, threads=1)
        print(f"warm start held-out reward {ev.reward:.3f}, tool use {ev.tool_use:.2f}", flush=True)

        t_click = time.time()
        run_id = one_click(base, "admin")
        print(f"clicked: run {run_id}", flush=True)
        events = state / "runs" / str(run_id) / "events.jsonl"
        deadline = time.monotonic() + args.grpo_seconds
        curve, shown = [], 0
        while time.monotonic() < deadline and proc.poll() is None:
            curve, end = curve_since(events, t_click)
            for p in curve[shown:]:
                print(f"  step {p['step']:3d}  {p['seconds']:6.1f} s  held-out reward {p['reward']:.3f}", flush=True)
            shown = len(curve)
            if end is not None:
                break
            time.sleep(2.0)
        followed = time.time() - t_click
        res = {"command": "python bench/demo.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "machine": mach, "load_end": os.getloadavg()[0], "up_s": up_s, "demo_ready_s": ready_s,
               "warm": warm, "eval": ev.__dict__, "run_id": run_id, "curve": curve, "followed_s": followed,
               "target": args.target}
        (state.parent / f"{state.name}-result.json").write_text(json.dumps(res, indent=2) + "\n")
        if args.write:
            replace_section(Path(args.write), render(res), begin=BEGIN, end=END)
            print(f"updated {args.write}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        console.close()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
