"""Journeys of issue 19 (items 1 and 5) in a real Chromium against the running platform:

- compare: on the runs list the owner filters by a tag, picks two finished runs and presses
  "Compare selected"; the compare page overlays their metrics (one line per run, then smoothed),
  lists exactly the config keys that differ, and sums them up (best / last held-out reward);
- share: the owner shares a run with bob on its page; bob reads it (charts, live socket, transcript)
  without a single control, and a stop he forges is refused; carol, with whom nothing was shared,
  gets a 404 until the run is shared with everyone.

The runs never train: they are made finished, with stored metric rows (the rows the ingest writes).
"""
from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

VAL = "val-core/arith/reward/mean@1"
STEPS = 60


def _config(lr: float, n: int) -> dict:
    """The cpu_smoke recipe's config (what a launched run stores) with its lr and rollout.n set."""
    from trainer.recipes import REGISTRY

    config = REGISTRY["cpu_smoke"].build().to_dict()
    config["actor_rollout_ref"]["actor"]["optim"]["lr"] = lr
    config["actor_rollout_ref"]["rollout"]["n"] = n
    return config


def _finished_run(owner, name: str, *, dataset, model, lr: float, n: int, speed: float, tags=()):
    """A succeeded run of STEPS steps with a training reward, an entropy and a held-out reward every
    10 steps in its metric rows (as the ingest stores them)."""
    from django.utils import timezone

    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_annotate, run_create
    from rlstudio.telemetry.models import MetricRow

    run, _token = run_create(owner=owner, name=name, dataset=dataset, model=model, config=_config(lr, n), gpus=0)
    t0 = timezone.now() - timedelta(hours=2)
    Run.objects.filter(pk=run.pk).update(status="succeeded", step=STEPS, total_steps=STEPS, started=t0,
                                         finished=t0 + timedelta(seconds=20 * STEPS + 5))
    rows = []
    for step in range(1, STEPS + 1):
        level = 1 - math.exp(-speed * step)
        metrics = {"critic/score/mean": round(level * 0.9 + 0.08 * math.sin(step * 1.7), 4),
                   "actor/entropy": round(3.0 - 2 * level + 0.05 * math.cos(step), 4)}
        if step % 10 == 0:
            metrics[VAL] = round(level * 0.85, 4)
        rows.append(MetricRow(run=run, step=step, time=t0 + timedelta(seconds=20 * step), metrics=metrics))
    MetricRow.objects.bulk_create(rows)
    if tags:
        run_annotate(run=run, by=owner, tags=list(tags))
    return Run.objects.get(pk=run.pk)


@pytest.fixture
def catalog():
    """make(owner) -> (dataset, model) records of the owner's (nothing is read from them here)."""
    from rlstudio.catalog.models import Dataset, ModelAsset

    def make(owner):
        dataset = Dataset.objects.create(owner=owner, name="arith-train", file_path="/tmp/arith.jsonl",
                                         sha256="1" * 64, status="ready")
        model = ModelAsset.objects.create(owner=owner, name="tiny-demo", path="/tmp/tiny-demo")
        return dataset, model

    return make


def _traces(page, metric: str) -> list[dict]:
    """What Plotly drew in the panel of `metric`: [{name, colour, points, meta, y}] per trace."""
    return page.evaluate("""(metric) => {
        const div = [...document.querySelectorAll('.compare-panel .plot')].find((d) => d.dataset.metric === metric);
        if (!div || !div.data) return null;
        return div.data.map((t) => ({name: t.name, colour: t.line.color, points: t.x.length, meta: t.meta,
                                     y: Array.from(t.y)}));
    }""", metric)


def test_compare_two_finished_runs(page_as, make_user, catalog, ui):
    alice = make_user("alice")
    dataset, model = catalog(alice)
    slow = _finished_run(alice, "lr-1e-4 n-2", dataset=dataset, model=model, lr=1e-4, n=2, speed=0.03,
                         tags=["lr-sweep"])
    fast = _finished_run(alice, "lr-3e-4 n-4", dataset=dataset, model=model, lr=3e-4, n=4, speed=0.08,
                         tags=["lr-sweep", "best"])
    _finished_run(alice, "unrelated", dataset=dataset, model=model, lr=1e-4, n=2, speed=0.05)

    page = page_as(alice)
    page.goto("/")
    page.select_option("#id_tag", "lr-sweep")  # submits the filter form
    page.wait_for_url(re.compile(r".*tag=lr-sweep.*"))
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 2 and "unrelated" not in page.locator("table.runs tbody").inner_text()
    assert page.locator("#compare-button").is_disabled()
    for run in (slow, fast):
        page.check(f"input[name=ids][value='{run.pk}']")
    assert page.locator("#compare-count").inner_text() == "2 runs picked"
    ui.shot(page, "13-runs-list-filter-compare")
    page.click("#compare-button")
    page.wait_for_url(re.compile(r".*/runs/compare/\?ids=\d+,\d+$"))
    assert page.url.endswith(f"?ids={fast.pk},{slow.pk}")  # the list's order: newest first
    page.wait_for_selector(".compare-panel .plot .main-svg")
    page.wait_for_function("document.querySelectorAll('.compare-panel .plot .main-svg').length >= 2")

    # The overlay: one line per run in each default panel, in the runs' colours, every step drawn.
    assert page.evaluate("window.rlstudioCompare.panels()") == [VAL, "critic/score/mean"]
    reward = _traces(page, "critic/score/mean")
    assert [t["name"] for t in reward] == ["lr-3e-4 n-4", "lr-1e-4 n-2"]
    assert [t["points"] for t in reward] == [STEPS, STEPS] and reward[0]["colour"] != reward[1]["colour"]
    assert [t["points"] for t in _traces(page, VAL)] == [6, 6]
    drawn = page.evaluate("""() => [...document.querySelectorAll('.compare-panel .plot')].map((d) =>
        d.querySelectorAll('.scatterlayer .trace path.js-line').length)""")
    assert drawn == [2, 2], drawn

    # The config diff lists exactly the keys that differ.
    keys = page.locator("#config-diff tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.key)")
    assert keys == ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.n"], keys
    assert page.locator("#config-diff tr[data-key='actor_rollout_ref.rollout.n']").inner_text().split() == [
        "actor_rollout_ref.rollout.n", "4", "2"]

    # The summary: best and last held-out reward with their steps, steps, duration.
    summary = page.locator(f"#summary-table tr[data-run-id='{fast.pk}']")
    best = round(0.85 * (1 - math.exp(-0.08 * 60)), 4)
    assert summary.locator("[data-held=best]").inner_text() == f"{best:.4f} (60)"
    assert summary.locator("[data-held=last]").inner_text() == f"{best:.4f} (60)"
    assert "60 / 60" in summary.inner_text() and "0:20:05" in summary.inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    ui.shot(page, "14-compare-runs")

    # Smoothing: the raw line stays (faint) under an exponential moving average of it.
    page.fill("#smoothing", "0.8")
    page.wait_for_function("document.getElementById('smoothing-value').textContent === '0.80'")
    smoothed = _traces(page, "critic/score/mean")
    assert [t["meta"] for t in smoothed] == ["raw", "smoothed", "raw", "smoothed"]
    raw, ema = smoothed[0]["y"], smoothed[1]["y"]
    assert ema[0] == pytest.approx(raw[0])  # debiased: starts at the first value
    expected, acc = [], 0.0
    for k, v in enumerate(raw, start=1):
        acc = 0.8 * acc + 0.2 * v
        expected.append(acc / (1 - 0.8 ** k))
    assert ema == pytest.approx(expected)

    # Any other metric: added from the list, fetched from the compare API, overlaid the same way.
    page.select_option("#metric-add", "actor/entropy")
    page.wait_for_function("window.rlstudioCompare.panels().includes('actor/entropy')")
    page.wait_for_function("""() => { const d = document.querySelector('.plot[data-metric="actor/entropy"]');
        return d && d.data && d.data.length === 4; }""")
    # By time: minutes since each run started (both started 2 hours ago, one step every 20 s).
    page.select_option("#x-axis", "time")
    page.wait_for_function("""() => { const d = document.querySelector('.plot[data-metric="critic/score/mean"]');
        return d.layout.xaxis.title.text.startsWith('minutes'); }""")
    xs = page.evaluate("""() => document.querySelector('.plot[data-metric="critic/score/mean"]').data[0].x""")
    assert xs[0] == pytest.approx(20 / 60) and xs[-1] == pytest.approx(20 * STEPS / 60)
    page.locator("#compare-charts").scroll_into_view_if_needed()
    ui.shot(page, "15-compare-smoothed-by-time")


def test_share_a_run_read_only(page_as, make_user, catalog, ui):
    from rlstudio.runs.models import Run
    from rlstudio.telemetry.models import Sample

    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    dataset, model = catalog(alice)
    run = _finished_run(alice, "alice-shared-run", dataset=dataset, model=model, lr=1e-4, n=2, speed=0.05)
    Run.objects.filter(pk=run.pk).update(checkpoint_path="/tmp/ckpt/global_step_60")
    sample = Sample.objects.create(run=run, seq=1, step=60, uid="p0", index=0, reward=1.0, response_length=3,
                                   transcript={"messages": [{"role": "user", "content": "What is 6*7?"},
                                                            {"role": "assistant", "content": "#### 42"}]})

    owner = page_as(alice)
    owner.goto(f"/runs/{run.pk}/")
    owner.fill("#id_share_add", "bob")
    owner.click("#run-sharing form:has(#id_share_add) button[type=submit]")
    owner.wait_for_load_state("load")
    assert "Shared with bob (read-only)." in owner.content()
    assert owner.locator("#share-users").inner_text().split()[:2] == ["bob", "remove"]

    reader = page_as(bob)
    reader.goto("/")
    row = reader.locator(f"table.runs tr[data-run-id='{run.pk}']")
    assert "alice" in row.inner_text() and "shared" in row.inner_text()
    reader.goto(f"/runs/{run.pk}/")
    assert "Shared with you by alice" in reader.locator("#shared-note").inner_text()
    reader.wait_for_selector("#live-conn[data-socket=open]", state="attached")  # the socket admits bob
    reader.wait_for_selector("#charts .main-svg")
    assert reader.locator("#run-controls button").count() == 0  # no stop, force stop, resume or clone
    assert reader.locator("#run-annotate, #run-sharing").count() == 0
    assert "read-only" in reader.locator("#run-controls").inner_text()
    ui.shot(reader, "16-run-shared-read-only")
    assert reader.goto(f"/runs/{run.pk}/samples/{sample.pk}/").status == 200
    assert "#### 42" in reader.content()
    # A forged control (with bob's own CSRF token) is refused; the run is untouched.
    reader.goto("/")
    csrf = reader.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    for verb, form in (("stop", {"force": "1"}), ("resume", {}), ("clone", {}), ("annotate", {"tags": "mine"}),
                       ("share", {"visibility": "everyone"})):
        resp = reader.request.post(f"/runs/{run.pk}/{verb}/", form={"csrfmiddlewaretoken": csrf, **form},
                                   headers={"Referer": reader.url})
        assert resp.status == 403, (verb, resp.status)
    assert reader.request.post(f"/api/v1/runs/{run.pk}/stop/", data={}, headers={
        "X-CSRFToken": csrf, "Referer": reader.url}).status == 403
    run.refresh_from_db()
    assert run.status == "succeeded" and run.tags == [] and run.visibility == "private"
    assert Run.objects.count() == 1

    stranger = page_as(carol)
    assert stranger.goto(f"/runs/{run.pk}/").status == 404
    owner.goto(f"/runs/{run.pk}/")
    owner.select_option("#id_visibility", "everyone")
    owner.click("#run-sharing form:has(#id_visibility) button[type=submit]")
    owner.wait_for_load_state("load")
    assert "Shared with everyone (read-only)." in owner.content()
    assert stranger.goto(f"/runs/{run.pk}/").status == 200
    assert stranger.locator("#run-controls button").count() == 0
