"""Fixtures of the real-browser journeys: Debian's Chromium driven by Playwright against the running
platform (Daphne, Celery worker and beat, Ray, PostgreSQL, Redis from tests/conftest.py).

- `services`: the session's ASGI server, worker, beat and Ray head (yields the server's base URL);
- `browser`: one headless Chromium for the session (`/usr/bin/chromium`, never `playwright install`);
- `page_as(user)`: a fresh browser context logged in through the real login form; every dialog it
  opens is recorded on `page.dialogs` (and confirmed, so the stop buttons' confirm() goes through;
  `page.answer_dialogs = False` dismisses them instead);
- `quiet_run`: (alice, her run, its ingest token), a run that stays queued (a quota of nothing) on
  dataset and model records nothing reads, so that only the real ingest endpoint writes to it;
- `make_user`, `tiny_model` (a registered tiny Qwen2 under a model root), `shot(page, name)` which
  writes <RLSTUDIO_SCREENSHOT_DIR or var/screenshots>/<name>.png (1280x800, stable names so reruns
  overwrite): test artifacts, out of git. `RLSTUDIO_SCREENSHOT_DIR=docs/screenshots` refreshes the docs'.

Run: RLSTUDIO_TEST_DATABASE_NAME=test_browser .venv/bin/python -m pytest tests/browser -q
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import poll_until

REPO = Path(__file__).resolve().parents[2]
# The GSM8K test split the repository carries (MIT; tests/fixtures/gsm8k/README.md).
GSM8K_TEST = REPO / "tests" / "fixtures" / "gsm8k" / "test.jsonl"
SCREENSHOTS = Path(os.environ.get("RLSTUDIO_SCREENSHOT_DIR") or REPO / "var" / "screenshots")
PASSWORD = "pw-for-browser-1"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="session")
def services(asgi_server, celery_worker, celery_beat, ray_head):
    """The running platform; the test process talks to Ray too (force stops in cleanups)."""
    from django.conf import settings

    old = settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head
    try:
        yield {"base": asgi_server, "worker": celery_worker, "ray": ray_head}
    finally:
        settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL = old


@pytest.fixture(scope="session")
def browser(services):
    """One headless Chromium for the whole session (started after the services, see below)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (Debian's package)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop marked running in this thread, which makes Django's
    # ORM refuse every query (SynchronousOnlyOperation). The tests' ORM calls are plain blocking
    # calls between browser steps, so allow them; the services were started above, before this is
    # set, so the server and worker processes do not inherit it.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    pw = sync_playwright().start()
    chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield chromium
    finally:
        chromium.close()
        pw.stop()


def restore_default_quota() -> None:
    """Put back the default GpuQuota row of the data migration if a flush removed it.

    Transactional tests end with a flush (TRUNCATE of every table), which also removes what data
    migrations made: after the first such test the default quota was gone, so a user without a quota
    row of their own could not launch (quota_for raises GpuQuota.DoesNotExist, /runs/new/ answered
    500 and the train journey timed out waiting for the run's page, but only after other journeys).
    The migration's own function makes it, so the values cannot drift.
    """
    import importlib

    from django.apps import apps

    importlib.import_module("rlstudio.quotas.migrations.0002_default_quota").create_default(apps, None)


@pytest.fixture
def make_user(transactional_db):
    from django.contrib.auth import get_user_model

    restore_default_quota()

    def make(username: str, *, staff: bool = False):
        return get_user_model().objects.create_user(username=username, password=PASSWORD,
                                                    is_staff=staff, is_superuser=staff)

    return make


@pytest.fixture
def quiet_run(make_user):
    """(user, run, token): a run of its owner that stays queued (zero quota)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, token = run_create(owner=alice, name="quiet-run", dataset=dataset, model=model, config={}, gpus=0)
    return alice, run, token


def login(page, base: str, username: str, password: str = PASSWORD) -> None:
    """Log in through the real form and land on the runs list."""
    page.goto(base + "/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("form button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    assert page.locator("header nav").inner_text().find(f"Logout ({username})") >= 0


@pytest.fixture
def page_as(browser, services):
    """page_as(user) -> a logged-in page in a context of its own; page.dialogs lists every dialog."""
    contexts = []

    def make(user, *, bypass_csp: bool = True):
        # Playwright's wait_for_function polls its predicate with eval inside the page, which the
        # site's Content-Security-Policy forbids (no 'unsafe-eval'): the journeys bypass the policy;
        # test_csp.py does not, and checks that the pages themselves break none of it.
        ctx = browser.new_context(viewport=VIEWPORT, base_url=services["base"], bypass_csp=bypass_csp)
        ctx.set_default_timeout(20_000)
        contexts.append(ctx)
        page = ctx.new_page()
        page.dialogs = []
        page.answer_dialogs = True  # False: the next dialogs are dismissed (a confirm() answered Cancel)

        def on_dialog(dialog):
            page.dialogs.append((dialog.type, dialog.message))
            dialog.accept() if page.answer_dialogs else dialog.dismiss()

        page.on("dialog", on_dialog)
        login(page, services["base"], user.get_username())
        return page

    yield make
    for ctx in contexts:
        ctx.close()


def save_shot(page, name: str) -> Path:
    """Save a viewport screenshot as <SCREENSHOTS>/<name>.png (overwritten on every run)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@pytest.fixture
def shot():
    """shot(page, name): a screenshot under SCREENSHOTS (see save_shot)."""
    return save_shot


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    """A model root both this process and the worker's Ray jobs read (an absolute tmp path)."""
    return tmp_path_factory.mktemp("browser-models")


@pytest.fixture(scope="session")
def tiny_model_dir(model_root):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(model_root / "tiny-smoke", preset="smoke", seed=0)


@pytest.fixture
def register_model(settings, model_root, tiny_model_dir):
    """register_model(owner) -> a ModelAsset made by the catalog service (its real folder checks)."""
    from rlstudio.catalog.services.model_assets import model_register

    settings.RLSTUDIO_MODEL_ROOTS = [str(model_root)]
    return lambda owner, name="tiny-smoke": model_register(owner=owner, name=name, path=str(tiny_model_dir))


@pytest.fixture
def ingest(services):
    """ingest(run_id, token, events) -> the ingest API's answer (see post_events)."""
    return lambda run_id, token, events: post_events(services["base"], run_id, token, events)


@pytest.fixture
def gsm8k_test_file() -> Path:
    if not GSM8K_TEST.is_file():
        pytest.fail(f"{GSM8K_TEST} is missing (the repository carries it: tests/fixtures/gsm8k/)")
    return GSM8K_TEST


wait_for = poll_until  # ui.wait_for(pred, timeout=, what=)


def post_events(base: str, run_id: int, token: str, events: list[dict]) -> dict:
    """POST a batch to the real ingest endpoint with the run's token (as the trainer does)."""
    req = urllib.request.Request(
        f"{base}/api/v1/runs/{run_id}/events/", data=json.dumps({"events": events}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"}, method="POST")
    with urllib.request.urlopen(req, timeout=20) as resp:
        return json.loads(resp.read())


@pytest.fixture(autouse=True)
def _stop_leftover_runs(request):
    """After each journey: kill what still runs, before the database is flushed under it. In a thread
    of its own: Playwright's sync API keeps an event loop running in the test thread, where the stops'
    notifications (pushed through async_to_sync) would fail and log a traceback."""
    yield
    if "transactional_db" not in request.fixturenames:
        return
    failed: list[BaseException] = []

    def stop_all() -> None:
        from django.db import connections

        try:
            _stop_live_runs()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test thread
            failed.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=stop_all, name="stop-leftover-runs")
    worker.start()
    worker.join()
    if failed:
        raise failed[0]


def _stop_live_runs() -> None:
    from rlstudio.runs.models import TERMINAL_STATUSES, Run, RunStatus
    from rlstudio.runs.services import RunRefused, run_stop

    # A row a test set running without ever submitting it has no job to stop: ended at once
    # (force-stopped, it would wait out the reconcile's grace: 90 s).
    Run.objects.filter(status__in=[RunStatus.RUNNING, RunStatus.STOPPING],
                       ray_submission_id__isnull=True).update(status=RunStatus.STOPPED)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        live = list(Run.objects.exclude(status__in=TERMINAL_STATUSES).select_related("owner"))
        if not live:
            return
        for run in live:
            if run.status == RunStatus.SUBMITTING:
                continue  # stoppable once it runs
            try:
                run_stop(run=run, by=run.owner, force=True)
            except RunRefused:
                pass
        time.sleep(1)


def upload_dataset(page, path: Path, *, name: str, preset: str = "gsm8k", timeout_ms: int = 120_000) -> int:
    """Upload `path` through /datasets/upload/ ("choose one"), wait for the worker to make it ready
    (the detail page reloads itself while validating); returns the dataset id."""
    page.goto("/datasets/upload/")
    page.set_input_files("#id_file", str(path))
    page.fill("input[name=name]", name)
    page.select_option("select[name=preset]", preset)
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"), timeout=60_000)
    page.wait_for_selector("#dataset-status[data-status=ready], #dataset-status[data-status=invalid]",
                           timeout=timeout_ms)
    page.wait_for_load_state("load")
    status = page.get_attribute("#dataset-status", "data-status")
    assert status == "ready", page.locator("pre.error").all_inner_texts()
    return int(page.url.rstrip("/").rsplit("/", 1)[-1])


def select_model(page, name: str) -> None:
    """Pick a model on the run form by its name (its option also names the chat format detected)."""
    value = page.evaluate("""(name) => {
        const o = [...document.querySelectorAll('#id_model option')].find((o) => o.text.startsWith(name + ' ('));
        return o ? o.value : null; }""", name)
    assert value is not None, f"no model {name!r} on the run form"
    page.select_option("#id_model", value=value)


def launch_run(page, *, name: str, dataset: str, model: str, steps: int, save_freq: int | None = None,
               preset: str = "cpu_smoke", gpus: int = 0, overrides: str = "") -> int:
    """Fill /runs/new/ and press Launch; returns the new run's id (from the page it lands on)."""
    page.goto("/runs/new/")
    page.fill("#id_name", name)
    page.select_option("#id_dataset", label=dataset)
    select_model(page, model)
    page.select_option("#id_preset", preset)
    page.fill("#id_gpus", str(gpus))
    page.fill("#id_total_training_steps", str(steps))
    if save_freq is not None:
        page.fill("#id_save_freq", str(save_freq))
    if overrides:
        page.fill("#id_overrides", overrides)
    page.click("form.run-form button[type=submit]")
    # A run's page, not /runs/new/ itself (a glob like **/runs/*/ matches the form's own URL at once).
    page.wait_for_url(re.compile(r".*/runs/\d+/$"), timeout=60_000)
    page.wait_for_load_state("load")
    return int(page.url.rstrip("/").rsplit("/", 1)[-1])


@pytest.fixture
def ui():
    """The page helpers above, for the test modules (a conftest is not importable by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(upload_dataset=upload_dataset, launch_run=launch_run, select_model=select_model,
                           wait_for=wait_for, shot=save_shot, login=login, post_events=post_events)
