"""End-to-end tests of `python -m rlstudio.launcher` (what `make run` runs), on real everything.

The launcher starts as a subprocess with a temporary state dir and no DATABASE_URL / REDIS_URL /
RAY_ADDRESS, so it brings up embedded PostgreSQL and Redis, a Ray head, Celery and Daphne. The tests
talk to them over the network like a user would, stop the launcher with SIGINT and check that no
process it started is left. A second test kills the launcher with SIGKILL and checks that the next
start cleans up after it and keeps the data. Plus fast checks of the launcher's small parts.

Run: .venv/bin/python -m pytest tests/e2e/test_launcher.py -q -s   (-s shows the measurements)
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
OWNER_ENV = "RLSTUDIO_LAUNCHER_OWNER"  # the mark the launcher puts on every child's environment
ADMIN_PASSWORD = "e2e-launcher-pw-7391"
pytestmark = pytest.mark.own_ray  # the launcher starts a Ray head of its own: the cluster shard


# ---------------------------------------------------------------------------------------------
# helpers


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port_block(size: int = 100) -> int:
    """A port P such that P .. P+size are all free now (the launcher derives its ports from P+1)."""
    for _ in range(200):
        # below the session Ray heads' ports (20768-32767, tests/conftest.py) and Linux's ephemeral range
        base = random.randrange(10000, 20000, 100)
        if all(_free(p) for p in range(base, base + size)):
            return base
    raise RuntimeError("no free block of ports")


def launcher_env(state: Path, port: int) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE",
                "RLSTUDIO_PORT_BASE", OWNER_ENV):
        env.pop(key, None)
    env.update(RLSTUDIO_STATE_DIR=str(state), PORT=str(port), PYTHONUNBUFFERED="1",
               RLSTUDIO_ADMIN_PASSWORD=ADMIN_PASSWORD, RLSTUDIO_RAY_CPUS="1",
               RLSTUDIO_DEMO_WARM_STEPS="4",  # the demo's warm start: 4 steps, not minutes
               # 8 held-out rows, not 128: the run validates on all of them before its first point
               # (62 s of this test on 128 rows, every answer running to the length limit)
               RLSTUDIO_DEMO_VAL_ROWS="8")
    return env


class Launched:
    """A launcher subprocess with its console captured to a file."""

    def __init__(self, state: Path, port: int, *flags: str) -> None:
        self.state, self.port = state, port
        state.mkdir(parents=True, exist_ok=True)
        n = len(list(state.parent.glob(f"console-{state.name}-*.txt")))
        self.console = state.parent / f"console-{state.name}-{n}.txt"  # one file per launch
        self._out = open(self.console, "wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlstudio.launcher", *flags],
            env=launcher_env(state, port), cwd=str(REPO), stdout=self._out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_healthy(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"launcher exited with {self.proc.returncode}:\n{self.text()[-4000:]}")
            try:
                # Ready = /healthz 200 and the launcher's banner (printed once the worker answers).
                with urllib.request.urlopen(self.url("/healthz"), timeout=5) as resp:
                    if resp.status == 200 and "RL Studio is up at" in self.text():
                        return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.5)
        self.kill_all()
        pytest.fail(f"/healthz not 200 within {timeout} s ({last}):\n{self.text()[-4000:]}")

    def processes(self) -> list[psutil.Process]:
        """The launcher's process tree plus everything carrying its mark (re-parented ones too)."""
        found = {}
        try:
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
        except psutil.NoSuchProcess:
            pass
        for p in marked(self.state):
            found.setdefault(p.pid, p)
        return list(found.values())

    def stop(self, timeout: float = 90) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"launcher did not exit within {timeout} s of SIGINT:\n{self.text()[-3000:]}")

    def kill_all(self) -> None:
        """Last-resort cleanup so a failing test leaves nothing running."""
        procs = self.processes()
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked(state: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(OWNER_ENV) == str(state) and alive(p):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return out


def rss_mib(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / 2**20


def login(launched: Launched, username: str, password: str) -> http.cookiejar.CookieJar:
    """Log in through the real login form (CSRF cookie + token); returns the session cookies."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(launched.url("/accounts/login/"), timeout=10) as resp:
        assert resp.status == 200
        page = resp.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    data = urllib.parse.urlencode({"username": username, "password": password,
                                   "csrfmiddlewaretoken": token}).encode()
    with opener.open(launched.url("/accounts/login/"), data=data, timeout=10) as resp:
        assert "/accounts/login/" not in resp.url, "login failed: still on the login page"
    assert any(c.name == "sessionid" for c in jar)
    return jar


def ws_close_code(launched: Launched, path: str, headers: dict[str, str] | None = None) -> tuple[int, int | None]:
    """Open a websocket through the ASGI server; returns (HTTP status of the upgrade, close code),
    the code None when the app accepted and kept the connection open."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    # Channels' origin validator wants an Origin among the allowed hosts, as a browser sends.
    with connect(f"ws://127.0.0.1:{launched.port}{path}", additional_headers=headers or {},
                 origin=f"http://127.0.0.1:{launched.port}", open_timeout=10) as ws:
        status = ws.response.status_code
        try:
            ws.recv(timeout=5)
        except ConnectionClosed as exc:
            return status, exc.rcvd.code
        except TimeoutError:
            return status, None
    raise AssertionError("the server sent a message instead of closing")


def assert_all_gone(launched: Launched, pids: list[psutil.Process]) -> None:
    deadline = time.monotonic() + 10  # the kernel may need a moment to reap
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if alive(p)]
    assert not left, f"left running: {[(p.pid, p.name()) for p in left]}"
    assert marked(launched.state) == []
    assert not (launched.state / "services" / "endpoints.json").exists()
    assert list((launched.state / "run").glob("*.pid")) == []


# ---------------------------------------------------------------------------------------------
# end to end


REWARD_POINTS = """() => {
    // the held-out reward before training (val-core/...) and GRPO's own (critic/score/mean)
    let n = 0;
    for (const plot of document.querySelectorAll('#charts .plot')) {
        const family = plot.dataset.family || '';
        if (family !== 'critic/score' && !family.startsWith('val-core/')) continue;
        for (const t of plot.data || []) {
            if (t.meta === 'critic/score/mean' || (t.meta || '').startsWith('val-core/')) n += t.x.length;
        }
    }
    return n;
}"""


RUN_PAGE = re.compile(r".*/runs/\d+/$")


def assert_run_page_answered(nav, what: str) -> None:
    """The navigation `nav` (expect_navigation's) caught is the form POST's: a new document, the run
    page the POST redirected to. A navigation within the old page (history API) has no response: the
    run page used to make one by itself on every samples refetch while a run reported samples, and
    expect_navigation() returned on it while the POST was still under way."""
    response = nav.value
    assert response is not None, f"{what}: the navigation caught was one within the old page, not the form's"
    assert response.ok and RUN_PAGE.match(response.url), (what, response.url, response.status)


def mark_no_reload(page) -> None:
    """Set window.__noReload on the run page once it is live; a reload after this clears it.

    Called once the form POST's redirect answered (assert_run_page_answered): the mark goes on that
    page. It was set up to 3 times, on a guess that Chromium reports a POST's redirect as two
    navigations; it does not (one commit per POST and redirect, logged over CDP: 27 of 27). Playwright's
    pw:api log does print "navigated to" twice for each navigation, which is what that guess read (its
    issue 5644). The navigation that was not the POST's was the run page's own: run_live.js wrote the
    samples table's view into the address (history.replaceState, a navigation within the document) on
    every refetch, and a refetch follows each pushed sample by 1.5 s; while the stop POST was under way,
    the Force stop click and expect_navigation() returned on it, and an evaluate met the old page as
    the POST's page replaced it. tests/browser/test_run_page_stays_put.py keeps the page from doing so.
    """
    page.wait_for_load_state("load")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    page.evaluate("window.__noReload = 1")


def click_the_demo_and_watch_it_learn(launched: "Launched") -> None:
    """The one-click demo through the launched platform's pages, in Debian's Chromium."""
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, login, save_shot

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (Debian's package)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            # bypass_csp: wait_for_function eval's its predicate in the page (tests/browser/conftest.py)
            page = browser.new_context(viewport=VIEWPORT, bypass_csp=True).new_page()
            page.set_default_timeout(30_000)
            page.on("dialog", lambda dialog: dialog.accept())
            navigations: list[str] = []  # the main frame's, named when a reload is found
            page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)
            login(page, launched.url(""), "admin", ADMIN_PASSWORD)
            page.goto(launched.url("/runs/"))
            assert page.locator("#demo").get_attribute("data-demo-state") == "ready", \
                page.locator("#demo").inner_text()
            save_shot(page, "00-demo-ready")
            with page.expect_navigation() as nav:
                page.click("#demo button[type=submit]")
            assert_run_page_answered(nav, "the demo's launch")
            run_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
            mark_no_reload(page)
            # The demo validates on its held-out prompts before its first step (its first point: the
            # held-out reward before GRPO). With the 4-step warm start of this test every answer runs to
            # the length limit, so even on the 8 rows of this test that can take a while on a loaded
            # machine: the wait is long.
            try:
                page.wait_for_function("(" + REWARD_POINTS + ")() >= 1", timeout=420_000)
            except Exception:
                raise AssertionError(f"demo run {run_id}: no reward point live; badge "
                                     f"{page.locator('#run-controls .badge').inner_text()!r}, step "
                                     f"{page.locator('#live-step').inner_text()!r}\n{launched.text()[-3000:]}") from None
            assert page.evaluate("window.__noReload") == 1, f"the page reloaded: {navigations}"
            assert "demo-tool-arith" in page.locator("h1").inner_text()
            save_shot(page, "00-demo-live")
            # The controls card follows the run without a reload: "Force stop" appears once the run is
            # running (the page was rendered while it was being submitted), and "stopped" after it.
            with page.expect_navigation() as nav:
                page.click("#run-controls button:text-is('Force stop')", timeout=60_000)
            assert_run_page_answered(nav, "the force stop")
            mark_no_reload(page)
            page.wait_for_function("document.querySelector('#run-controls .badge').textContent.trim()"
                                   ".toLowerCase() === 'stopped'", timeout=90_000)
            assert page.evaluate("window.__noReload") == 1, f"the page reloaded: {navigations}"
            assert page.locator("#run-controls button:text-is('Force stop')").count() == 0
        finally:
            browser.close()


@pytest.mark.timeout(900)  # the launch, the demo's preparation and its first live step
def test_launcher_runs_everything_and_stops_cleanly(tmp_path):
    port = free_port_block()
    state = tmp_path / "st"
    launched = Launched(state, port)
    try:
        health = launched.wait_healthy(timeout=240)
        ready_s = time.monotonic() - launched.t0
        assert health["db"] == "ok" and health["redis"] == "ok", health
        assert health["ray"] == "ok", health

        # The endpoints contract: the URLs of the running services, for manage.py elsewhere.
        ep = json.loads((state / "services" / "endpoints.json").read_text())
        assert set(ep) == {"DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "RAY_DASHBOARD_URL"}
        assert ep["DATABASE_URL"].startswith("postgresql://") and "/rlstudio" in ep["DATABASE_URL"]
        assert str(port) not in ep["DATABASE_URL"] and ":6379" not in ep["REDIS_URL"]

        # Ray's Jobs API at RAY_ADDRESS: a job submitted now, checked below (it runs while the checks in
        # between and the demo's preparation go on).
        from ray.job_submission import JobStatus, JobSubmissionClient

        client = JobSubmissionClient(ep["RAY_ADDRESS"])
        job = client.submit_job(entrypoint="python -c \"print('ray-says', 6 * 7)\"")

        # A real PostgreSQL, migrated, with the demo admin.
        import psycopg2

        with psycopg2.connect(ep["DATABASE_URL"]) as conn, conn.cursor() as cur:
            cur.execute("SELECT is_superuser FROM auth_user WHERE username = 'admin'")
            assert cur.fetchone() == (True,)
            cur.execute("SELECT count(*) FROM django_migrations")
            assert cur.fetchone()[0] > 10
        conn.close()

        # A real Redis with a live Celery worker on it.
        from celery import Celery

        probe, replies = Celery("probe", broker=ep["REDIS_URL"], set_as_current=False), []
        for _ in range(6):  # a solo-pool worker answers between tasks (beat's reconcile, the demo's)
            replies = probe.control.ping(timeout=5)
            if replies:
                break
        assert replies and all("ok" in next(iter(r.values())) for r in replies), replies

        # `manage.py` in another shell with the same state dir reaches the same database.
        env = launcher_env(state, port)
        env["DJANGO_SETTINGS_MODULE"] = "rlstudio.config.settings.local"
        shown = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from django.contrib.auth import get_user_model as g;"
             "print('admins', g().objects.filter(is_superuser=True).count())"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert "admins 1" in shown.stdout, shown.stderr[-2000:]

        # The login page, and logging in with the printed credentials.
        with urllib.request.urlopen(launched.url("/accounts/login/"), timeout=10) as resp:
            assert resp.status == 200
        assert f"password {ADMIN_PASSWORD!r}" in launched.text()
        jar = login(launched, "admin", ADMIN_PASSWORD)

        # WebSockets through the ASGI server: upgraded (101), then Django's consumer closes an
        # anonymous connection with 4401; with the admin's session it is not the anonymous code.
        assert ws_close_code(launched, "/ws/runs/1/") == (101, 4401)
        cookie = "; ".join(f"{c.name}={c.value}" for c in jar)
        status, code = ws_close_code(launched, "/ws/runs/1/", {"Cookie": cookie})
        assert status == 101 and code != 4401

        # The Ray job submitted above ran to completion.
        deadline = time.monotonic() + 90
        while client.get_job_status(job) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            assert time.monotonic() < deadline, "Ray job did not finish in 90 s"
            time.sleep(0.5)
        assert client.get_job_status(job) == JobStatus.SUCCEEDED
        assert "ray-says 42" in client.get_job_logs(job)

        with psycopg2.connect(ep["DATABASE_URL"]) as conn, conn.cursor() as cur:
            # The demo content of the first start, prepared in the background after the platform is
            # up: the tiny demo models, GSM8K test converted by the worker, and the one-click demo
            # config, saved last.
            deadline, n = time.monotonic() + 180, 0
            while time.monotonic() < deadline and n == 0:
                cur.execute("SELECT count(*) FROM runs_runconfig WHERE name = 'Demo: tool-calling arithmetic (GRPO)'")
                n = cur.fetchone()[0]
                conn.commit()
                time.sleep(0 if n else 1)
            assert n == 1, (state / "logs" / "demo.log").read_text(errors="replace")[-3000:]
            cur.execute("SELECT count(*) FROM catalog_modelasset WHERE tokenizer_ok")
            assert cur.fetchone()[0] >= 2  # the untrained and the warm-started demo model
            deadline, row = time.monotonic() + 90, None
            while time.monotonic() < deadline:  # validated in the background by the worker
                cur.execute("SELECT status, num_rows FROM catalog_dataset WHERE name = 'gsm8k-test'")
                row = cur.fetchone()
                conn.commit()
                if row and row[0] != "validating":
                    break
                time.sleep(1)
            assert row == ("ready", 1319), row
            cur.execute("SELECT num_rows FROM catalog_dataset WHERE name = 'demo-arith-heldout'")
            assert cur.fetchone() == (8,)  # RLSTUDIO_DEMO_VAL_ROWS reached the demo's preparation
        conn.close()

        # The README's promise, in a real Chromium: log in as the demo admin, one click on "Launch
        # the demo", and GRPO's reward chart grows live on the run's page. Then force-stop it.
        click_the_demo_and_watch_it_learn(launched)

        procs = launched.processes()
        names = {p.name() for p in procs if alive(p)}
        assert {"postgres", "raylet", "gcs_server"} <= names, names
        assert any("redis-server" in n for n in names), names
        print(f"\n[measure] full launcher (Ray, Celery): ready in {ready_s:.1f} s, "
              f"{rss_mib(procs):.0f} MiB RSS over {len(procs)} processes")
    except BaseException:
        launched.kill_all()
        raise

    t = time.monotonic()
    rc = launched.stop()
    print(f"[measure] stopped in {time.monotonic() - t:.1f} s")
    assert rc == 0, launched.text()[-3000:]
    # Ctrl-C's first step asked for the active runs' stop with a checkpoint (the demo run was force-stopped
    # above, so there were none) before any child stopped.
    assert re.search(r"stopping the active runs with a checkpoint first .*\n\[rlstudio\] +no active runs\n"
                     r"\[rlstudio\] runs: done in ",
                     launched.text()), launched.text()[-3000:]
    assert_all_gone(launched, procs)
    from rlstudio.launcher.layout import layout_for

    shutil.rmtree(layout_for(state).short, ignore_errors=True)  # Ray's session logs outside tmp_path


def test_second_start_after_kill9_recovers_and_keeps_data(tmp_path):
    port = free_port_block()
    state = tmp_path / "st"
    first = Launched(state, port, "--no-ray", "--no-celery")
    try:
        first.wait_healthy(timeout=180)
        ready_s = time.monotonic() - first.t0
        procs = first.processes()
        print(f"\n[measure] launcher without Ray/Celery: ready in {ready_s:.1f} s, "
              f"{rss_mib(procs):.0f} MiB RSS over {len(procs)} processes")
        check_served_without_debug(first)
        ep = json.loads((state / "services" / "endpoints.json").read_text())
        import psycopg2

        with psycopg2.connect(ep["DATABASE_URL"]) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE e2e_keep (v int); INSERT INTO e2e_keep VALUES (7)")
        conn.close()
        # Crash: the launcher dies at once; its children (own sessions) keep running.
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        orphans = [p for p in procs if p.pid != first.proc.pid and alive(p)]
        assert any(p.name() == "postgres" for p in orphans)
    except BaseException:
        first.kill_all()
        raise

    second = Launched(state, port, "--no-ray", "--no-celery")
    try:
        second.wait_healthy(timeout=180)
        assert "left by a previous launcher" in second.text()
        assert [p for p in orphans if alive(p)] == [], "the crashed launcher's processes survive"
        ep = json.loads((state / "services" / "endpoints.json").read_text())
        with psycopg2.connect(ep["DATABASE_URL"]) as conn, conn.cursor() as cur:
            cur.execute("SELECT v FROM e2e_keep")
            assert cur.fetchone() == (7,)  # the data folder survived the crash
        conn.close()

        # A second launcher on the same state dir refuses while this one runs.
        dup = subprocess.run([sys.executable, "-m", "rlstudio.launcher", "--no-ray"],
                             env=launcher_env(state, port + 99), cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        assert dup.returncode != 0 and "another launcher" in (dup.stdout + dup.stderr)
        procs = second.processes()
    except BaseException:
        second.kill_all()
        raise
    assert second.stop() == 0, second.text()[-3000:]
    assert_all_gone(second, procs)
    from rlstudio.launcher.layout import layout_for

    shutil.rmtree(layout_for(state).short, ignore_errors=True)  # the socket folder outside tmp_path


# ---------------------------------------------------------------------------------------------
# the small parts


def check_served_without_debug(launched: Launched) -> None:
    """`make run` serves with DEBUG off: a 404 is our page (not Django's debug page), static files
    are still served (whitenoise), every page carries the Content-Security-Policy."""
    assert "DEBUG off (DEBUG=1 make run turns it on for development)" in launched.text()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(launched.url("/no-such-page/"), timeout=10)
    page = missing.value.read().decode()
    assert missing.value.code == 404
    assert 'id="page-not-found"' in page and "/no-such-page/" in page
    assert "Using the URLconf" not in page and "DEBUG = True" not in page
    with urllib.request.urlopen(launched.url("/static/css/rlstudio.css"), timeout=10) as css:
        assert css.status == 200 and b".topbar" in css.read()
    with urllib.request.urlopen(launched.url("/accounts/login/"), timeout=10) as resp:
        assert "script-src 'self'" in resp.headers["Content-Security-Policy"]


def test_make_run_debug_is_off_unless_the_environment_turns_it_on(tmp_path):
    """The launcher's children get DEBUG=0 by default and Django resolves it to False; DEBUG=1 is the
    documented switch for development."""
    from rlstudio.launcher.cli import Launcher, debug_flag, parse_args

    assert debug_flag({}) == "0" and debug_flag({"DEBUG": "1"}) == "1"
    environ = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    environ["RLSTUDIO_STATE_DIR"] = str(tmp_path / "state")
    child = Launcher(parse_args([], environ), environ)._child_env({})
    assert child["DEBUG"] == "0" and child["DJANGO_SETTINGS_MODULE"] == "rlstudio.config.settings.local"
    probe = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    # Both probes at once (each is mostly Django's start-up), then each one's answer.
    probes = {expected: subprocess.Popen([sys.executable, "-c", probe], env=dict(child, DEBUG=flag) if flag else child,
                                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for flag, expected in ((None, "False"), ("1", "True"))}
    for expected, proc in probes.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-2000:]
        assert stdout.strip().splitlines()[-1] == expected


def test_recover_removes_stale_pid_files_and_spares_strangers(tmp_path):
    """A dead pid and a live process that is not ours (pid reused) lose their pid files; the
    stranger keeps running. A live process that is ours (same start time) is stopped."""
    from rlstudio.launcher.supervisor import recover

    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stranger = subprocess.Popen(["sleep", "60"])  # no mark, wrong start time, no state dir
    ours = subprocess.Popen(["sleep", "60"])
    try:
        (run / "gone.pid").write_text(f"{dead.pid} 1.0\n")
        (run / "reused.pid").write_text(f"{stranger.pid} 1.0\n")
        (run / "ours.pid").write_text(f"{ours.pid} {psutil.Process(ours.pid).create_time()!r}\n")
        stopped = recover(owner=str(tmp_path / "no-such-state"), run_dir=run)
        assert stopped == [ours.pid]
        assert ours.wait(timeout=15) is not None
        assert stranger.poll() is None
        assert list(run.glob("*.pid")) == []
    finally:
        for p in (stranger, ours):
            p.kill()
            p.wait()


def test_port_allocator_skips_busy_ports_and_never_repeats():
    from rlstudio.launcher.layout import PortAllocator

    base = free_port_block(20)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base + 1))
        busy.listen()
        alloc = PortAllocator(base)
        got = alloc.take_many(3)
    assert got == [base, base + 2, base + 3]


def test_endpoints_written_atomically_and_read_by_env(tmp_path):
    from rlstudio.config.env import load_env
    from rlstudio.launcher import endpoints
    from rlstudio.launcher.layout import layout_for

    lay = layout_for(tmp_path.resolve())
    lay.create()
    endpoints.write(lay.endpoints, {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/rlstudio",
                                    "REDIS_URL": "redis://127.0.0.1:2/0", "RAY_ADDRESS": ""})
    assert json.loads(lay.endpoints.read_text()) == {
        "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/rlstudio",
        "REDIS_URL": "redis://127.0.0.1:2/0"}
    assert [p.name for p in lay.services.iterdir() if p.is_file()] == ["endpoints.json"]  # no temp left
    env = load_env({"RLSTUDIO_STATE_DIR": str(tmp_path)})
    assert env.redis_url == "redis://127.0.0.1:2/0" and env.database_url_from == "endpoints"
    with pytest.raises(ValueError):
        endpoints.write(lay.endpoints, {"NOT_A_KEY": "x"})
    endpoints.remove(lay.endpoints)
    assert not lay.endpoints.exists()


def test_short_socket_folders_for_long_state_paths(tmp_path):
    from rlstudio.launcher.layout import layout_for

    long_state = tmp_path / ("x" * 120)
    lay = layout_for(long_state)
    assert len(str(lay.ray_temp)) <= 30 and str(lay.ray_temp).startswith("/tmp/rls-")
    assert len(str(lay.pg_socket_dir / ".s.PGSQL.65535")) <= 100
    other = layout_for(tmp_path / ("y" * 120))
    assert other.ray_temp != lay.ray_temp  # two state dirs never share socket folders


def test_admin_password_generated_once_and_kept(tmp_path):
    from rlstudio.launcher.credentials import admin_credentials

    user, pw, source = admin_credentials(tmp_path, {})
    assert user == "admin" and len(pw) >= 12 and source.endswith("admin-password")
    assert admin_credentials(tmp_path, {})[1] == pw
    assert (tmp_path / "admin-password").stat().st_mode & 0o077 == 0
    assert admin_credentials(tmp_path, {"RLSTUDIO_ADMIN_USER": "boss",
                                        "RLSTUDIO_ADMIN_PASSWORD": "given"})[:2] == ("boss", "given")
