"""An open run page never navigates by itself: a sample pushed over the websocket refetches the
samples table, and that refetch leaves the address alone. It used to write it (history.replaceState)
on every refetch, and a replaceState is a navigation, within the document: Playwright's
expect_navigation() around the "Force stop" click took it for the stop form's POST and returned
while the old page was still there (tests/e2e/test_launcher.py's "Execution context was destroyed").
A change the user makes to the table (a filter) still goes into the address, so the view can be
shared. The run never trains (its owner's quota admits none); its samples are stored rows."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

# A sample event as the websocket brings it, through the page's own handler, at the next seq.
PUSH_SAMPLE = """(s) => window.rlstudioLive.apply({seq: window.rlstudioLive.lastSeq() + 1, type: "sample",
    time: Date.now() / 1000, data: s})"""


def test_a_pushed_sample_refetches_the_table_without_navigating(page_as, make_user):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import Sample

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="stays-put", dataset=dataset, model=model, config={}, gpus=0)

    def stored(seq: int) -> Sample:
        return Sample.objects.create(run=run, seq=seq, step=1, uid="u1", index=seq - 1, reward=1.0,
                                     response_length=10 + seq, finish_reason="stop",
                                     transcript=[{"role": "user", "content": f"q{seq}"}])

    for seq in (1, 2, 3):
        stored(seq)
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    expect(page.locator("#samples-body tr")).to_have_count(3)
    address = page.url
    navigations: list[str] = []  # the main frame's, same-document ones included (as Playwright counts)
    page.on("framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None)

    # A fourth sample is stored and pushed: the page shows it at once and refetches the table 1.5 s later.
    new = stored(4)
    with page.expect_response(lambda r: f"/api/v1/runs/{run.pk}/samples/" in r.url) as refetch:
        page.evaluate(PUSH_SAMPLE, {"id": new.pk, "step": 1, "uid": "u1", "index": 3, "reward": 1.0,
                                    "advantage": 0.0, "response_length": 14, "num_turns": 1,
                                    "finish_reason": "stop", "has_tool_call": False})
    assert refetch.value.ok
    # The counter is written in the same task as the address was: once it reads 4, the page is done.
    expect(page.locator("#samples-count")).to_have_text("1–4 of 4")
    page.wait_for_timeout(500)  # and a little longer, for an address written after it
    assert navigations == [], f"the page navigated by itself on a table refetch: {navigations}"
    assert page.url == address

    # The user's own change to the view goes into the address (one same-document navigation).
    page.select_option("#sample-filters select[name=finish_reason]", "stop")
    page.click("#sample-filters button[type=submit]")
    page.wait_for_function("new URLSearchParams(location.search).get('finish_reason') === 'stop'")
    assert page.url.startswith(address) and len(navigations) == 1, navigations
    expect(page.locator("#samples-count")).to_have_text("1–4 of 4")
