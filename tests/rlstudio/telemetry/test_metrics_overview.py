"""A run's metric rows at most max_points at a time (telemetry/overview.py): the buckets by hand, the
API's buckets against the rows it stands for (read through the metrics API), its bounds and errors, the
cache following new rows, and the run page holding the overview instead of the first page of rows."""
import json
import random
import re

import pytest
from django.test import Client

from rlstudio.telemetry import overview as ov

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _rows(n, *, seed=0):
    """n steps with gaps; a mean/min/max family, a sparse held-out key, a null, a mismatch statistic."""
    rnd = random.Random(seed)
    out, step = [], 0
    for i in range(n):
        step += rnd.choice([1, 1, 2, 5])
        m = {"critic/score/mean": rnd.random(), "critic/score/min": -rnd.random(), "critic/score/max": 1 + rnd.random(),
             "rollout_corr/rollout_is_max": rnd.random() * 3, "actor/lr": 3e-4}
        if i % 7 == 0:
            m["val-core/arith/reward/mean@1"] = rnd.random()
        if i % 11 == 0:
            m["actor/grad_norm"] = None
        out.append((step, m))
    return out


def test_statistic_of_verl_names():
    assert ov.statistic("critic/score/min") == "min" and ov.statistic("response_length/max") == "max"
    assert ov.statistic("rollout_corr/rollout_is_min") == "min" and ov.statistic("training/rollout_probs_diff_max") == "max"
    assert ov.statistic("critic/score/mean") == "mean" and ov.statistic("perf/max_memory_allocated_gb") == "mean"
    assert ov.statistic("actor/pg_clipfrac_min") == "mean"  # an underscore statistic only in the mismatch metrics


def test_width_is_the_smallest_power_of_two_that_fits():
    assert [ov.width(0, n, 10) for n in (10, 11, 20, 21, 40, 41)] == [1, 2, 2, 4, 4, 8]
    # a range's first and last buckets hold only its rows, and count: rows 3..22 at width 2 touch 11 buckets
    assert ov.width(3, 23, 10) == 4 and ov.width(3, 23, 11) == 2


def test_bucket_rows_by_hand():
    rows = [{"step": s, "time": f"t{s}", "t": float(s), "metrics": {"a/min": s, "a/max": s, "a/mean": s, "b": None}}
            for s in range(10)]
    rows[4]["metrics"]["late"] = 2.0  # a key only some rows carry
    got = ov.bucket_rows(((i + 1, r) for i, r in enumerate(rows)), 4)  # the run's rows 1..10 at width 4
    assert [(r["from_step"], r["step"], r["rows"]) for r in got] == [(0, 2, 3), (3, 6, 4), (7, 9, 3)]
    assert got[0]["metrics"] == {"a/max": 2, "a/mean": 1.0, "a/min": 0, "b": None}
    assert got[1]["metrics"] == {"a/max": 6, "a/mean": 4.5, "a/min": 3, "b": None, "late": 2.0}
    assert got[2]["t"] == 9.0 and got[2]["time"] == "t9"
    third = [(0, {"step": 0, "time": "t", "t": 0.0, "metrics": {"x": 1 / 3}}),
             (1, {"step": 1, "time": "t", "t": 1.0, "metrics": {"x": 0}})]
    assert ov.bucket_rows(third, 2)[0]["metrics"]["x"] == 0.1666667  # a mean to 7 significant digits


def _expected(rows, w, *, first=0):
    """The buckets of `rows` (the run's rows first.. in step order) at width w, computed here
    independently: each run of rows and each key's statistic."""
    out = []
    for b in sorted({(first + i) // w for i in range(len(rows))}):
        chunk = [r for i, r in enumerate(rows) if (first + i) // w == b]
        keys = sorted({k for r in chunk for k in r["metrics"]})
        metrics = {}
        for k in keys:
            vs = [r["metrics"][k] for r in chunk if r["metrics"].get(k) is not None]
            stat = ov.statistic(k)
            metrics[k] = (None if not vs else min(vs) if stat == "min" else max(vs) if stat == "max"
                          else sum(vs) / len(vs))
        out.append({"step": chunk[-1]["step"], "from_step": chunk[0]["step"], "rows": len(chunk),
                    "time": chunk[-1]["time"], "metrics": metrics})
    return out


def _same(got_rows, want_rows):
    assert len(got_rows) == len(want_rows)
    for got, exp in zip(got_rows, want_rows, strict=True):
        assert {k: got[k] for k in ("step", "from_step", "rows", "time")} == {k: exp[k] for k in ("step", "from_step", "rows", "time")}
        assert list(got["metrics"]) == list(exp["metrics"])  # the same keys, sorted
        for key, value in exp["metrics"].items():
            assert got["metrics"][key] == (None if value is None else pytest.approx(value, rel=1e-6)), key


@pytest.mark.parametrize("n,max_points,w", [(300, 40, 8), (97, 10, 16), (41, 40, 2)])
def test_buckets_stand_for_their_rows(alice, alice_client, run_with_metrics, n, max_points, w):
    data = _rows(n, seed=n)
    run = run_with_metrics(alice, data, name="long")
    exact = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/?limit=5000").json()["steps"]
    body = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/overview/?max_points={max_points}").json()
    assert body["points"] == n and body["downsampled"] is True and len(body["steps"]) == -(-n // w) <= max_points
    _same(body["steps"], _expected(exact, w))
    # the band still spans every step's: the lowest min and the highest max of the whole run survive
    assert min(r["metrics"]["critic/score/min"] for r in body["steps"]) == min(m["critic/score/min"] for _, m in data)
    assert max(r["metrics"]["critic/score/max"] for r in body["steps"]) == max(m["critic/score/max"] for _, m in data)
    # a range: its buckets are the run's, its first and last cut to its own rows
    steps = [r["step"] for r in exact]
    part = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/overview/?max_points={max_points}"
                            f"&after_step={steps[4]}&until_step={steps[-3]}").json()
    rows = exact[5:-2]
    wr = ov.width(5, n - 2, max_points)
    assert part["points"] == len(rows) and part["downsampled"] is (len(rows) > max_points)
    if part["downsampled"]:
        _same(part["steps"], _expected(rows, wr, first=5))
    else:
        assert part["steps"] == rows


def test_a_new_step_recomputes_only_the_last_chunk(alice, alice_client, run_with_metrics, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rlstudio.telemetry.models import MetricRow

    monkeypatch.setattr(ov, "CHUNK", 4)  # 4 buckets of 8 rows a chunk: 300 rows in 10 chunks
    run = run_with_metrics(alice, _rows(300, seed=1), name="live")
    url = f"/api/v1/runs/{run.pk}/metrics/overview/?max_points=40"

    def metric_reads():
        with CaptureQueriesContext(connection) as ctx:
            body = alice_client.get(url).json()
        return body, [q["sql"] for q in ctx.captured_queries if '"metrics")::text' in q["sql"]]

    first, reads = metric_reads()
    assert len(reads) == 1  # the ten chunks in one read
    assert metric_reads()[1] == []  # nothing changed: every chunk from the cache
    last = MetricRow.objects.filter(run=run).order_by("-step").first()
    MetricRow.objects.create(run=run, step=last.step + 1, time=last.time, metrics={"critic/score/mean": 9.0})
    again, reads = metric_reads()
    assert len(reads) == 1 and again["points"] == 301
    assert again["steps"][:-1] == first["steps"][:-1]  # the earlier buckets as they were
    assert again["steps"][-1]["step"] == last.step + 1
    # a merge into an old row (a later time) recomputes that row's chunk, and only it
    MetricRow.objects.filter(run=run, step=first["steps"][0]["step"]).update(time=last.time)  # bucket 0's last row
    merged, reads = metric_reads()
    assert len(reads) == 1 and merged["steps"][1:] == again["steps"][1:]
    assert merged["steps"][0]["time"] == last.time.isoformat() != again["steps"][0]["time"]
    assert f'"step" <= {first["steps"][3]["step"]}' in reads[0]  # the first chunk's 4 buckets only


def test_short_range_is_answered_row_for_row(alice, alice_client, run_with_metrics):
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in range(50)], name="short")
    base = f"/api/v1/runs/{run.pk}/metrics/overview/"
    whole = alice_client.get(f"{base}?max_points=50").json()
    assert whole["downsampled"] is False and whole["points"] == 50
    assert whole["steps"] == alice_client.get(f"/api/v1/runs/{run.pk}/metrics/").json()["steps"]
    # a range: after_step < step <= until_step, row for row when it fits, bucketed when it does not
    part = alice_client.get(f"{base}?after_step=9&until_step=29&max_points=20").json()
    assert [r["step"] for r in part["steps"]] == list(range(10, 30)) and part["points"] == 20
    assert "from_step" not in part["steps"][0]
    wide = alice_client.get(f"{base}?after_step=9&until_step=30&max_points=20").json()
    assert wide["downsampled"] is True and wide["points"] == 21 and len(wide["steps"]) == 11  # width 2
    assert [(r["from_step"], r["step"]) for r in wide["steps"][:2]] == [(10, 11), (12, 13)]
    assert wide["steps"][-1] == {**wide["steps"][-1], "from_step": 30, "step": 30, "rows": 1}
    assert alice_client.get(f"{base}?after_step=49").json() == {"steps": [], "points": 0, "downsampled": False}


def test_cache_follows_new_rows(alice, alice_client, run_with_metrics):
    from rlstudio.telemetry.models import MetricRow

    run = run_with_metrics(alice, [(s, {"x": 1.0}) for s in range(30)], name="live")
    url = f"/api/v1/runs/{run.pk}/metrics/overview/?max_points=10"
    assert alice_client.get(url).json()["steps"][-1]["metrics"] == {"x": 1.0}
    last = MetricRow.objects.get(run=run, step=29)
    MetricRow.objects.create(run=run, step=30, time=last.time, metrics={"x": 4.0})
    body = alice_client.get(url).json()
    assert body["points"] == 31 and body["steps"][-1]["step"] == 30
    assert body["steps"][-1]["metrics"]["x"] == pytest.approx((1.0 * 2 + 4.0) / 3)  # width 4: rows 28, 29, 30


@pytest.mark.parametrize("query,field,message", [
    ("max_points=9", "max_points", f"max_points must be an integer from {ov.POINTS_MIN} to {ov.POINTS_MAX}, got '9'"),
    ("max_points=5001", "max_points", f"max_points must be an integer from {ov.POINTS_MIN} to {ov.POINTS_MAX}, got '5001'"),
    ("until_step=-1", "until_step", f"until_step must be an integer from 0 to {2**31 - 1}, got '-1'"),
    ("after_step=5&until_step=5", "until_step", "until_step must be greater than after_step (5), got 5"),
    ("after_step=x", "after_step", f"after_step must be an integer from -1 to {2**31 - 1}, got 'x'"),
    ("limit=5", "limit", None),
])
def test_bad_parameters_are_400s_naming_the_field(alice, alice_client, run_with_metrics, query, field, message):
    run = run_with_metrics(alice, [(1, {"x": 1.0})], name="bad")
    response = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/overview/?{query}")
    assert response.status_code == 400 and response.json()["error"]["field"] == field
    if message:
        assert response.json()["error"]["message"] == message


def test_another_users_run_is_a_404(alice, bob, run_with_metrics):
    run = run_with_metrics(alice, [(1, {"x": 1.0})], name="private")
    c = Client()
    c.force_login(bob)
    assert c.get(f"/api/v1/runs/{run.pk}/metrics/overview/").status_code == 404


def _rows_of(c: dict) -> list[dict]:
    """The page's compact rows read back, as static/js/run_live.js rowsOf does."""
    out = []
    for i, step in enumerate(c["step"]):
        row = {"step": step, "t": c["t"][i],
               "metrics": {k: v for k, v in zip(c["keys"], c["values"][i], strict=True) if v is not False}}
        if c["from"][i] is not None:
            row.update(from_step=c["from"][i], rows=c["n"][i])
        out.append(row)
    return out


def _live(page: str) -> dict:
    live = json.loads(re.search(r'<script id="live-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    return {**live, "metrics": _rows_of(live["metrics"])}


def test_columns_name_each_metric_once_and_read_back():
    rows = [{"step": 1, "time": "a", "t": 1.0, "metrics": {"x": 0.5, "n": None}},
            {"step": 3, "time": "b", "t": 3.0, "from_step": 2, "rows": 2, "metrics": {"x": 1.0, "late": 0.0}}]
    c = ov.columns(rows)
    assert c["keys"] == ["late", "n", "x"] and c["values"] == [[False, None, 0.5], [0.0, False, 1.0]]
    assert _rows_of(c) == [{k: v for k, v in r.items() if k != "time"} for r in rows]


def test_run_page_holds_the_overview(alice, alice_client, run_with_metrics, monkeypatch):
    monkeypatch.setattr(ov, "POINTS_DEFAULT", 10)
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in range(25)], name="long page")
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    live = _live(page)
    assert len(live["metrics"]) == 7 and live["metrics_downsampled"] is True and live["metrics_points"] == 25
    assert live["chart_points"] == 10 and live["metrics_overview_api"] == f"/api/v1/runs/{run.pk}/metrics/overview/"
    assert live["metrics"][-1]["step"] == 24 and live["metrics"][0]["from_step"] == 0
    assert 'id="charts-downsampled"' in page and "25 steps drawn as 7 points" in page

    short = run_with_metrics(alice, [(s, {"x": s / 2}) for s in range(10)], name="short page")
    page = alice_client.get(f"/runs/{short.pk}/").content.decode()
    live = _live(page)
    assert [r["step"] for r in live["metrics"]] == list(range(10)) and live["metrics_downsampled"] is False
    assert 'id="charts-downsampled"' not in page


def test_cached_buckets_follow_a_merge_at_the_same_time_and_an_earlier_step(alice, alice_client, run_with_metrics):
    """A merge of later metrics into a row that keeps its time, and a step stored out of order before a
    range (which moves every row after it to the next position), are both in the next answer."""
    from rlstudio.telemetry.models import MetricRow

    run = run_with_metrics(alice, [(s, {"x": 1.0}) for s in range(0, 80, 2)], name="merged")
    url = f"/api/v1/runs/{run.pk}/metrics/overview/?max_points=10"
    assert alice_client.get(url).json()["steps"][0]["metrics"] == {"x": 1.0}
    row = MetricRow.objects.get(run=run, step=0)
    MetricRow.objects.filter(pk=row.pk).update(metrics={"x": 1.0, "val": 7.0})  # the time stays
    assert alice_client.get(url).json()["steps"][0]["metrics"] == {"val": 7.0, "x": 1.0}

    part = f"{url}&after_step=1&until_step=22"  # steps 2..22 (11 rows): width 2 on the run's rows 1..11
    assert [(r["from_step"], r["step"]) for r in alice_client.get(part).json()["steps"]][:2] == [(2, 2), (4, 6)]
    MetricRow.objects.create(run=run, step=1, time=row.time, metrics={"x": 3.0})  # now rows 2..12
    assert [(r["from_step"], r["step"]) for r in alice_client.get(part).json()["steps"]][:2] == [(2, 4), (6, 8)]
