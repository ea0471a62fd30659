"""The sweep page's charts in Chromium: one per axis, every run with a value as a point at its axis
value and metric (log scale for a learning rate spanning 100x), the best one a star, a hostile run
name inert; while a run is live the table and charts follow it (and once the last run ends the page
reloads once, offering Delete sweep); a click on a point opens that run."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

LR, N = "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.n"


def test_the_metric_against_each_axis_and_a_click_opens_the_run(page_as, make_user):
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create
    from rlstudio.sweeps.models import Sweep, SweepRun
    from rlstudio.telemetry.models import MetricRow

    alice = make_user("alice")
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    axes = [{"key": LR, "values": [1e-6, 1e-4]}, {"key": N, "values": [2, 4]}]
    sweep = Sweep.objects.create(owner=alice, name="grid", dataset=dataset, model=model, axes=axes)
    points = [(1e-6, 2, 0.2), (1e-6, 4, 0.4), (1e-4, 2, 0.9), (1e-4, 4, None)]
    ids = []
    for i, (lr, n, reward) in enumerate(points):
        name = f'<img src=x onerror=alert(1)>{i}'
        run = run_create(owner=alice, name=name, dataset=dataset, model=model, config={}, gpus=0)[0]
        Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED if reward is not None else RunStatus.RUNNING)
        SweepRun.objects.create(sweep=sweep, run=run, index=i, params={LR: lr, N: n})
        if reward is not None:
            MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": reward})
        ids.append(run.pk)

    page = page_as(alice)
    page.goto(f"/sweeps/{sweep.pk}/?metric=reward")
    page.wait_for_function(f"() => window.rlstudioSweepChart && window.rlstudioSweepChart.points({LR!r}) !== null")
    lr = page.evaluate(f"() => window.rlstudioSweepChart.points({LR!r})")
    n = page.evaluate(f"() => window.rlstudioSweepChart.points({N!r})")
    assert lr == {"x": [1e-6, 1e-6, 1e-4], "y": [0.2, 0.4, 0.9], "type": "log"}
    assert n == {"x": [2, 4, 2], "y": [0.2, 0.4, 0.9], "type": "linear"}
    assert "1 run(s) have no value yet" in page.locator("#sweep-charts-note").inner_text()
    symbols = page.evaluate(f"() => document.querySelector('.plot[data-axis=\"{N}\"]').data[0].marker.symbol")
    assert symbols == ["circle", "circle", "star"]
    assert page.dialogs == [] and page.locator("#sweep-charts img").count() == 0

    assert page.locator("#sweep-live").get_attribute("data-live") == "1"

    # the live run reports and ends: the table and the charts follow (the poller's next fetch, asked now)
    MetricRow.objects.create(run_id=ids[3], step=1, time=timezone.now(), metrics={"critic/score/mean": 0.95})
    Run.objects.filter(pk=ids[3]).update(status=RunStatus.SUCCEEDED)
    with page.expect_navigation():  # the last run ended: the page reloads once, its head now offers Delete
        page.evaluate("() => window.rlstudioSweepChart.refresh()")
    page.wait_for_function(f"() => window.rlstudioSweepChart && window.rlstudioSweepChart.points({N!r}).y.length === 4")
    assert page.locator("#sweep-delete").is_visible() and page.locator("#sweep-stop").count() == 0
    assert page.evaluate(f"() => window.rlstudioSweepChart.points({N!r})")["y"] == [0.2, 0.4, 0.9, 0.95]
    assert page.locator("#sweep-best").get_attribute("data-run-id") == str(ids[3])
    assert page.locator("#sweep-live").get_attribute("data-live") == ""  # all ended: polling stops
    assert "no value yet" not in page.locator("#sweep-charts-note").inner_text()

    star = page.locator(f'.plot[data-axis="{N}"] .scatterlayer .point').nth(3)
    box = star.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(f"**/runs/{ids[3]}/")
