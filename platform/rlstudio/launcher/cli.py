"""`python -m rlstudio.launcher`: run all of RL Studio locally and stop it all on Ctrl-C.

Order of start: (recover after a crashed launcher) → PostgreSQL → Redis → Ray head (in the
background) → endpoints.json → migrate + demo admin → Celery worker and beat → Daphne; then wait
for /healthz 200 and print the URL. SIGINT / SIGTERM first stop the active runs with a checkpoint
(shutdown.py; a second signal skips that wait), then stop the children in reverse order.
Services given by DATABASE_URL / REDIS_URL / RAY_ADDRESS are used as they are and not started.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import endpoints, postgres, ray_head, redis_server
from .credentials import admin_credentials
from .exposure import allowed_hosts_for_children, exposure_warnings
from .layout import Layout, PortAllocator, layout_for, port_is_free
from .shutdown import shutdown_stop_seconds, stop_runs
from .supervisor import Supervisor, recover, total_rss
from .workers import celery_processes, playground_slots
from rlstudio.config.env import state_dir_from_env

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SETTINGS = "rlstudio.config.settings.local"
PLAYGROUND_QUEUE = "playground"  # the Celery queue of playground sessions (their own worker)
DATASETS_QUEUE = "datasets"  # the Celery queue of dataset validations (their own worker)


def debug_flag(environ: dict[str, str]) -> str:
    """DEBUG for the children: off unless the environment turns it on (`DEBUG=1 make run`, for
    development only: tracebacks and settings in error pages). The settings module alone would
    default to on (rlstudio.config.settings.local)."""
    return environ.get("DEBUG") or "0"


def say(msg: str) -> None:
    print(f"[rlstudio] {msg}", flush=True)


def parse_args(argv: list[str] | None, environ: dict[str, str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rlstudio.launcher", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=int(environ.get("PORT") or 8000),
                   help="HTTP/WebSocket port of the web app (env PORT, default 8000)")
    p.add_argument("--host", default=environ.get("HOST") or "127.0.0.1",
                   help="address the web app binds (env HOST, default 127.0.0.1)")
    p.add_argument("--port-base", type=int, default=int(environ.get("RLSTUDIO_PORT_BASE") or 0),
                   help="first port tried for the other services (env RLSTUDIO_PORT_BASE, default PORT+1)")
    p.add_argument("--no-ray", action="store_true", help="do not start a Ray head")
    p.add_argument("--no-celery", action="store_true", help="do not start the Celery worker and beat")
    p.add_argument("--no-demo", action="store_true", default=environ.get("RLSTUDIO_DEMO", "1") == "0",
                   help="do not register the demo model, dataset and config (RLSTUDIO_DEMO=0)")
    p.add_argument("--demo-warm-steps", type=int, default=int(environ.get("RLSTUDIO_DEMO_WARM_STEPS") or 0),
                   help="warm-start steps of the demo model (env RLSTUDIO_DEMO_WARM_STEPS; default the trainer's)")
    p.add_argument("--ray-cpus", type=int, default=int(environ.get("RLSTUDIO_RAY_CPUS") or (os.cpu_count() or 1)))
    p.add_argument("--ray-object-store-mb", type=int,
                   default=int(environ.get("RLSTUDIO_RAY_OBJECT_STORE_MB") or 512))
    p.add_argument("--settings", default=DEFAULT_SETTINGS, help="Django settings module for the children")
    return p.parse_args(argv)


class Launcher:
    def __init__(self, args: argparse.Namespace, environ: dict[str, str]) -> None:
        self.args = args
        self.environ = environ
        self.layout: Layout = layout_for(state_dir_from_env(environ))
        self.owner = str(self.layout.state)
        self.sup = Supervisor(self.owner, self.layout.logs, self.layout.run)
        self.stop_signal: int | None = None
        self.signals = 0  # how many stop signals came; a second one skips the wait for the runs
        self.stopping_runs = False  # the runs' stop command is running (a second signal then skips it)
        self.shutdown_stop_s = shutdown_stop_seconds(environ)
        self.ready = False  # everything started: the runs' stop at shutdown applies
        self.ray_started = False
        self.env: dict[str, str] = {}
        self.t0 = time.monotonic()
        self._lock_fd: int | None = None
        self.demo = None  # the background `rlstudio_demo` child, until it has ended

    # -- signals ---------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.stop_signal is None:
            self.stop_signal = signum
            say(f"{name}: stopping every process started here ...")
        elif self.signals == 2 and self.stopping_runs:
            say(f"second {name}: not waiting for the runs any longer; stopping the processes now")

    def should_stop(self) -> bool:
        return self.stop_signal is not None

    # -- lock ------------------------------------------------------------------------------
    def _lock(self) -> None:
        path = self.layout.run / "launcher.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            raise SystemExit(f"[rlstudio] another launcher (pid {other or '?'}) runs with state dir "
                             f"{self.layout.state}; stop it first or use another RLSTUDIO_STATE_DIR")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    # -- environment for children ------------------------------------------------------------
    def _child_env(self, urls: dict[str, str]) -> dict[str, str]:
        env = dict(self.environ)
        env["DJANGO_SETTINGS_MODULE"] = self.args.settings
        paths = [str(REPO / "platform"), str(REPO)]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["RLSTUDIO_STATE_DIR"] = str(self.layout.state)
        env["PORT"] = str(self.args.port)
        env["PYTHONUNBUFFERED"] = "1"
        env["DEBUG"] = debug_flag(self.environ)
        # The operator's ALLOWED_HOSTS (HOST=0.0.0.0 for a team) plus the loopback names, which the
        # health probe and the banner's URL use (exposure.py).
        allowed = allowed_hosts_for_children(self.environ)
        if allowed is not None:
            env["ALLOWED_HOSTS"] = allowed
        # Ray >= 2.5x turns token auth on by itself once ~/.ray/auth_token exists (any local
        # ray.init() writes it), which would make our loopback-only head answer 401 to the
        # platform's plain HTTP calls. Pin the mode; RAY_AUTH_MODE=token in the environment wins.
        env.setdefault("RAY_AUTH_MODE", "disabled")
        # Playground sessions go to a queue of their own, served by the celery-playground worker: a
        # session answering for up to RLSTUDIO_PLAYGROUND_MAX_S never holds up the main worker's tasks.
        env["RLSTUDIO_PLAYGROUND_QUEUE"] = env.get("RLSTUDIO_PLAYGROUND_QUEUE") or PLAYGROUND_QUEUE
        # Dataset validations likewise (celery-datasets): a large upload's minute of validation never
        # holds up run submissions, stops and the reconcile on the main worker.
        env["RLSTUDIO_DATASETS_QUEUE"] = env.get("RLSTUDIO_DATASETS_QUEUE") or DATASETS_QUEUE
        # One number for the sessions the site admits and the playground worker's processes (workers.py).
        env["RLSTUDIO_PLAYGROUND_MAX_ACTIVE"] = str(playground_slots(env))
        for key in ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS"):
            env.pop(key, None)
            if urls.get(key):
                env[key] = urls[key]
        return env

    # -- run -------------------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.layout.create()
        self._lock()
        stopped = recover(owner=self.owner, run_dir=self.layout.run)
        if stopped:
            say(f"stopped {len(stopped)} process(es) left by a previous launcher of this state dir")
        code = 0
        try:
            self._start_all()
            code = self._watch()
        except InterruptedError:
            code = 0
        except Exception as exc:  # noqa: BLE001 — any failure: say it, then stop what did start
            say(f"start failed ({type(exc).__name__}): {exc}")
            say(f"logs: {self.layout.logs}/")
            code = 1
        finally:
            self._shutdown()
        return code

    def _start_all(self) -> None:
        a, L = self.args, self.layout
        if not port_is_free(a.port, a.host):
            raise RuntimeError(f"port {a.port} is in use; set PORT (or --port) to a free port")
        alloc = PortAllocator(a.port_base or a.port + 1)
        alloc.taken.append(a.port)
        base_env = self._child_env({})
        urls: dict[str, str] = {}

        urls["DATABASE_URL"] = self.environ.get("DATABASE_URL", "")
        if not urls["DATABASE_URL"]:
            port = self._take(alloc, a.port)
            urls["DATABASE_URL"] = postgres.start(
                self.sup, pgdata=L.pgdata, socket_dir=L.pg_socket_dir, port=port, env=base_env,
                should_stop=self.should_stop)
            say(f"PostgreSQL ready on 127.0.0.1:{port} (data {L.pgdata})  [{self._elapsed()}]")
        urls["REDIS_URL"] = self.environ.get("REDIS_URL", "")
        if not urls["REDIS_URL"]:
            port = self._take(alloc, a.port)
            urls["REDIS_URL"] = redis_server.start(self.sup, folder=L.redis, port=port, env=base_env,
                                                   should_stop=self.should_stop)
            say(f"Redis ready on 127.0.0.1:{port}  [{self._elapsed()}]")

        ray_started = False
        urls["RAY_ADDRESS"] = self.environ.get("RAY_ADDRESS", "")
        if not urls["RAY_ADDRESS"] and not a.no_ray:
            ports = ray_head.RayPorts.allocate(alloc)
            if a.port in ports.workers or a.port in (ports.gcs, ports.dashboard):
                raise RuntimeError("internal: Ray got the web port")
            urls["RAY_ADDRESS"] = ray_head.start(
                self.sup, ports=ports, temp_dir=L.ray_temp, env=base_env, num_cpus=a.ray_cpus,
                object_store_bytes=a.ray_object_store_mb * 1024 * 1024)
            ray_started = True
            self.ray_started = True
        urls["RAY_DASHBOARD_URL"] = urls["RAY_ADDRESS"] if urls["RAY_ADDRESS"].startswith("http") else ""
        endpoints.write(L.endpoints, urls)
        self.urls = urls
        env = self._child_env(urls)
        self.env = env

        user, password, source = admin_credentials(L.state, self.environ)
        boot_env = {**env, "RLSTUDIO_ADMIN_USER": user, "RLSTUDIO_ADMIN_PASSWORD": password}
        rc = self.sup.run_to_end("bootstrap", [sys.executable, "-m", "rlstudio.launcher.bootstrap"],
                                 env=boot_env, cwd=REPO, timeout=300, should_stop=self.should_stop)
        if rc != 0:
            raise RuntimeError(f"migrate / admin setup failed (exit {rc}):\n{self._tail('bootstrap')}")
        say(f"database migrated, admin {user!r} ready  [{self._elapsed()}]")

        if ray_started:
            ray_child = self._child("ray")
            ray_head.wait_ready(urls["RAY_ADDRESS"], timeout=180, should_stop=self.should_stop,
                                alive=ray_child.alive)
            say(f"Ray head ready, Jobs API {urls['RAY_ADDRESS']} (temp {L.ray_temp})  [{self._elapsed()}]")

        if not a.no_celery:
            tag = hashlib.sha256(self.owner.encode()).hexdigest()[:8]
            for name, argv, grace in celery_processes(env, tag=tag, beat_schedule=L.run / "celerybeat-schedule"):
                self.sup.spawn(name, argv, env=env, cwd=REPO, grace=grace)
        self.sup.spawn("web", [sys.executable, "-m", "daphne", "-b", a.host, "-p", str(a.port),
                               "rlstudio.config.asgi:application"], env=env, cwd=REPO, grace=10.0)
        health = self._wait_health(timeout=120)
        if not a.no_celery:
            self._wait_worker(urls["REDIS_URL"], f"rlstudio-{tag}@{socket.gethostname()}", timeout=90)
        if not a.no_demo and not a.no_celery:
            # Idempotent: the demo model (warm-started once, then cached under the state folder), the
            # GSM8K test split and the arithmetic demo datasets (validated by the worker) and the
            # one-click demo config, owned by the admin. In the background: the warm start takes
            # minutes and the platform is usable meanwhile (the runs page shows the time left). A
            # failure is reported, never fatal to the platform.
            argv = [sys.executable, str(REPO / "manage.py"), "rlstudio_demo", "--user", user]
            if a.demo_warm_steps:
                argv += ["--warm-steps", str(a.demo_warm_steps)]
            self.demo = self.sup.spawn("demo", argv, env=env, cwd=REPO, grace=10.0, critical=False)
            say(f"preparing the demo in the background (logs/demo.log)  [{self._elapsed()}]")
        self.ready_s = time.monotonic() - self.t0
        self.ready = True
        procs = self.sup.processes()
        url_host = "127.0.0.1" if a.host in ("0.0.0.0", "::") else a.host
        say("=" * 66)
        say(f"RL Studio is up at http://{url_host}:{a.port}/   (ready in {self.ready_s:.1f} s)")
        say(f"  log in as {user!r} with password {password!r} (from {source})")
        say(f"  admin: http://{url_host}:{a.port}/admin/ (users, teams, quotas), "
            f"quotas and the queue: http://{url_host}:{a.port}/quotas/admin/")
        for warning in exposure_warnings(a.host, a.port, self.environ, socket.gethostname()):
            say(f"  {warning}")
        debug_on = env["DEBUG"].strip().lower() in ("1", "true", "yes", "on")
        say("  DEBUG on (development: error pages show tracebacks)" if debug_on
            else "  DEBUG off (DEBUG=1 make run turns it on for development)")
        say(f"  health: {json.dumps(health)}")
        say(f"  logs: {L.logs}/   state: {L.state}/")
        say(f"  memory: {total_rss(procs) / 2**20:.0f} MiB RSS over {len(procs)} processes")
        say("  Ctrl-C stops the active runs with a checkpoint, then everything (twice: at once).")
        say("=" * 66)

    def _take(self, alloc: PortAllocator, web_port: int) -> int:
        port = alloc.take()
        if port == web_port:
            port = alloc.take()
        return port

    def _child(self, name: str):
        return next(c for c in self.sup.children if c.name == name)

    def _wait_health(self, *, timeout: float) -> dict:
        host = "127.0.0.1" if self.args.host in ("0.0.0.0", "::") else self.args.host
        url = f"http://{host}:{self.args.port}/healthz"
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.should_stop():
                raise InterruptedError("stop requested before the web app was ready")
            dead = self.sup.dead_critical()
            if dead is not None:
                raise RuntimeError(f"{dead.name} exited with code {dead.popen.returncode}:\n{self._tail(dead.name)}")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:300]!r}"
            except (OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise TimeoutError(f"{url} did not answer 200 within {timeout:.0f} s ({last})")

    def _wait_worker(self, broker: str, node: str, *, timeout: float) -> None:
        """Wait until the Celery worker answers a broadcast ping (it connects after Daphne is up)."""
        from celery import Celery

        probe = Celery("rlstudio-launcher-probe", broker=broker, set_as_current=False)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.should_stop():
                    raise InterruptedError("stop requested before the Celery worker was ready")
                dead = self.sup.dead_critical()
                if dead is not None:
                    raise RuntimeError(f"{dead.name} exited with code {dead.popen.returncode}:\n{self._tail(dead.name)}")
                if probe.control.ping(destination=[node], timeout=1.0):
                    say(f"Celery worker {node} ready  [{self._elapsed()}]")
                    return
        finally:
            probe.close()
        raise TimeoutError(f"the Celery worker {node} did not answer a ping within {timeout:.0f} s")

    def _watch(self) -> int:
        while not self.should_stop():
            dead = self.sup.dead_critical()
            if dead is not None:
                say(f"{dead.name} exited unexpectedly (code {dead.popen.returncode}); stopping. "
                    f"Last log lines:\n{self._tail(dead.name)}")
                return 1
            self._report_demo()
            time.sleep(0.5)
        return 0

    def _report_demo(self) -> None:
        """Say once how the background demo preparation ended."""
        if self.demo is None or self.demo.alive():
            return
        rc, self.demo = self.demo.popen.returncode, None
        outcome = ("ready: one click on 'Launch the demo' on the runs page" if rc == 0
                   else f"NOT registered (exit {rc}), see logs/demo.log")
        say(f"demo content {outcome}  [{self._elapsed()}]")

    def _stop_runs_first(self) -> None:
        """Stop the active runs with a checkpoint while everything still runs (shutdown.py). Not when
        no Ray head or Celery worker was started here (no run dies with this launcher, or nothing
        would carry the stop), before start-up finished, with RLSTUDIO_SHUTDOWN_STOP_S=0, after a
        second signal, or when the worker or the Ray head has already died."""
        a = self.args
        if not (self.ready and self.ray_started and not a.no_celery) or self.shutdown_stop_s <= 0:
            return
        if self.signals >= 2:
            say("second signal: the runs are not stopped first")
            return
        needed = [c for c in self.sup.children if c.name in ("ray", "celery-worker")]
        if len(needed) < 2 or not all(c.alive() for c in needed):
            say("the Ray head or a Celery worker is down: the runs are not stopped first")
            return
        t = time.monotonic()
        say(f"stopping the active runs with a checkpoint first (up to {self.shutdown_stop_s:g} s; "
            "Ctrl-C again to skip) ...")
        self.stopping_runs = True
        try:
            outcome = stop_runs(self.sup, env=self.env, cwd=REPO, manage_py=REPO / "manage.py",
                                wait_s=self.shutdown_stop_s, skip=lambda: self.signals >= 2, say=say)
        finally:
            self.stopping_runs = False
        if outcome == "failed":
            say(f"stopping the runs failed; logs/shutdown.log:\n{self._tail('shutdown')}")
        elif outcome == "timeout":
            say("stopping the runs did not finish in time; see logs/shutdown.log")
        say(f"runs: {outcome} in {time.monotonic() - t:.1f} s")

    def _shutdown(self) -> None:
        try:
            self._stop_runs_first()
        except Exception as exc:  # noqa: BLE001 — whatever fails there, every child below is still stopped
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP): saying it may fail too
                say(f"stopping the runs first failed ({type(exc).__name__}): {exc}")
        t = time.monotonic()
        endpoints.remove(self.layout.endpoints)
        self.sup.stop_all()
        say(f"stopped in {time.monotonic() - t:.1f} s")
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    def _tail(self, name: str, lines: int = 25) -> str:
        path = self.layout.logs / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:.1f} s"


def main(argv: list[str] | None = None) -> int:
    environ = dict(os.environ)
    args = parse_args(argv, environ)
    return Launcher(args, environ).run()
