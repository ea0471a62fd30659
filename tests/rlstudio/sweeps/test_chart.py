"""The sweep page's charts as data (sweeps/chart.py): each axis's scale, every run's axis values and
the metric the best run is chosen by, embedded in the page for static/js/sweep_chart.js."""
import json
from types import SimpleNamespace

import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.sweeps.chart import axis_scale, sweep_chart
from rlstudio.sweeps.services import sweep_launch
from rlstudio.telemetry.models import MetricRow
from tests.rlstudio.sweeps.conftest import LR, N


@pytest.mark.parametrize("axis,values,scale", [
    ({"key": LR}, [1e-6, 3e-6, 1e-4], "log"),  # positive, spanning 100x
    ({"key": LR}, [1e-6, 3e-6], "linear"),
    ({"key": LR, "scale": "log"}, [1e-6, 2e-6], "log"),  # a random axis drawn on a log scale
    ({"key": N}, [2, 4, 8], "linear"),
    ({"key": N}, [0, 400], "linear"),  # not all positive
    ({"key": "x"}, ["a", 1.0], "category"),
    ({"key": "x"}, [True, False], "category"),
    ({"key": "x"}, [1.0, None], "category"),
    ({"key": "x"}, [], "category"),
])
def test_each_axis_is_drawn_on_its_scale(axis, values, scale):
    assert axis_scale(axis, values) == scale


def test_the_chart_data_is_every_run_with_its_values_and_the_best():
    def row(pk, params, value, best=False):
        run = SimpleNamespace(pk=pk, name=f"r{pk}", status="succeeded")
        return {"row": SimpleNamespace(run=run, params=params, best=best), "metric_value": value}

    data = sweep_chart(axes=[{"key": N, "values": [2, 4]}], metric_label="latest reward",
                       rows=[row(1, {N: 2}, 0.5), row(2, {N: 4}, None), row(3, {N: 4}, 0.7, best=True)])
    assert data["axes"] == [{"key": N, "scale": "linear"}] and data["metric_label"] == "latest reward"
    assert [(r["id"], r["params"], r["value"], r["best"]) for r in data["runs"]] == [
        (1, {N: 2}, 0.5, False), (2, {N: 4}, None, False), (3, {N: 4}, 0.7, True)]


@pytest.mark.django_db
def test_the_page_embeds_the_chart_data_with_the_chosen_metric(alice, inputs):
    sweep = sweep_launch(owner=alice, name="<b>grid", inputs=inputs,
                         axes=[{"key": N, "values": [2, 4]}, {"key": LR, "values": [1e-6, 1e-4]}])
    runs = [link.run for link in sweep.sweep_runs.select_related("run").order_by("index")]
    for i, run in enumerate(runs):
        MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": i / 10})
    client = Client()
    client.force_login(alice)
    html = client.get(f"/sweeps/{sweep.pk}/?metric=reward").content.decode()
    data = json.loads(html.split('id="sweep-chart-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert [a["key"] for a in data["axes"]] == [N, LR] and [a["scale"] for a in data["axes"]] == ["linear", "log"]
    assert [r["value"] for r in data["runs"]] == [0.0, 0.1, 0.2, 0.3] and [r["best"] for r in data["runs"]][-1]
    assert "js/sweep_chart.js" in html and 'id="sweep-charts"' in html
