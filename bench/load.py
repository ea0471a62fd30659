"""Platform under load (issue 8 §5): 100 websocket viewers on one live run while 5 runs report at once.

    .venv/bin/python bench/load.py [--runs 5] [--viewers 100] [--rate-per-run 40] [--seconds 20]
                                   [--json out.json] [--write docs/benchmarks.md]

The real platform on this machine, nothing mocked, started as bench/live.py starts it (`live.Stack`):
a fresh PostgreSQL database (migrated, dropped at the end), Redis at 127.0.0.1:6379 as the channel
layer, Daphne serving `rlstudio.config.asgi:application` in a subprocess. Celery is not in this path
(ingest and the websockets are served by Daphne alone), so no worker is started.

  * each of the `--runs` runs has its own trainer-side reporter: a subprocess (`--emit`, below) with
    the trainer's own HttpSink (trainer/sinks_http.py, default settings) emitting `--rate-per-run`
    events/s (mostly samples with a 64-token view, a metrics / memory / heartbeat / log event every
    eighth), each event stamped with its emit time;
  * run 0 is watched by `--viewers` websockets (as the run page watches, `?batch=1`); every other run
    by one, so delivery is checked on all of them;
  * delivery: every viewer must get seq 1..N of its run exactly once and in order (gaps, duplicates
    and reorders are counted); latency = receive time - emit time (one machine, one clock);
  * memory: every 0.5 s the RSS (VmRSS, and its anonymous part RssAnon) of Daphne, of the Redis
    server (pid from INFO) and of each PostgreSQL backend connected to the bench database, read from
    /proc; the table gives the peak of each (a backend's VmRSS counts the shared buffers it touched,
    RssAnon is its own memory).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import live  # noqa: E402  (bench/live.py: the stack and the event shapes)
from md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:load:begin -->", "<!-- bench:load:end -->"


# ------------------------------------------------------------------------------ the emitter process
def emit_main(url: str, token: str, rate: float, seconds: float, out_dir: str) -> int:
    """One trainer's reporting: `rate` events/s for `seconds` through HttpSink, then close."""
    from trainer.sinks_http import HttpSink

    sink = HttpSink(out_dir=Path(out_dir), url=url, token=token)
    total = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(total):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        seq = i + 1
        ev = live.sample_ev(seq, seq // 64, seq % 64, tokens=64) if seq % 8 else live.small_ev(seq)
        ev["time"] = time.time()
        sink.write(ev)
    sink.close()
    print(json.dumps({"sent": sink.sent, "posts": sink.posts, "failures": sink.failures,
                      "dropped": sink.dropped}), flush=True)
    return 0


# ------------------------------------------------------------------------------------------ viewers
class Watcher:
    """One websocket on one run: checks seq 1..N exactly once in order, records latencies."""

    def __init__(self, run_index: int, expect: int) -> None:
        self.run_index, self.expect = run_index, expect
        self.next_seq = 1
        self.received = self.gaps = self.duplicates = self.frames = 0
        self.latencies: list[float] = []
        self.ready = asyncio.Event()

    def take(self, ev: dict, now: float) -> None:
        seq = ev["seq"]
        self.received += 1
        if seq < self.next_seq:
            self.duplicates += 1
            return
        if seq > self.next_seq:
            self.gaps += seq - self.next_seq
        self.next_seq = seq + 1
        self.latencies.append(now - ev["time"])

    async def watch(self, url: str, origin: str, gate: asyncio.Semaphore) -> None:
        from websockets.asyncio.client import connect

        async with gate:  # handshakes a few at a time (see live.Viewer.watch)
            ws = await connect(url, origin=origin, max_size=None, open_timeout=60)
        async with ws:
            self.ready.set()
            async for msg in ws:
                now = time.time()
                frame = json.loads(msg)
                self.frames += 1
                for ev in frame["events"] if frame.get("type") == "batch" else [frame]:
                    self.take(ev, now)
                if self.next_seq > self.expect:
                    break


# ------------------------------------------------------------------------------------------- memory
def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(value.split()[0])
    except (OSError, ValueError):
        pass
    return out


class MemorySampler(threading.Thread):
    """Peak VmRSS / RssAnon (MiB) per platform process, sampled every `every` seconds."""

    def __init__(self, *, daphne_pid: int, database: str, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psycopg2
        import redis

        self.every, self.database, self.daphne_pid = every, database, daphne_pid
        self.redis_pid = int(redis.Redis(host="127.0.0.1", port=6379).info("server")["process_id"])
        self.pg = psycopg2.connect(f"{live.PG}/postgres")
        self.pg.autocommit = True
        self.peak: dict[str, dict[str, float]] = {}
        self.backends_max = 0  # most backends at one moment
        self.backends_seen: set[int] = set()  # CONN_MAX_AGE = 0: each request opens its own
        self.backends_total_max = {"VmRSS": 0.0, "RssAnon": 0.0}  # most summed over one moment's backends
        self.stop = threading.Event()

    def _backend_pids(self) -> list[int]:
        with self.pg.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.database])
            return [r[0] for r in cur.fetchall()]

    def _note(self, name: str, pid: int) -> dict[str, int]:
        kb = _status_kb(pid)
        if kb:
            peak = self.peak.setdefault(name, {"VmRSS": 0.0, "RssAnon": 0.0})
            for key in peak:
                peak[key] = max(peak[key], kb.get(key, 0) / 1024)
        return kb

    def run(self) -> None:
        while not self.stop.is_set():
            self._note("daphne", self.daphne_pid)
            self._note("redis-server", self.redis_pid)
            pids = self._backend_pids()
            self.backends_max = max(self.backends_max, len(pids))
            self.backends_seen.update(pids)
            now = {"VmRSS": 0, "RssAnon": 0}
            for pid in pids:
                kb = self._note(f"postgres backend {pid}", pid)
                for key in now:
                    now[key] += kb.get(key, 0)
            for key in now:
                self.backends_total_max[key] = max(self.backends_total_max[key], now[key] / 1024)
            self.stop.wait(self.every)
        self.pg.close()


# ------------------------------------------------------------------------------------------ the run
async def _load(stack: live.Stack, runs: list[tuple[int, str]], args) -> dict:
    per_run = int(args.rate_per_run * args.seconds)
    gate = asyncio.Semaphore(10)
    watchers = [Watcher(0, per_run) for _ in range(args.viewers)]
    watchers += [Watcher(i, per_run) for i in range(1, len(runs))]
    tasks = [asyncio.create_task(w.watch(stack.ws_url(runs[w.run_index][0]), stack.base, gate)) for w in watchers]
    for w, t in zip(watchers, tasks):
        waiter = asyncio.ensure_future(w.ready.wait())
        await asyncio.wait([waiter, t], return_when=asyncio.FIRST_COMPLETED)
        if not w.ready.is_set():
            waiter.cancel()
            t.result()  # raises the viewer's connection error
    await asyncio.sleep(0.5)

    sampler = MemorySampler(daphne_pid=stack.proc.pid, database=stack.db)
    sampler.start()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(live.REPO), str(live.REPO / "bench")]))
    emitters = [subprocess.Popen(
        [sys.executable, __file__, "--emit", f"{stack.base}/api/v1/runs/{run_id}/events/", token,
         str(args.rate_per_run), str(args.seconds), str(stack.tmp / f"sink-{i}")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=live.REPO) for i, (run_id, token) in enumerate(runs)]
    t0 = time.time()
    loop = asyncio.get_running_loop()
    outs = await asyncio.gather(*(loop.run_in_executor(None, p.communicate) for p in emitters))
    emit_s = time.time() - t0
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    except asyncio.TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    sampler.stop.set()
    sampler.join(5)

    sinks = []
    for p, (out, _) in zip(emitters, outs):
        text = out.decode(errors="replace").strip().splitlines()
        try:
            sinks.append(json.loads(text[-1]))
        except (IndexError, ValueError):
            sinks.append({"error": "\n".join(text[-5:]), "rc": p.returncode})

    def lat(ws: list[Watcher]) -> dict:
        xs = sorted(x for w in ws for x in w.latencies)
        if len(xs) < 2:
            return {"p50_ms": None, "p99_ms": None, "max_ms": None}
        q = statistics.quantiles(xs, n=100)
        return {"p50_ms": round(1000 * q[49], 1), "p99_ms": round(1000 * q[98], 1), "max_ms": round(1000 * xs[-1], 1)}

    watched = [w for w in watchers if w.run_index == 0]
    others = [w for w in watchers if w.run_index != 0]
    backends = {k: v for k, v in sampler.peak.items() if k.startswith("postgres backend")}
    memory = {k: {"peak_rss_mib": round(v["VmRSS"], 1), "peak_anon_mib": round(v["RssAnon"], 1)}
              for k, v in sampler.peak.items() if not k.startswith("postgres backend")}
    if backends:
        memory["postgres backends"] = {
            "count_max": sampler.backends_max, "connections_seen": len(sampler.backends_seen),
            "peak_rss_mib_max": round(max(v["VmRSS"] for v in backends.values()), 1),
            "peak_anon_mib_max": round(max(v["RssAnon"] for v in backends.values()), 1),
            "peak_concurrent_rss_mib": round(sampler.backends_total_max["VmRSS"], 1),
            "peak_concurrent_anon_mib": round(sampler.backends_total_max["RssAnon"], 1)}
    complete = all(w.next_seq == per_run + 1 and not w.gaps and not w.duplicates for w in watchers)
    return {
        "runs": len(runs), "viewers_on_run_0": args.viewers, "viewers_on_other_runs": 1,
        "rate_per_run": args.rate_per_run, "seconds": args.seconds, "events_per_run": per_run,
        "emit_wall_s": round(emit_s, 1), "sinks": sinks,
        "delivery_complete": complete,
        "frames_expected_events": per_run * len(watchers),
        "events_received": sum(w.received for w in watchers),
        "gaps": sum(w.gaps for w in watchers), "duplicates": sum(w.duplicates for w in watchers),
        "viewers_short": sum(1 for w in watchers if w.next_seq <= per_run),
        "latency_run_0": lat(watched), "latency_other_runs": lat(others), "latency_all": lat(watchers),
        "frames_per_viewer_run_0": round(statistics.mean(w.frames for w in watched)),
        "memory": memory,
    }


def render(out: dict) -> str:
    m, r = out["machine"], out["load"]
    lines = [
        BEGIN,
        "## Load (issue 8 §5): 100 viewers on one live run while 5 runs report",
        "",
        f"Command: `{out['command']}` (fresh PostgreSQL database, Redis channel layer, one Daphne process;",
        "each run's events come from its own subprocess through the trainer's HttpSink with its default",
        "settings; viewers use batch frames, as the run page does). Machine: "
        f"{m['cpus']} CPUs ({m['cpu']}), Python {m['python']}, load average {m['load_1min_at_start']} at the start, "
        f"{m.get('load_1min_at_end', '?')} at the end (other jobs share the machine; the bench's own viewers and emitters run on it too).",
        "",
        "| measure | result |",
        "|---|---|",
        f"| reporting | {r['runs']} runs x {r['rate_per_run']} events/s for {r['seconds']:.0f} s "
        f"({r['events_per_run']} events per run; {sum(s.get('posts', 0) for s in r['sinks'])} POSTs in all) |",
        f"| viewers | {r['viewers_on_run_0']} on run 0, {r['viewers_on_other_runs']} on each other run |",
        f"| delivery | {'**complete**' if r['delivery_complete'] else '**INCOMPLETE**'}: "
        f"{r['events_received']:,} of {r['frames_expected_events']:,} events, {r['gaps']} missing, "
        f"{r['duplicates']} duplicates, {r['viewers_short']} viewers short |",
        f"| latency emit → viewer, run 0 ({r['viewers_on_run_0']} viewers) | p50 **{r['latency_run_0']['p50_ms']} ms**, "
        f"p99 **{r['latency_run_0']['p99_ms']} ms**, max {r['latency_run_0']['max_ms']} ms |",
        f"| latency, the other runs | p50 {r['latency_other_runs']['p50_ms']} ms, p99 {r['latency_other_runs']['p99_ms']} ms |",
    ]
    for name, mem in r["memory"].items():
        if name == "postgres backends":
            lines.append(f"| memory: PostgreSQL backends of the bench database (at most {mem['count_max']} at once; "
                         f"{mem['connections_seen']} different ones seen by the 0.5 s sampler; the ingest thread pool keeps its "
                         f"connections `RLSTUDIO_DB_CONN_MAX_AGE` s, {out.get('conn_max_age', '?')} here) | "
                         f"peak RSS {mem['peak_rss_mib_max']} MiB per backend (anonymous {mem['peak_anon_mib_max']} MiB; "
                         f"RSS counts the shared buffers a backend touched); at one moment at most "
                         f"{mem['peak_concurrent_rss_mib']} MiB RSS / {mem['peak_concurrent_anon_mib']} MiB anonymous |")
        else:
            what = " (the machine's shared Redis: other jobs' keys count too)" if name == "redis-server" else ""
            lines.append(f"| memory: {name}{what} | peak RSS {mem['peak_rss_mib']} MiB (anonymous {mem['peak_anon_mib']} MiB) |")
    lines += ["", "Raw figures: `--json`. Celery is not in this path (nothing of ingest or streaming runs in a worker).",
              END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--emit"]:
        url, token, rate, seconds, out_dir = argv[1:6]
        return emit_main(url, token, float(rate), float(seconds), out_dir)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--viewers", type=int, default=100)
    p.add_argument("--rate-per-run", type=float, default=40.0, help="events/s each run reports")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--json", type=Path)
    p.add_argument("--write", type=Path, help="replace the bench:load section of this markdown file")
    args = p.parse_args(argv)
    if args.runs < 1 or args.viewers < 1 or args.rate_per_run <= 0 or args.seconds <= 0:
        p.error("--runs and --viewers must be >= 1, --rate-per-run and --seconds > 0")
    out: dict = {"machine": live.machine(), "command": " ".join([".venv/bin/python bench/load.py", *argv])}
    with live.Stack() as stack:
        runs = [stack.new_run(f"load-{i}") for i in range(args.runs)]
        from django.db import connections

        connections.close_all()  # the bench's own backend is not part of the platform's memory
        out["load"] = asyncio.run(_load(stack, runs, args))
        from django.conf import settings

        out["conn_max_age"] = settings.DATABASES["default"]["CONN_MAX_AGE"]  # Daphne's: same settings, same env
    out["machine"]["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if args.write:
        replace_section(args.write, render(out), begin=BEGIN, end=END)
    return 0 if out["load"]["delivery_complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
