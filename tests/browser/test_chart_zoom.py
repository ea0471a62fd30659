"""A long run's charts (telemetry/overview.py, static/js/run_live.js): the page draws 1,250 steps as
625 buckets of 2 (the smallest power of two that needs at most 1,000) and says so; zooming a chart fetches the range's every step and every chart draws them
there, keeping the zoom across redraws; a new step is drawn after the buckets, an old step's metrics
make its bucket fetched again (drawn row for row); autoscale takes every chart back to the whole run."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

STEPS = 1250


def _alice(make_user, *, queued: bool = False):
    """alice (with `queued`, a quota of nothing, so her runs stay queued) and run(name) -> a new run of
    hers on one dataset and one model record (nothing is read from them)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    if queued:
        GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    return alice, lambda name: run_create(owner=alice, name=name, dataset=dataset, model=model, config={}, gpus=0)[0]


def _trace(page, family: str, name: str) -> dict:
    return page.evaluate("""([family, name]) => {
        const t = document.querySelector(`.plot[data-family="${family}"]`).data.find((d) => d.name === name);
        return {x: t.x, y: t.y, hovertext: t.hovertext || null};
    }""", [family, name])


def test_long_run_charts_zoom_to_every_step(page_as, make_user, shot):
    from datetime import timedelta

    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user, queued=True)
    run = new_run("long")
    t0 = timezone.now() - timedelta(hours=2)
    MetricRow.objects.bulk_create([
        MetricRow(run=run, step=s, time=t0 + timedelta(seconds=s),
                  metrics={"critic/score/mean": s / STEPS, "critic/score/min": -s, "critic/score/max": s,
                           "actor/entropy": 1.0 + (s % 2)})
        for s in range(STEPS)])

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#charts-downsampled")).to_contain_text("1,250 steps drawn as 625 points")
    expect(page.locator("#charts .chart")).to_have_count(2)
    assert page.evaluate("() => window.rlstudioLive.chartSteps().length") == 625
    mean = _trace(page, "critic/score", "mean")
    assert len(mean["x"]) == 625 and mean["x"][-1] == STEPS - 1
    # buckets of 2 rows: bucket 0 holds steps 0 and 1
    assert mean["hovertext"][0] == "steps 0–1 (2)" and mean["y"][0] == pytest.approx(0.5 / STEPS)
    assert _trace(page, "critic/score", "min–max")["y"][0] == -1  # the lowest of the bucket's mins
    assert _trace(page, "critic/score", "max")["y"][0] == 1  # the highest of its maxes
    assert _trace(page, "actor/entropy", "entropy")["y"][0] == pytest.approx(1.5)  # 1.0 and 2.0
    page.locator("#charts-card").scroll_into_view_if_needed()
    shot(page, "run-charts-downsampled")

    # Zoom the entropy chart on steps 100-300: every chart draws each step there, from the API.
    page.evaluate("""() => Plotly.relayout(document.querySelector('.plot[data-family="actor/entropy"]'),
        {"xaxis.range": [100, 300]})""")
    page.wait_for_function("() => window.rlstudioLive.zoomed() !== null")
    zoomed = page.evaluate("() => window.rlstudioLive.zoomed()")
    assert zoomed["downsampled"] is False and zoomed["lo"] <= 100 and zoomed["hi"] >= 300
    assert zoomed["points"] == zoomed["hi"] - zoomed["lo"] + 1
    expect(page.locator("#charts-zoom")).to_contain_text("every step")
    page.wait_for_function("""() => {
        const t = document.querySelector('.plot[data-family="critic/score"]').data.find((d) => d.name === "mean");
        return t.x.filter((x) => x >= 100 && x <= 300).length === 201; }""")
    entropy = _trace(page, "actor/entropy", "entropy")
    inside = [(x, y) for x, y in zip(entropy["x"], entropy["y"], strict=True) if 100 <= x <= 300]
    assert inside == [(s, 1.0 + (s % 2)) for s in range(100, 301)]  # each step's own value
    shot(page, "run-charts-zoomed")

    # A new step is drawn after the buckets (the redraw keeps the zoom); metrics of step 10, inside the
    # bucket of steps 10-11, make that bucket fetched again: its two rows as stored replace it.
    page.evaluate(f"""() => {{
        const live = window.rlstudioLive;
        live.apply({{seq: live.lastSeq() + 1, type: "metrics", time: Date.now() / 1000,
                     data: {{step: 10, metrics: {{"actor/entropy": 9.0}}}}}});
        live.apply({{seq: live.lastSeq() + 1, type: "metrics", time: Date.now() / 1000,
                     data: {{step: {STEPS}, metrics: {{"actor/entropy": 3.0}}}}}});
    }}""")
    page.wait_for_function(f"() => window.rlstudioLive.metricSteps().includes({STEPS})")
    page.wait_for_function("() => window.rlstudioLive.metricSteps().includes(10)")
    assert page.evaluate("() => window.rlstudioLive.metricSteps().length") == 627
    page.wait_for_function(f"""() => document.querySelector('.plot[data-family="actor/entropy"]').data[0].x
        .includes({STEPS})""")
    entropy = _trace(page, "actor/entropy", "entropy")
    assert 9.0 not in entropy["y"] and entropy["y"][-1] == 3.0
    x_range = page.evaluate("""() => document.querySelector('.plot[data-family="actor/entropy"]')._fullLayout.xaxis.range""")
    assert x_range == [100, 300]  # still zoomed after the redraw

    entropy = _trace(page, "actor/entropy", "entropy")
    assert [y for x, y in zip(entropy["x"], entropy["y"], strict=True) if x in (10, 11)] == [1.0, 2.0]

    # Autoscale (double-click) on one chart: every chart back to the whole run's buckets.
    page.evaluate("""() => Plotly.relayout(document.querySelector('.plot[data-family="critic/score"]'),
        {"xaxis.range": [500, 600]})""")
    page.wait_for_function("() => window.rlstudioLive.zoomed() && window.rlstudioLive.zoomed().lo <= 500")
    page.evaluate("""() => Plotly.relayout(document.querySelector('.plot[data-family="actor/entropy"]'),
        {"xaxis.autorange": true})""")
    page.wait_for_function("() => window.rlstudioLive.zoomed() === null")
    expect(page.locator("#charts-zoom")).to_have_text("Zoom in on a chart to see every step.")
    page.wait_for_function("() => window.rlstudioLive.chartSteps().length === 627")
    page.wait_for_function("""() => document.querySelector('.plot[data-family="critic/score"]')._fullLayout.xaxis.autorange""")


def test_smoothing_draws_the_moving_average_over_the_raw_values_and_is_kept(page_as, make_user):
    """The run page's smoothing slider: each line becomes its debiased moving average (the compare
    page's, static/js/smoothing.js) with the values as reported faint behind it; the setting is kept
    for the next run page in this browser; 0 draws the values alone again."""
    from datetime import timedelta

    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user, queued=True)
    run = new_run("noisy")
    values = [0.0, 1.0, 0.0, 1.0, 0.5, 1.0]
    t0 = timezone.now() - timedelta(hours=1)
    MetricRow.objects.bulk_create([MetricRow(run=run, step=s, time=t0 + timedelta(seconds=s),
                                             metrics={"actor/entropy": v, "actor/pg_loss": -v})
                                   for s, v in enumerate(values)])
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#charts .chart")).to_have_count(2)
    page.fill("#smoothing", "0.5")
    expect(page.locator("#smoothing-value")).to_have_text("0.50")
    page.wait_for_function("""() => document.querySelector('.plot[data-family="actor/entropy"]').data.length === 2""")
    raw, smoothed = page.evaluate("""() => document.querySelector('.plot[data-family="actor/entropy"]').data
        .map((t) => ({meta: t.meta, y: t.y, opacity: t.opacity === undefined ? 1 : t.opacity}))""")
    assert (raw["meta"], raw["opacity"], raw["y"]) == ("actor/entropy (raw)", 0.25, values)
    acc, expected = 0.0, []
    for k, v in enumerate(values, start=1):
        acc = 0.5 * acc + 0.5 * v
        expected.append(acc / (1 - 0.5 ** k))
    assert smoothed["meta"] == "actor/entropy" and smoothed["y"] == pytest.approx(expected)

    page.goto(f"/runs/{run.pk}/")  # kept for the next page
    expect(page.locator("#smoothing-value")).to_have_text("0.50")
    page.wait_for_function("""() => document.querySelector('.plot[data-family="actor/pg_loss"]').data.length === 2""")
    page.fill("#smoothing", "0")
    page.wait_for_function("""() => document.querySelector('.plot[data-family="actor/pg_loss"]').data.length === 1""")
    assert page.evaluate("""() => document.querySelector('.plot[data-family="actor/pg_loss"]').data[0].y""") == [-v for v in values]


def test_the_charts_view_is_in_the_address(page_as, make_user):
    """?chart_x=, ?chart_smoothing= and ?chart_find= open the run page's charts as they were seen; changing
    them writes the address, keeping the samples table's filters there (and the table keeps the charts')."""
    from urllib.parse import parse_qs, urlparse

    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user, queued=True)
    run = new_run("shared view")
    for step in range(4):
        MetricRow.objects.create(run=run, step=step, time=timezone.now(),
                                 metrics={"actor/entropy": 1.0 + step, "actor/pg_loss": -step})
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/?chart_x=time&chart_smoothing=0.30&chart_find=entropy&finish_reason=length&uid=g-0")
    expect(page.locator("#x-axis")).to_have_value("time")
    expect(page.locator("#smoothing-value")).to_have_text("0.30")
    expect(page.locator("#chart-search")).to_have_value("entropy")
    expect(page.locator("#charts .chart:visible")).to_have_count(1)
    page.wait_for_function("""() => { const d = document.querySelector('.plot[data-family="actor/entropy"]');
        return d && d.data && d.data.length === 2 && d._fullLayout.xaxis.type === "date"; }""")

    def query():
        return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}

    page.select_option("#x-axis", "step")
    page.fill("#smoothing", "0")
    page.fill("#chart-search", "loss")
    page.wait_for_function("() => new URLSearchParams(location.search).get('chart_find') === 'loss'")
    assert query() == {"chart_find": "loss", "finish_reason": "length", "uid": "g-0"}
    page.select_option("#sample-filters select[name=finish_reason]", "stop")
    page.locator("#sample-filters").evaluate("(form) => form.requestSubmit()")
    page.wait_for_function("() => new URLSearchParams(location.search).get('finish_reason') === 'stop'")
    # the charts' key kept; the group the first page was narrowed to (not a field of the form) let go,
    # as the table the form now shows is not narrowed to it
    assert query() == {"chart_find": "loss", "finish_reason": "stop", "order": "-step"}


def test_compare_panels_zoom_to_every_step(page_as, make_user):
    """The compare page of two 1,250-step runs draws 1,000 points a run; zooming a panel fetches that
    step range's series (every step there) and autoscale goes back to the whole runs'."""
    from datetime import timedelta

    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.runs.models import Run
    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user)
    t0 = timezone.now() - timedelta(hours=2)
    ids = []
    for i in range(2):
        run = new_run(f"long-{i}")
        Run.objects.filter(pk=run.pk).update(status="succeeded", step=STEPS, total_steps=STEPS, started=t0,
                                             finished=t0 + timedelta(seconds=STEPS))
        MetricRow.objects.bulk_create([MetricRow(run=run, step=s, time=t0 + timedelta(seconds=s),
                                                 metrics={"critic/score/mean": i + (s % 2)}) for s in range(STEPS)])
        ids.append(run.pk)
    page = page_as(alice)
    page.goto(f"/runs/compare/?ids={ids[0]},{ids[1]}")
    panel = '.plot[data-metric="critic/score/mean"]'
    page.wait_for_function(f"""() => {{ const d = document.querySelector('{panel}'); return d && d.data && d.data.length === 2; }}""")
    assert page.evaluate(f"() => document.querySelector('{panel}').data.map((t) => t.x.length)") == [1000, 1000]
    expect(page.locator(".compare-panel .panel-note").first).to_contain_text("zoom in for every step")

    page.evaluate(f"() => Plotly.relayout(document.querySelector('{panel}'), {{'xaxis.range': [200, 260]}})")
    page.wait_for_function("() => window.rlstudioCompare.zoomed('critic/score/mean') !== null")
    page.wait_for_function(f"() => document.querySelector('{panel}').data[0].x.length < 100")
    xs, ys = page.evaluate(f"() => [document.querySelector('{panel}').data[1].x, document.querySelector('{panel}').data[1].y]")
    assert xs == list(range(200, 261)) and ys == [1 + (s % 2) for s in xs]  # run 2's every step there
    expect(page.locator(".compare-panel .panel-note").first).to_contain_text("every step")
    assert page.evaluate(f"() => document.querySelector('{panel}')._fullLayout.xaxis.range") == [200, 260]

    page.evaluate(f"() => Plotly.relayout(document.querySelector('{panel}'), {{'xaxis.autorange': true}})")
    page.wait_for_function("() => window.rlstudioCompare.zoomed('critic/score/mean') === null")
    page.wait_for_function(f"() => document.querySelector('{panel}').data[0].x.length === 1000")


def test_the_compare_view_is_in_the_address(page_as, make_user):
    """?metrics=, ?x= and ?smoothing= open the compare page as it was seen; adding or removing a chart,
    the x axis and smoothing write the address (metrics= once per chart, so a name with a comma comes
    back whole)."""
    from urllib.parse import parse_qs, urlparse

    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user)
    ids = []
    for i in range(2):
        run = new_run(f"r{i}")
        MetricRow.objects.bulk_create([MetricRow(run=run, step=s, time=timezone.now(), metrics={
            "critic/score/mean": s / 10, "actor/entropy": 2 - s / 10, "reward/a,b": -s}) for s in range(5)])
        ids.append(run.pk)
    page = page_as(alice)
    page.goto(f"/runs/compare/?ids={ids[0]},{ids[1]}&metrics=actor/entropy&x=time&smoothing=0.40")
    page.wait_for_function("() => window.rlstudioCompare && window.rlstudioCompare.panels().length === 1")
    assert page.evaluate("() => window.rlstudioCompare.panels()") == ["actor/entropy"]
    expect(page.locator("#x-axis")).to_have_value("time")
    expect(page.locator("#smoothing-value")).to_have_text("0.40")

    def query():
        return {k: v if k == "metrics" else v[0] for k, v in parse_qs(urlparse(page.url).query).items()}

    page.select_option("#metric-add", "reward/a,b")
    page.wait_for_function("() => window.rlstudioCompare.panels().length === 2")
    assert query()["metrics"] == ["actor/entropy", "reward/a,b"]
    page.reload()
    page.wait_for_function("() => window.rlstudioCompare && window.rlstudioCompare.panels().length === 2")
    assert page.evaluate("() => window.rlstudioCompare.panels()") == ["actor/entropy", "reward/a,b"]
    page.locator(".compare-panel").first.locator("button[title=\"remove this chart\"]").click()
    page.select_option("#x-axis", "step")
    page.fill("#smoothing", "0")
    page.wait_for_function("() => !new URLSearchParams(location.search).has('smoothing')")
    assert query() == {"ids": f"{ids[0]},{ids[1]}", "metrics": ["reward/a,b"]}


def test_the_compare_page_takes_at_most_twenty_charts(page_as, make_user):
    """Twenty charts shown (as ?metrics= opened them), a twenty-first from the picker is refused with a
    note, so the address never names more than the page takes."""
    from django.utils import timezone
    from playwright.sync_api import expect

    from rlstudio.telemetry.models import MetricRow

    alice, new_run = _alice(make_user)
    run = new_run("many")
    names = [f"m/{i:02d}" for i in range(21)]
    MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={n: 1.0 for n in names})
    page = page_as(alice)
    page.goto(f"/runs/compare/?ids={run.pk}&metrics={','.join(names[:20])}")
    page.wait_for_function("() => window.rlstudioCompare && window.rlstudioCompare.panels().length === 20")
    page.select_option("#metric-add", names[20])
    expect(page.locator("#charts-empty")).to_have_text("At most 20 charts at once: remove one first.")
    assert page.evaluate("() => window.rlstudioCompare.panels().length") == 20
    assert names[20] not in page.url
