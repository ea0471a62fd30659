"""The run page's connection indicator says what is true: "live" only while events can still arrive (the
socket open, the run not ended), the run's end ("ended (failed)", ...) once it is stopped, succeeded, failed
or lost, from the first paint and when a status event ends it while the page is open. Its readiness
signal is data-socket="open" (set when the socket is accepted), whatever the text says."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_live_while_events_can_arrive_then_the_end(page_as, quiet_run):
    alice, run, _token = quiet_run
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    conn = page.locator("#live-conn")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    assert conn.inner_text() == "live"
    # A status event ending the run (as the websocket delivers it): no longer "live".
    page.evaluate("""() => window.rlstudioLive.apply(
        {seq: window.rlstudioLive.lastSeq() + 1, type: "status", data: {state: "failed"}})""")
    assert conn.inner_text() == "ended (failed)"
    assert conn.get_attribute("data-run-state") == "failed"
    assert conn.get_attribute("data-socket") == "open"


def test_an_ended_run_never_says_live(page_as, quiet_run):
    from rlstudio.runs.models import Run

    alice, run, _token = quiet_run
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    page.wait_for_timeout(300)  # anything the socket's replay would change
    assert page.locator("#live-conn").inner_text() == "ended (succeeded)"
    assert "live" not in page.locator(".pagehead").first.inner_text()
