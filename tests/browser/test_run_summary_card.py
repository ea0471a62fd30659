"""The run page's Summary card in a real Chromium: the page arrives with the card's placeholder, the card's
figures (first / best / last of each held-out metric, the training reward's first and last) replace it
without a reload, and while the run is live a newly stored validation row shows up on the open page."""
from __future__ import annotations

from datetime import timedelta

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

VAL = "val-core/arith/reward/mean@1"


def test_the_summary_card_loads_after_the_page_and_follows_a_live_run(page_as, make_user, shot):
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import MetricRow

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64,
                                     status="ready")
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="summary-run", dataset=dataset, model=model, config={}, gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, step=10, total_steps=20)  # live
    t0 = timezone.now() - timedelta(minutes=5)
    MetricRow.objects.bulk_create([
        MetricRow(run=run, step=0, time=t0, metrics={VAL: 0.25, "critic/score/mean": 0.125}),
        MetricRow(run=run, step=5, time=t0 + timedelta(seconds=5), metrics={VAL: 0.75, "critic/score/mean": 0.5}),
        MetricRow(run=run, step=10, time=t0 + timedelta(seconds=10), metrics={VAL: 0.5}),
    ])

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    row = f"#summary-card tr[data-metric='{VAL}']"
    page.wait_for_selector(row, timeout=15_000)
    page.evaluate("window.__noReload = 1")  # gone if the page reloads
    assert page.inner_text(f"{row} [data-stat='first']") == "0.2500 (0)"
    assert page.inner_text(f"{row} [data-stat='best']") == "0.7500 (5)"
    assert page.inner_text(f"{row} [data-stat='last']") == "0.5000 (10)"
    assert page.inner_text("#summary-card [data-stat='train-last']") == "0.5000 (5)"

    # A later validation beats the best: the open page shows it within the live refresh (every 10 s).
    MetricRow.objects.create(run=run, step=15, time=t0 + timedelta(seconds=15), metrics={VAL: 0.875})
    page.wait_for_function(
        f"(document.querySelector(\"{row} [data-stat='best']\") || {{}}).textContent === '0.8750 (15)'",
        timeout=25_000)
    assert page.inner_text(f"{row} [data-stat='last']") == "0.8750 (15)"
    assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    assert page.locator("#summary-card").count() == 1
    page.locator("#summary-card").scroll_into_view_if_needed()
    shot(page, "run-summary-card")


def test_a_card_that_cannot_be_fetched_says_so_instead_of_loading_for_good(page_as, make_user):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64,
                                     status="ready")
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="ended", dataset=dataset, model=model, config={}, gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=3, total_steps=3)  # not live

    page = page_as(alice)
    page.route("**/summary/card/", lambda route: route.fulfill(status=503, body="down"))
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_function("document.querySelector('#summary-card p').textContent.includes('could not be loaded')",
                           timeout=15_000)
    assert page.inner_text("#summary-card p") == ("The summary could not be loaded (HTTP 503); reload the page "
                                                  "to try again.")
