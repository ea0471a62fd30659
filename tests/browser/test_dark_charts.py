"""The charts follow the dark theme (static/js/chart_theme.js): in a browser that asks for dark, the
dataset page's histogram is not a white plot, and the run page's metric charts and the staff quota
page's usage chart draw dim grid lines, not plotly's light grey ones that glare over a dark page.
The light theme keeps light grid lines."""
from __future__ import annotations

import pytest
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True)]

# The plot area's background (plotly draws a transparent one with fill-opacity 0) and every grid
# line's colour, as the browser drew them.
DRAWN = """(sel) => {
  const plot = document.querySelector(sel);
  const bg = plot.querySelector('.bg');
  const grid = [...plot.querySelectorAll('.gridlayer path')].map((p) => getComputedStyle(p).stroke);
  return {bg: bg ? getComputedStyle(bg).fill : null, bgOpacity: bg ? Number(getComputedStyle(bg).fillOpacity) : null, grid};
}"""


def _brightness(css: str) -> float:
    """0-255 mean of an rgb()/rgba() colour's channels."""
    channels = css[css.index("(") + 1:css.index(")")].split(",")[:3]
    return sum(float(c) for c in channels) / 3


@pytest.fixture
def charted(make_user):
    """(user, dataset with prompt statistics, run with a few steps of metrics)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import MetricRow

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    stats = {"model": {"name": "m"}, "prompt_tokens": {
        "count": 6, "min": 10, "mean": 20, "p50": 20, "p95": 30, "max": 30, "max_prompt_length": 1024,
        "over_max_prompt_length": 0, "histogram": {"edges": [10, 20, 30], "counts": [2, 4]}}}
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64,
                                     status="ready", stats=stats)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="charted-run", dataset=dataset, model=model, config={}, gpus=0)
    for step, score in ((1, 0.2), (2, 0.5), (3, 0.4)):
        MetricRow.objects.create(run=run, step=step, time=timezone.now(),
                                 metrics={"critic/score/mean": score, "actor/entropy": 1.0 / step})
    return alice, dataset, run


def test_charts_are_drawn_for_the_dark_theme(page_as, make_user, charted, shot):
    alice, dataset, run = charted
    page = page_as(alice)
    page.emulate_media(color_scheme="dark")
    page.goto(f"/datasets/{dataset.pk}/")
    page.wait_for_selector("#length-histogram .gridlayer path", state="attached")
    drawn = page.evaluate(DRAWN, "#length-histogram")
    assert drawn["bgOpacity"] == 0, drawn  # not white: the page's dark card shows through
    assert drawn["grid"] and all(_brightness(c) < 100 for c in drawn["grid"]), drawn

    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector(".js-plotly-plot .gridlayer path", state="attached")
    drawn = page.evaluate(DRAWN, ".js-plotly-plot")
    assert drawn["grid"] and all(_brightness(c) < 100 for c in drawn["grid"]), drawn
    shot(page, "dark-run-charts")

    # The staff quota page's usage chart (three x axes: the template's axis colours reach each).
    staff = page_as(make_user("root", staff=True))
    staff.emulate_media(color_scheme="dark")
    staff.goto("/quotas/admin/")
    staff.wait_for_selector("#usage-chart .gridlayer path", state="attached")
    drawn = staff.evaluate(DRAWN, "#usage-chart")
    assert drawn["grid"] and all(_brightness(c) < 100 for c in drawn["grid"]), drawn

    page.emulate_media(color_scheme="light")
    page.goto(f"/datasets/{dataset.pk}/")
    page.wait_for_selector("#length-histogram .gridlayer path", state="attached")
    drawn = page.evaluate(DRAWN, "#length-histogram")
    assert all(_brightness(c) > 200 for c in drawn["grid"]), drawn
