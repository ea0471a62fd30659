"""Fault: Redis is restarted (killed, started empty) while a browser watches a run: the page catches up.

A Redis and a Daphne of this test's own (the session's Redis at 6379 serves every other suite and
must not be restarted): the run page is open in Chromium on that Daphne, live over its websocket.
Then Redis is SIGKILLed and started again on its port with nothing in it (no persistence: channel
groups and queued messages are gone, as after a crash without a volume). Meanwhile the "trainer"
keeps reporting through the real ingest API, which must store every event in PostgreSQL although
the broadcast fails. Once Redis is back the page must show every event, in seq order, none missing:
the websocket reconnects with resume_after=<last seq applied> and the consumer replays the gap.
"""
from __future__ import annotations

import pytest

from tests.e2e.fault_procs import DaphneServer

pytestmark = [pytest.mark.django_db(transaction=True)]
T0 = 1_764_440_000.0
LAST_SEQ = "window.rlstudioLive.lastSeq()"


def _log(seq: int) -> dict:
    return {"seq": seq, "type": "log", "time": T0 + seq, "data": {"level": "info", "message": f"event {seq}"}}


@pytest.fixture
def redis(private_redis):
    return private_redis


@pytest.fixture
def daphne(redis, test_database_url, tmp_path):
    server = DaphneServer(folder=tmp_path / "daphne", env={"DATABASE_URL": test_database_url, "REDIS_URL": redis.url})
    server.start()
    yield server
    server.stop()


def _watch_live(ctx, ui, base: str, run_id: int):
    """A page of `ctx` logged in as alice on the run's page, its websocket live."""
    page = ctx.new_page()
    ui.login(page, base, "alice")
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    return page


@pytest.mark.timeout(300)
def test_page_catches_up_with_no_gap_after_redis_restart(browser, daphne, redis, make_user, ui):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import RunEvent

    alice = make_user("alice")
    # Never admitted (the session's beat may run): only the ingest API writes to this run.
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, token = run_create(owner=alice, name="redis-restart", dataset=dataset, model=model, config={}, gpus=0)

    def ingest(first: int, last: int) -> None:
        answer = ui.post_events(daphne.base, run.pk, token, [_log(s) for s in range(first, last + 1)])
        assert answer["accepted"] == last - first + 1 and not answer["refused"], answer

    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=daphne.base,
                              bypass_csp=True)  # wait_for_function's eval (conftest.page_as)
    ctx.set_default_timeout(20_000)
    try:
        page = _watch_live(ctx, ui, daphne.base, run.pk)
        page.evaluate("""() => {
            window.__noReload = 1;
            window.__conn = [];  // every state the connection indicator shows from now on
            const el = document.getElementById('live-conn');
            new MutationObserver(() => window.__conn.push(el.textContent))
                .observe(el, {childList: true, characterData: true, subtree: true});
        }""")
        ingest(1, 20)
        page.wait_for_function(f"{LAST_SEQ} === 20")

        redis.kill()
        for first in range(21, 61, 10):  # reported while Redis is down: stored, not broadcast
            ingest(first, first + 9)
        assert RunEvent.objects.filter(run=run).count() == 60
        assert page.evaluate(LAST_SEQ) == 20  # nothing can have reached the page
        # The consumer's Redis connection breaks, the socket closes, and the page tries again (and
        # fails, with backoff, while Redis is still down: the consumer cannot join its group).
        page.wait_for_function("window.__conn.includes('reconnecting…')", timeout=30_000)
        page.wait_for_timeout(3000)
        assert page.evaluate(LAST_SEQ) == 20

        redis.start()  # same port, empty
        ingest(61, 80)
        page.wait_for_function(f"{LAST_SEQ} === 80", timeout=60_000)
        ui.wait_for(lambda: page.locator("#live-log").inner_text().count("\n") >= 80, timeout=10,
                    what="80 log lines on the page")
        lines = page.locator("#live-log").inner_text().strip().splitlines()
        assert lines == [f"[info] event {s}" for s in range(1, 81)]  # in seq order, none missing or twice
        assert page.evaluate("window.__noReload") == 1, "the page reloaded"
        page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
        # And the socket is live again, not only caught up: a new event arrives without a reconnect.
        ingest(81, 81)
        page.wait_for_function(f"{LAST_SEQ} === 81", timeout=20_000)
    finally:
        ctx.close()


@pytest.mark.timeout(180)
def test_page_fills_a_seq_gap_from_the_store(browser, daphne, make_user, ui):
    """An event delivered live past a gap (6..10 stored but never broadcast, as when the server's
    subscription was down) makes the page reconnect with resume_after: it ends with 1..11 in order.
    A seq never stored (12) is passed after one retry, and the page stays live."""
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import RunEvent

    alice = make_user("alice")
    # Never admitted (the session's beat may run): a failed submission would end the run and its token.
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, token = run_create(owner=alice, name="gap", dataset=dataset, model=model, config={}, gpus=0)

    def ingest(*seqs: int) -> None:
        answer = ui.post_events(daphne.base, run.pk, token, [_log(s) for s in seqs])
        assert answer["accepted"] == len(seqs) and not answer["refused"], answer

    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=daphne.base,
                              bypass_csp=True)  # wait_for_function's eval (conftest.page_as)
    ctx.set_default_timeout(20_000)
    try:
        page = _watch_live(ctx, ui, daphne.base, run.pk)
        page.evaluate("() => { window.__noReload = 1; }")
        ingest(1, 2, 3, 4, 5)
        page.wait_for_function(f"{LAST_SEQ} === 5")
        RunEvent.objects.bulk_create([  # stored, never broadcast
            RunEvent(run=run, seq=s, type="log", time=timezone.now(), data=_log(s)["data"]) for s in range(6, 11)])
        ingest(11)  # live, past the gap
        page.wait_for_function(f"{LAST_SEQ} === 11")
        ingest(13)  # 12 never existed: one retry, then accepted
        page.wait_for_function(f"{LAST_SEQ} === 13")
        ingest(14)
        page.wait_for_function(f"{LAST_SEQ} === 14")
        lines = page.locator("#live-log").inner_text().strip().splitlines()
        assert lines == [f"[info] event {s}" for s in (*range(1, 12), 13, 14)]
        assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    finally:
        ctx.close()
