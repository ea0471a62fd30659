"""Session fixtures that start the real services the integration tests talk to.

- `ray_head`: a local Ray head (loopback only, ports away from Redis's 6379), yields the Jobs API
  address (`http://127.0.0.1:<dashboard port>`).
- `celery_worker`: a real Celery worker process (solo pool) on the test database and the test Redis,
  with RAY_ADDRESS pointing at `ray_head`; tests that use it need `transactional_db` so that what
  they write is committed and visible to the worker.
- `asgi_server`: Daphne serving `rlstudio.config.asgi:application` on the test database; yields its
  base URL. The worker's runs report to it (RLSTUDIO_PUBLIC_URL), so the trainer's HTTP sink, the
  ingest API and the database are all in the loop.
- `celery_beat`: a real Celery beat running the runs' reconcile every second.

Each is started once per session, only when a test asks for it, and stopped (with every process it
started) at the end. Nothing here is a mock.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures import demo_eval

REPO = Path(__file__).resolve().parent.parent
# Ray turns token auth on by itself once ~/.ray/auth_token exists (a local ray.init() writes
# it); the test heads are loopback-only, so pin the mode for every Ray this session starts.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
VENV_BIN = Path(sys.executable).parent


def _forget_process_state() -> None:
    """Forget what the platform keeps per process: Ray's cached total GPUs (`ray_jobs.cluster_total_gpus`)
    and the broker's last try (`dispatch.broker_was_down`); only modules already imported hold any."""
    ray_jobs, dispatch = sys.modules.get("rlstudio.runs.ray_jobs"), sys.modules.get("rlstudio.runs.dispatch")
    if ray_jobs is not None:
        ray_jobs.cluster_total_gpus_clear()
    if dispatch is not None:
        dispatch.broker_was_down_forget()


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test (unit, integration or e2e) asks Ray (or its fake) afresh and starts with the broker's
    last try forgotten, as a fresh process would."""
    _forget_process_state()
    yield
    _forget_process_state()


EPHEMERAL_FLOOR = 32768  # Linux's default ip_local_port_range starts here: ports below it are only bound


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, *, timeout: float, what: str, proc: subprocess.Popen | None = None,
               log: Path | None = None, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what}: process exited with {proc.returncode}\n{tail}")
        try:
            value = pred()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(interval)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s\n{tail}")


def poll_until(pred, *, timeout: float, what: str, interval: float = 0.3):
    """pred()'s first truthy value within `timeout` seconds, else an AssertionError naming `what`.

    Unlike wait_until (for services starting up), an exception raised by `pred` propagates: a test's
    own check must fail loudly, not be retried until the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout:.0f}s")


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test's own (free port, no persistence), to stop and restart at will: the
    session's Redis serves every other suite and is never touched."""
    from tests.e2e.fault_procs import RedisServer

    server = RedisServer(folder=tmp_path / "redis")
    server.start()
    yield server
    server.kill()


def stop_process_group(proc: subprocess.Popen, *, grace: float = 20.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after the grace period."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _service_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test",
        PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]),
        PYTHONUNBUFFERED="1",
        RAY_USAGE_STATS_ENABLED="0",
    )
    env.update(extra)
    return env


# PostgreSQL error codes a flush may meet while the session's worker or beat is mid-transaction.
_FLUSH_RETRY_PGCODES = {"40P01": "deadlock detected", "55P03": "lock not available",
                        "40001": "serialization failure"}


def _flush_lock_conflict(exc: BaseException) -> str | None:
    """The PostgreSQL lock conflict behind a failed flush, if that is what it was."""
    while exc is not None:
        code = getattr(exc, "pgcode", None)
        if code in _FLUSH_RETRY_PGCODES:
            return f"{code} {_FLUSH_RETRY_PGCODES[code]}"
        exc = exc.__cause__ or exc.__context__
    return None


def _delete_flush_sql(original):
    """PostgreSQL's sql_flush for the tests' flushes: the same exclusive lock on every table that
    TRUNCATE takes (so it waits for the worker's open transactions as TRUNCATE does, and sees every
    committed row), then a DELETE of each table, in one transaction. Every foreign key Django makes is
    DEFERRABLE INITIALLY DEFERRED, so the order does not matter and the check at commit finds empty
    tables. Why: a TRUNCATE of the ~40 tables took 1.1-1.5 s (a new file for every table and index),
    LOCK + DELETE 0.004-0.012 s (measured on the test database), and ~180 transactional tests end with
    a flush. A flush that asks for more (sequences reset, cascade) keeps Django's TRUNCATE."""

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        quoted = [self.quote_name(t) for t in tables]
        return [f"LOCK TABLE {', '.join(quoted)} IN ACCESS EXCLUSIVE MODE", *(f"DELETE FROM {t}" for t in quoted)]

    sql_flush._deletes = True
    return sql_flush


def pytest_configure(config):
    """A transactional test ends with a flush: one lock of every table, then its rows deleted (see
    _delete_flush_sql; Django's own flush is a TRUNCATE, taking the same lock). The session's Celery
    worker and beat are real and keep working between tests (a launch's follow-up task, the reconcile
    every second), so a transaction of theirs that holds one table and wants another meets the flush
    holding that one, and PostgreSQL aborts one of the two as a deadlock. When the flush is the one
    aborted, pytest-django reports the test as an error and leaves its rows for the next test (CI: a
    browser test then found 'alice' already there). The flush runs in one transaction, so a failed one
    changed nothing: try it again, a few times, and say so on stderr. Any other flush failure is raised
    with the database's own error in its message. Without Django (the GPU device's image: trainer and
    bench tests only) there is nothing to patch."""
    try:
        from django.core.management.base import CommandError
        from django.db.backends.postgresql.operations import DatabaseOperations
        from django.test import TransactionTestCase
    except ImportError:
        return

    if not getattr(DatabaseOperations.sql_flush, "_deletes", False):
        DatabaseOperations.sql_flush = _delete_flush_sql(DatabaseOperations.sql_flush)
    original = TransactionTestCase._fixture_teardown
    if getattr(original, "_retries_lock_conflicts", False):
        return

    def _fixture_teardown(self):
        for attempt in range(1, 6):
            try:
                return original(self)
            except CommandError as exc:
                conflict = _flush_lock_conflict(exc)
                if conflict is None or attempt == 5:
                    # Django's message lists possible reasons, not the one: put the database's own
                    # error where pytest's one-line summary shows it.
                    raise CommandError(f"{str(exc).splitlines()[0]} ({type(exc.__cause__).__name__}: "
                                       f"{str(exc.__cause__).strip()}; try {attempt})") from exc
                sys.stderr.write(f"\n[flush] {conflict} on try {attempt}; trying again\n")
                time.sleep(0.5 * attempt)

    _fixture_teardown._retries_lock_conflicts = True
    TransactionTestCase._fixture_teardown = _fixture_teardown


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database; on the way out, first close the connection of asgiref's one
    sync thread.

    Channels' consumers (and `sync_to_async` outside a request) do their database work on that one
    shared thread, which lives as long as the process. With persistent connections
    (RLSTUDIO_DB_CONN_MAX_AGE) it keeps its connection open after the last test, and PostgreSQL
    refuses to drop a database a session is connected to. Not asyncio.run: after the browser tests
    the main thread already runs an event loop (see pytest_collection_modifyitems)."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


@pytest.fixture(scope="session")
def test_database_url(django_db_setup, django_db_blocker) -> str:
    """DATABASE_URL of the test database pytest-django created (for child processes)."""
    from django.db import connection

    s = connection.settings_dict
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or "5432"
    user = s.get("USER") or "postgres"
    password = s.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    if host.startswith("/"):
        return f"postgresql://{auth}/{s['NAME']}?host={host}&port={port}"
    return f"postgresql://{auth}{host}:{port}/{s['NAME']}"


@pytest.fixture(scope="session")
def _ray_head_started():
    """The Ray head's process, started and not waited for (see `ray_head`): {"proc", "address", "log"}.
    Apart from the wait so that the Celery worker and Daphne boot while the head does."""
    from rlstudio.launcher import ray_head as rh
    from rlstudio.launcher.layout import PortAllocator

    temp_dir = Path(tempfile.mkdtemp(prefix="rls-t-", dir="/tmp"))
    log = temp_dir / "ray.log"
    # ~60 consecutive ports from a base below Linux's ephemeral range (32768-60999): a free port there
    # can be taken by any outgoing connection (the plain shard's, beside this one) before Ray binds it.
    ports = rh.RayPorts.allocate(PortAllocator(EPHEMERAL_FLOOR - 80 - (os.getpid() % 150) * 80))
    args = [a for a in rh.argv(ports=ports, temp_dir=temp_dir, num_cpus=4,
                               object_store_bytes=300 * 1024 * 1024) if a]
    # No drain on SIGTERM: a test head has nothing to hand over (Ray's default waits up to 30 s).
    env = _service_env(RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=temp_dir,
                                env=env, start_new_session=True)
    try:
        yield {"proc": proc, "address": f"http://127.0.0.1:{ports.dashboard}", "log": log}
    finally:
        _stop_ray_head(proc)
        _sweep(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head(_ray_head_started):
    """A real local Ray head; yields RAY_ADDRESS (the Jobs API / dashboard URL)."""
    proc, address, log = (_ray_head_started[k] for k in ("proc", "address", "log"))

    def ready():
        with urllib.request.urlopen(address + "/api/version", timeout=2) as r:
            return r.status == 200

    wait_until(ready, timeout=120, what="Ray head", proc=proc, log=log)
    # The Jobs API answers a little after the version endpoint.
    wait_until(lambda: urllib.request.urlopen(address + "/api/jobs/", timeout=2).status == 200,
               timeout=60, what="Ray Jobs API", proc=proc, log=log)
    return address


def _stop_ray_head(proc: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` alone, which stops its raylet, GCS and dashboard itself (about 2 s);
    then the process group for whatever is left. A SIGTERM to the whole group at once made the head wait
    out ~30 s before exiting (measured: 29-30 s of every session's teardown)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        stop_process_group(proc, grace=10)
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything of the group the head left behind
    except ProcessLookupError:
        pass


def _sweep(marker: Path) -> None:
    """Kill any process still alive whose command line mentions our Ray temp dir."""
    try:
        import psutil
    except ImportError:  # comes with ray[default]
        return
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(marker) in part for part in (p.info["cmdline"] or [])):
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


@pytest.fixture(scope="session")
def _celery_worker_started(test_database_url, _ray_head_started, _asgi_started, tmp_path_factory):
    """The Celery worker's process, started as soon as the head's and Daphne's addresses are known
    (not when they answer: the worker needs them only for its tasks); see `celery_worker`."""
    log = tmp_path_factory.mktemp("celery") / "worker.log"
    state = tmp_path_factory.mktemp("state")
    ray_address = _ray_head_started["address"]
    env = _service_env(DATABASE_URL=test_database_url, RAY_ADDRESS=ray_address,
                       RAY_DASHBOARD_URL=ray_address, RLSTUDIO_STATE_DIR=str(state),
                       RLSTUDIO_PUBLIC_URL=_asgi_started["base"])
    args = [str(VENV_BIN / "celery"), "-A", "rlstudio", "worker", "--pool", "solo",
            "--loglevel", "INFO", "--without-gossip", "--without-mingle",
            "-n", f"test-{os.getpid()}@%h"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
    try:
        yield {"process": proc, "log": log, "state_dir": state}
    finally:
        stop_process_group(proc, grace=20)


@pytest.fixture(scope="session")
def celery_worker(_celery_worker_started, ray_head, asgi_server):
    """A real Celery worker (solo pool) on the test database, Redis and Ray head.

    The three processes boot together (the `_..._started` fixtures); this waits for the head, Daphne
    and then the worker to answer. Started one after the other they took the sum of their boots."""
    from rlstudio.config.celery import app

    # `shared_task`s send through Celery's *current* app: make sure it is ours (a probe app made by
    # an earlier test must never become the one that .delay() uses).
    app.set_current()
    app.set_default()

    def ready():
        return app.control.ping(timeout=1.0)

    wait_until(ready, timeout=90, what="Celery worker", proc=_celery_worker_started["process"],
               log=_celery_worker_started["log"], interval=0.5)
    return _celery_worker_started


@pytest.fixture(scope="session")
def _asgi_started(test_database_url, tmp_path_factory):
    """Daphne's process, started and not waited for (see `asgi_server`): {"proc", "base", "log"}."""
    port = free_port()
    log = tmp_path_factory.mktemp("daphne") / "daphne.log"
    env = _service_env(DATABASE_URL=test_database_url)
    args = [str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
            "rlstudio.config.asgi:application"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
    try:
        yield {"proc": proc, "base": f"http://127.0.0.1:{port}", "log": log}
    finally:
        stop_process_group(proc, grace=10)


@pytest.fixture(scope="session")
def asgi_server(_asgi_started):
    """Daphne serving the platform on the test database; yields the base URL."""
    base = _asgi_started["base"]

    def ready():
        with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
            return r.status in (200, 503)

    wait_until(ready, timeout=60, what="Daphne", proc=_asgi_started["proc"], log=_asgi_started["log"])
    return base


@pytest.fixture(scope="session")
def celery_beat(celery_worker, test_database_url, ray_head, tmp_path_factory):
    """A real Celery beat (the runs' reconcile every second) beside the session's worker."""
    folder = tmp_path_factory.mktemp("beat")
    log = folder / "beat.log"
    env = _service_env(DATABASE_URL=test_database_url, RAY_ADDRESS=ray_head,
                       RAY_DASHBOARD_URL=ray_head, RLSTUDIO_RECONCILE_INTERVAL_S="1")
    args = [str(VENV_BIN / "celery"), "-A", "rlstudio", "beat", "--loglevel", "INFO",
            "-s", str(folder / "schedule")]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
    try:
        wait_until(lambda: b"beat: Starting" in log.read_bytes(), timeout=60, what="Celery beat",
                   proc=proc, log=log)
        yield {"process": proc, "log": log}
    finally:
        stop_process_group(proc, grace=10)


# The demo's evaluation fixture (tests/trainer/test_evaluate_demo.py, the evaluation browser journey).
DEMO_WARM_STEPS, DEMO_GRPO_STEPS, DEMO_PROMPTS = demo_eval.WARM_STEPS, demo_eval.GRPO_STEPS, demo_eval.PROMPTS
_DEMO_BUILD = pytest.StashKey["demo_eval.BackgroundBuild"]()


@pytest.fixture(scope="session")
def demo_eval_run(request, tmp_path_factory) -> dict:
    """The demo task's evaluation run (tests/fixtures/demo_eval.py): {"out", "warm", "config", "test",
    "step"} (`step`: the checkpoint's folder). Started in the background when the session's tests were
    collected (`_start_demo_build`), so this waits only for what is left of its build (about 65 s on 2
    quiet cores); built here when nothing started it."""
    started = request.config.stash.get(_DEMO_BUILD, None)
    if started is not None:
        return started.result(timeout=1500)
    return demo_eval.as_paths(demo_eval.build(tmp_path_factory.mktemp("demo_eval")))


def _start_demo_build(config, items) -> None:
    """Start `demo_eval_run`'s build now, in a process of its own, if a collected test will want it (its
    users run after the tests that need only the Ray head, `band`, so the build goes on beside those)."""
    if config.option.collectonly or not any("demo_eval_run" in getattr(i, "fixturenames", ()) for i in items):
        return
    # under the session's base temp folder, which pytest prunes whatever way the session ends
    out = config._tmp_path_factory.mktemp("demo_eval")
    config.stash[_DEMO_BUILD] = demo_eval.BackgroundBuild(out)


def pytest_unconfigure(config):
    build = config.stash.get(_DEMO_BUILD, None)
    if build is not None:
        build.stop()


def pytest_addoption(parser):
    parser.addoption(
        "--shard", choices=("all", *SHARDS), default="all",
        help="run one shard of the suite (tests/shards.py runs them: cluster first, then services and "
             "plain at once): 'cluster', the tests that start a Ray cluster of their own (the launcher's, "
             "the trainer's); 'services', those that use the session's Ray head, Celery worker and Daphne, "
             "and the browser tests; 'plain', all the others; 'all' (the default) every test in this process")


SHARDS = ("cluster", "services", "plain")
# Fixtures that start a Ray cluster of the test's own (with the `own_ray` mark: the cluster shard), and
# those that need the session's services (the services shard; the demo evaluation run is shared by its
# browser journey, so its other user runs there too).
CLUSTER_FIXTURES = frozenset({"local_ray"})
SERVICES_FIXTURES = frozenset({"ray_head", "demo_eval_run"})


def band(item) -> int:
    """0: needs none of the session's long-lived services; 1: uses the session's Ray head (directly or
    through the Celery worker / beat); 2: uses the demo evaluation run (built in the background during
    the bands before); 3: a browser test."""
    if "tests/browser/" in item.nodeid.replace("\\", "/"):
        return 3
    fixtures = getattr(item, "fixturenames", ())
    if "demo_eval_run" in fixtures:
        return 2
    return 1 if "ray_head" in fixtures else 0


def shard(item) -> str:
    """The shard of SHARDS a test belongs to (see pytest_addoption)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if band(item) or SERVICES_FIXTURES & fixtures:
        return "services"
    if item.get_closest_marker("own_ray") or CLUSTER_FIXTURES & fixtures:
        return "cluster"
    return "plain"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Run the tests in four bands (stable within each, after pytest-django's own ordering):

    0. everything that needs none of the session's long-lived services;
    1. tests that use the session's Ray head (directly or through the Celery worker / beat), so that
       the head is started only once the launcher's and the trainer's own Ray clusters are gone
       (three Ray clusters on two cores starve each other's raylets);
    2. the demo evaluation run's users, once its background build has had the bands before;
    3. browser tests last: Playwright's sync API keeps an event loop running in the main thread,
       which no asyncio.run() after it may share.

    With --shard, only that shard's tests (`shard`) are kept (tests/shards.py). Then the demo
    evaluation run's build starts if a kept test wants it (`_start_demo_build`).
    """
    items.sort(key=band)
    wanted = config.getoption("--shard", default="all")
    if wanted != "all":
        kept, dropped = [], []
        for item in items:
            (kept if shard(item) == wanted else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    _start_demo_build(config, items)
