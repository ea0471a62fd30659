"""Comparing runs (issue 19, item 1): telemetry/compare.py's pure parts, GET /api/v1/runs/compare/ and
the /runs/compare/ page, from stored metric rows (no training)."""
import json
from urllib.parse import urlencode
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_share
from rlstudio.telemetry import compare
from rlstudio.telemetry.models import MetricRow

VAL = "val-core/arith/reward/mean@1"


# ------------------------------------------------------------------------------------ pure parts
def _config(**over):
    base = {"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 8},
                                  "rollout": {"n": 4, "temperature": 1.0}},
            "algorithm": {"adv_estimator": "grpo"},
            "reward": {"name": "arith", "reward_kwargs": {"a": 1}},
            "trainer": {"total_training_steps": 20, "default_local_dir": "/runs/1"}}
    for key, value in over.items():
        node = base
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        if value is _ABSENT:
            node.pop(last, None)
        else:
            node[last] = value
    return base


_ABSENT = object()


def test_config_diff_lists_exactly_the_changed_keys():
    a = _config()
    b = _config(**{"actor_rollout_ref.actor.optim.lr": 5e-6, "trainer.default_local_dir": "/runs/2",
                   "reward.reward_kwargs": {"a": 2}})
    c = _config(**{"actor_rollout_ref.rollout.temperature": _ABSENT, "trainer.default_local_dir": "/runs/3"})
    diff = compare.config_diff([a, b, c])
    assert [d["key"] for d in diff] == ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.temperature",
                                        "reward.reward_kwargs"]
    lr, temperature, kwargs = diff
    assert lr["values"] == [1e-6, 5e-6, 1e-6] and lr["present"] == [True, True, True]
    assert temperature["values"] == [1.0, 1.0, None] and temperature["present"] == [True, True, False]
    assert kwargs["values"] == [{"a": 1}, {"a": 2}, {"a": 1}]  # a leaf object stays whole
    assert compare.config_diff([a, _config(**{"trainer.default_local_dir": "/x"})]) == []  # own folder only
    assert compare.config_diff([a]) == []


def test_config_diff_tells_true_from_1_and_ignores_key_order():
    assert compare.config_diff([{"trainer": {"x": True}}, {"trainer": {"x": 1}}])[0]["key"] == "trainer.x"
    assert compare.config_diff([{"reward": {"reward_kwargs": {"a": 1, "b": 2}}},
                                {"reward": {"reward_kwargs": {"b": 2, "a": 1}}}]) == []


def test_downsample_keeps_short_series_and_bounds_long_ones():
    steps = list(range(1, 11))
    assert compare.downsample(steps, steps, steps, 10) == (steps, steps, steps)
    steps = list(range(1, 2501))
    values = [float(s) for s in steps]
    values[7] = None
    s, t, v = compare.downsample(steps, [x * 2.0 for x in steps], values, 1000)
    assert len(s) == len(t) == len(v) == 1000
    assert s[0] == 3 and s[-1] == 2500 and t[-1] == 5000.0  # each point at its bucket's last step
    assert s == sorted(s) and len(set(s)) == 1000
    # row i of 2500 in bucket i * 1000 // 2500: steps 1-3, 4-5, 6-8, 9-10, ..., 2499-2500
    assert v[0] == 2.0 and v[1] == 4.5 and v[-1] == 2499.5
    assert v[2] == 6.5  # steps 6-8 with step 8's value missing: skipped, not counted as 0
    s, _, v = compare.downsample([1, 2, 3, 4], [0, 0, 0, 0], [None, None, 1.0, 3.0], 2)
    assert s == [2, 4] and v == [None, 2.0]


@pytest.mark.django_db
@pytest.mark.parametrize("rows, max_points", [(37, 10), (1000, 1000), (2503, 1000), (5, 10)])
def test_metric_series_downsamples_in_postgresql_as_downsample_does(alice, make_run, rows, max_points):
    import random

    rng = random.Random(rows)
    run = make_run(alice, "long")
    t0 = timezone.now()
    steps = sorted(rng.sample(range(1, 10 * rows), rows))  # gaps between steps, as a resumed run leaves
    values = [None if rng.random() < 0.1 else rng.uniform(-1, 1) for _ in steps]
    MetricRow.objects.bulk_create([
        MetricRow(run=run, step=s, time=t0 + timedelta(seconds=s), metrics={"m": v, "other": 1})
        for s, v in zip(steps, values)])
    MetricRow.objects.create(run=run, step=10 * rows + 1, time=t0, metrics={"other": 2})  # no "m": not counted
    got = compare.metric_series([run.pk], ["m"], max_points)["m"][0]
    want_s, want_t, want_v = compare.downsample(steps, [(t0 + timedelta(seconds=s)).timestamp() for s in steps],
                                                values, max_points)
    assert got["step"] == want_s and got["t"] == pytest.approx(want_t) and got["points"] == rows
    assert got["value"] == pytest.approx(want_v, nan_ok=False) if None not in want_v else all(
        (a is None and b is None) or a == pytest.approx(b) for a, b in zip(got["value"], want_v))
    assert got["downsampled"] == (rows > max_points) and len(got["step"]) == min(rows, max_points)


def test_held_out_stats_best_and_last_with_steps():
    assert compare.held_out_stats([]) is None and compare.held_out_stats([(1, None)]) is None
    stats = compare.held_out_stats([(0, 0.2), (10, 0.7), (20, 0.7), (30, None), (40, 0.5)])
    assert stats == {"best": 0.7, "best_step": 10, "last": 0.5, "last_step": 40}


def test_the_held_out_metric_is_verls_core_mean_reward_or_acc():
    held = [k for k in ("val-core/gsm8k/reward/mean@1", "val-core/math/acc/mean@4", "val-core/math/acc/best@4/mean",
                        "val-aux/math/reward/mean@4", "val-core/math/acc/maj@4/mean", "critic/score/mean")
            if compare.HELD_OUT.match(k)]
    assert held == ["val-core/gsm8k/reward/mean@1", "val-core/math/acc/mean@4"]


def test_parse_ids():
    assert compare.parse_ids(["3,1", "3", " 2 ,"]) == [3, 1, 2]
    for bad, message in [([], "required"), (["1,x"], "run ids"), (["0"], "positive"),
                         ([",".join(str(i) for i in range(1, 22))], "at most 20")]:
        with pytest.raises(ValueError, match=message):
            compare.parse_ids(bad)


def test_metrics_values_are_known_names_whole_else_comma_lists():
    known = {"reward/a,b", "a", "b"}
    assert compare.resolve_metrics(["reward/a,b", "a,c", " d , ,a"], known) == ["reward/a,b", "a", "c", "d"]
    assert compare.parse_metrics(["", " "]) is None and compare.parse_metrics(["x\x00y"]) == ["xy"]
    with pytest.raises(compare.TooManyMetrics, match="got 21"):
        compare.parse_metrics([f"m{i}" for i in range(21)])
    with pytest.raises(compare.TooManyMetrics, match="got 21"):
        compare.resolve_metrics([",".join(f"m{i}" for i in range(21))], known)


def test_default_held_out_is_the_one_most_runs_report():
    assert compare.default_held_out([{"b": 1, "a": 1}, {"b": 1}, {}]) == "b"
    assert compare.default_held_out([{"b": 1}, {"a": 1}]) == "a"
    assert compare.default_held_out([{}, {}]) is None


# ------------------------------------------------------------------------------------ API and page
@pytest.fixture
def two_runs(alice, make_run):
    """Two finished runs of alice's (20 steps, validation every 5) differing in lr and rollout.n."""
    t0 = timezone.now() - timedelta(hours=1)
    runs = []
    for i, (lr, n) in enumerate([(1e-6, 4), (5e-6, 8)]):
        config = _config(**{"actor_rollout_ref.actor.optim.lr": lr, "actor_rollout_ref.rollout.n": n,
                            "trainer.default_local_dir": f"/runs/{i}"})
        run = make_run(alice, f"cmp-{i}", gpus=2 * i, config=config)
        Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=20, total_steps=20,
                                             started=t0, finished=t0 + timedelta(minutes=30 * (i + 1)))
        rows = []
        for step in range(0, 21):
            metrics = {"critic/score/mean": 0.1 * i + step / 40, "actor/entropy": 5 - step / 10}
            if step % 5 == 0:
                metrics[VAL] = [0.2, 0.5, 0.6, 0.4][step // 5 - 1] + i / 10 if step else 0.1
            rows.append(MetricRow(run=run, step=step, time=t0 + timedelta(seconds=30 * step), metrics=metrics))
        MetricRow.objects.bulk_create(rows)
        runs.append(Run.objects.get(pk=run.pk))
    return runs


def _api(user):
    c = APIClient()
    c.force_authenticate(user)
    return c


@pytest.mark.django_db
def test_compare_api_answers_series_summary_and_diff(two_runs, alice):
    a, b = two_runs
    body = _api(alice).get(f"/api/v1/runs/compare/?ids={a.pk},{b.pk}").json()
    assert [r["id"] for r in body["runs"]] == [a.pk, b.pk]
    assert body["held_out_metric"] == VAL and body["held_out_metrics"] == [VAL]
    assert body["metrics"] == ["actor/entropy", "critic/score/mean", VAL]
    assert list(body["series"]) == [VAL, "critic/score/mean"]  # the default ones
    reward = body["series"]["critic/score/mean"]
    assert [s["run"] for s in reward] == [a.pk, b.pk]
    assert reward[0]["step"] == list(range(21)) and reward[0]["points"] == 21 and not reward[0]["downsampled"]
    assert reward[1]["value"][-1] == pytest.approx(0.6)
    assert body["series"][VAL][0]["step"] == [0, 5, 10, 15, 20]
    ra, rb = body["runs"]
    assert ra["held_out"][VAL] == {"best": 0.6, "best_step": 15, "last": 0.4, "last_step": 20}
    assert rb["held_out"][VAL]["best"] == pytest.approx(0.7) and rb["held_out"][VAL]["best_step"] == 15
    assert ra["step"] == 20 and ra["duration_s"] == 1800 and rb["duration_s"] == 3600
    assert ra["gpu_hours"] == 0 and rb["gpu_hours"] == 2.0  # 2 GPUs for an hour
    assert ra["last_reward"] == pytest.approx(0.5)
    assert [d["key"] for d in body["config_diff"]] == ["actor_rollout_ref.actor.optim.lr",
                                                       "actor_rollout_ref.rollout.n"]
    assert body["config_diff"][1]["values"] == [4, 8]


@pytest.mark.django_db
def test_compare_api_metrics_and_downsampling(two_runs, alice):
    a, b = two_runs
    body = _api(alice).get(f"/api/v1/runs/compare/?ids={a.pk}&ids={b.pk}&metrics=actor/entropy,nope&max_points=10").json()
    assert list(body["series"]) == ["actor/entropy", "nope"] and body["series"]["nope"] == []
    entropy = body["series"]["actor/entropy"]
    assert all(len(s["step"]) == 10 and s["downsampled"] and s["points"] == 21 for s in entropy)
    assert entropy[0]["step"][-1] == 20
    # the summary's held-out figures come from every stored row, never from a downsampled series
    assert body["runs"][0]["held_out"][VAL]["best"] == 0.6


@pytest.mark.django_db
def test_compare_a_metric_name_with_a_comma_round_trips(two_runs, alice):
    """metrics= repeated, one name each (as run_compare.js writes the address and fetches a chart):
    a name the runs report is taken whole, commas and all; an unknown value is still a list."""
    a, b = two_runs
    MetricRow.objects.create(run=a, step=21, time=timezone.now(), metrics={"reward/x,y": 0.5})
    q = urlencode([("ids", a.pk), ("ids", b.pk), ("metrics", "reward/x,y"), ("metrics", "actor/entropy,nope")])
    body = _api(alice).get(f"/api/v1/runs/compare/?{q}").json()
    assert list(body["series"]) == ["reward/x,y", "actor/entropy", "nope"]
    assert [s["value"] for s in body["series"]["reward/x,y"]] == [[0.5]]  # run a's only
    client = Client()
    client.force_login(alice)
    page = client.get(f"/runs/compare/?{q}").content.decode()
    data = json.loads(page.split('id="compare-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert list(data["series"]) == ["reward/x,y", "actor/entropy", "nope"]
    many = urlencode([("ids", a.pk), ("metrics", ",".join(f"m{i}" for i in range(21)))])
    refused = _api(alice).get(f"/api/v1/runs/compare/?{many}")
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "metrics"


@pytest.mark.django_db
def test_compare_api_a_step_range(two_runs, alice):
    """?after_step=&until_step=: the series of that range only (a zoomed chart's), downsampled within it;
    the summaries stay the whole runs'; each range cached apart from the whole runs' series."""
    a, b = two_runs
    base = f"/api/v1/runs/compare/?ids={a.pk},{b.pk}&metrics=actor/entropy"
    whole = _api(alice).get(f"{base}&max_points=10").json()
    part = _api(alice).get(f"{base}&max_points=10&after_step=4&until_step=12").json()
    entropy = part["series"]["actor/entropy"]
    assert [s["step"] for s in entropy] == [list(range(5, 13))] * 2 and not entropy[0]["downsampled"]
    assert entropy[0]["points"] == 8 and entropy[0]["value"][0] == pytest.approx(4.5)
    assert part["runs"] == whole["runs"]
    narrow = _api(alice).get(f"{base}&max_points=10&until_step=15").json()["series"]["actor/entropy"][0]
    assert narrow["points"] == 16 and narrow["downsampled"] and narrow["step"][-1] == 15
    assert _api(alice).get(f"{base}&max_points=10").json()["series"] == whole["series"]


@pytest.mark.django_db
@pytest.mark.parametrize("query, status, field", [
    ("", 400, "ids"), ("ids=a", 400, "ids"), ("ids=1&max_points=3", 400, "max_points"),
    ("ids=987654", 404, "ids"), ("ids=1&after_step=9&until_step=9", 400, "until_step"),
    ("ids=1&after_step=-2", 400, "after_step"),
])
def test_compare_api_refusals(alice, query, status, field):
    resp = _api(alice).get(f"/api/v1/runs/compare/?{query}")
    assert resp.status_code == status and resp.json()["error"]["field"] == field


@pytest.mark.django_db
def test_compare_reads_only_runs_the_user_may_read(two_runs, alice, bob):
    a, b = two_runs
    url = f"/api/v1/runs/compare/?ids={a.pk},{b.pk}"
    resp = _api(bob).get(url)
    assert resp.status_code == 404 and str(a.pk) in resp.json()["error"]["message"]
    run_share(run=a, by=alice, add=["bob"])
    assert _api(bob).get(url).status_code == 404  # b is still alice's alone
    run_share(run=b, by=alice, visibility="everyone")
    assert _api(bob).get(url).status_code == 200
    client = Client()
    client.force_login(bob)
    assert client.get(f"/runs/compare/?ids={a.pk},{b.pk}").status_code == 200


@pytest.mark.django_db
def test_compare_page_renders_summary_diff_and_data(two_runs, alice):
    a, b = two_runs
    Run.objects.filter(pk=a.pk).update(name="<b>run a</b>")
    client = Client()
    client.force_login(alice)
    page = client.get(f"/runs/compare/?ids={a.pk}&ids={b.pk}").content.decode()
    assert "Compare 2 runs" in page and "&lt;b&gt;run a&lt;/b&gt;" in page and "<b>run a</b>" not in page
    assert 'id="compare-data"' in page and 'js/run_compare.js' in page
    keys = [line.split('"')[1] for line in page.splitlines() if "<tr data-key=" in line]
    assert keys == ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.n"]
    assert "0.6000 (15)" in page and "0.4000 (20)" in page  # best and last held-out of run a
    assert ">2</span> keys differ" in page
    assert client.get("/runs/compare/").status_code == 400
    assert client.get("/runs/compare/?ids=987654").status_code == 404
    # ?metrics=: the charts the page opens with (run_compare.js keeps the ones shown there)
    shown = client.get(f"/runs/compare/?ids={a.pk},{b.pk}&metrics=actor/entropy").content.decode()
    data = json.loads(shown.split('id="compare-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert list(data["series"]) == ["actor/entropy"]
    many = ",".join(f"m{i}" for i in range(21))
    refused = client.get(f"/runs/compare/?ids={a.pk}&metrics={many}")
    assert refused.status_code == 400 and "at most 20 metrics at once, got 21" in refused.content.decode()
