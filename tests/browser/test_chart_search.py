"""The run page's "find" box over its metric panels (W&B's panel search): typing words keeps the panels
whose metric names hold them all, hides groups left empty, counts what is shown, and applies to panels
run_live.js adds later for newly reported metrics; clearing it shows every panel again, drawn full width."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

STEP_METRICS = {"critic/score/mean": 0.5, "critic/score/max": 1.0, "critic/score/min": 0.0,
                "actor/kl_loss": 0.01, "actor/entropy": 0.7, "actor/pg_loss": -0.1, "timing_s/step": 1.5}


def test_find_narrows_the_panels_and_follows_new_ones(page_as, make_user, shot):
    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import MetricRow

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="charts", dataset=dataset, model=model, config={}, gpus=0)
    for step in (1, 2, 3):
        MetricRow.objects.create(run=run, step=step, time=timezone.now(), metrics=STEP_METRICS)

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    panels = page.locator("#charts .chart")
    expect(panels).to_have_count(5)  # critic/score (mean/max/min in one), kl_loss, entropy, pg_loss, timing
    visible = page.locator("#charts .chart:visible")

    page.fill("#chart-search", "kl")
    expect(visible).to_have_count(1)
    expect(visible.first.locator("h4")).to_have_text("actor/kl_loss")
    expect(page.locator("#chart-search-count")).to_have_text("1 of 5 panels")
    expect(page.locator("#charts .chart-group:visible")).to_have_count(1)  # Rewards and Timing hidden

    page.fill("#chart-search", "ACTOR loss")  # every word, any case, any order
    expect(visible).to_have_count(2)

    # A metric reported later: its new panel follows the search typed.
    page.fill("#chart-search", "kl")
    page.evaluate("""() => window.rlstudioLive.apply({seq: window.rlstudioLive.lastSeq() + 1, type: "metrics",
        time: Date.now() / 1000, data: {step: 4, metrics: {"actor/kl_coef": 0.001, "actor/grad_norm": 0.2}}})""")
    expect(panels).to_have_count(7)
    expect(visible).to_have_count(2)
    expect(page.locator("#chart-search-count")).to_have_text("2 of 7 panels")
    shot(page, "run-chart-search")

    page.fill("#chart-search", "")
    expect(visible).to_have_count(7)
    expect(page.locator("#chart-search-count")).to_have_text("")
    # Panels hidden while drawn are drawn at their grid cell's width once shown.
    widths = page.evaluate("""() => [...document.querySelectorAll('#charts .chart')].map((c) =>
        [c.clientWidth, c.querySelector('.plot .main-svg') ? c.querySelector('.plot .main-svg').getBoundingClientRect().width : 0])""")
    assert all(svg >= cell * 0.85 for cell, svg in widths), widths
