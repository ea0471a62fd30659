"""The run page's Summary card (GET /runs/{id}/summary/card/): each held-out metric's first, best (with its
step) and last value and the training reward's first and last, from the stored metric rows; the empty
state when the run reported no held-out metric; the run page's visibility (owner, shared, staff; anyone
else a 404). The run page itself holds only the card's placeholder (run_summary.js fetches the card)."""
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.runs.services import run_share
from rlstudio.telemetry import compare
from rlstudio.telemetry.models import MetricRow

pytestmark = pytest.mark.django_db

VAL = "val-core/arith/reward/mean@1"
ACC = "val-core/gsm8k/acc/mean@4"


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _rows(run, by_step):
    t0 = timezone.now() - timedelta(hours=1)
    MetricRow.objects.bulk_create([MetricRow(run=run, step=step, time=t0 + timedelta(seconds=step), metrics=m)
                                   for step, m in by_step])


def _cells(html: str) -> dict[str, str]:
    """{"<metric>/<stat>": cell text} of the held-out table, and "train-first"/"train-last"."""
    out = {}
    for metric, row in re.findall(r'<tr data-metric="([^"]+)">(.*?)</tr>', html, re.S):
        for stat, text in re.findall(r'data-stat="(\w+)">([^<]*)<', row):
            out[f"{metric}/{stat}"] = text.strip()
    for stat, text in re.findall(r'data-stat="(train-\w+)">([^<]*)<', html):
        out[stat] = text.strip()
    return out


@pytest.fixture
def val_run(alice, make_run):
    """A run of alice's: 1,201 steps of training reward; VAL every 300 steps (best 0.75 first at step 600, tied
    at 900, not a number at 1,200); ACC at steps 1,200 only."""
    run = make_run(alice, "summary-run")
    rows = []
    for step in range(0, 1201):
        m = {"critic/score/mean": 0.125 + step / 2000, "actor/entropy": 1.0}
        if step % 300 == 0:
            m[VAL] = {0: 0.25, 300: 0.5, 600: 0.75, 900: 0.75, 1200: 0.625}[step]
        rows.append((step, m))
    rows[1200][1][ACC] = 0.3333
    rows.append((1201, {VAL: "NaN", "critic/score/mean": 0.5}))  # a held-out value that is not a number
    _rows(run, rows)
    return run


def test_the_card_gives_first_best_and_last_from_the_stored_rows(alice, val_run):
    r = _client(alice).get(f"/runs/{val_run.pk}/summary/card/")
    assert r.status_code == 200
    html = r.content.decode()
    assert f'id="summary-card" data-url="/runs/{val_run.pk}/summary/card/"' in html
    cells = _cells(html)
    assert cells == {
        f"{VAL}/first": "0.2500 (0)", f"{VAL}/best": "0.7500 (600)", f"{VAL}/last": "0.6250 (1,200)",
        f"{ACC}/first": "0.3333 (1,200)", f"{ACC}/best": "0.3333 (1,200)", f"{ACC}/last": "0.3333 (1,200)",
        "train-first": "0.1250 (0)", "train-last": "0.5000 (1,201)",
    }, cells
    # sorted by metric name; the empty state is not shown
    assert html.index(VAL) < html.index(ACC) and "No held-out metric yet" not in html


def test_the_empty_state_names_the_config_keys(alice, make_run):
    run = make_run(alice, "no-val")
    html = _client(alice).get(f"/runs/{run.pk}/summary/card/").content.decode()
    assert "No held-out metric yet" in html and "none reported yet" in html
    for key in ("data.val_files", "trainer.test_freq", "trainer.val_before_train"):
        assert f"<code>{key}</code>" in html
    _rows(run, [(0, {"critic/score/mean": 0.0625}), (1, {"critic/score/mean": 0.25})])
    html = _client(alice).get(f"/runs/{run.pk}/summary/card/").content.decode()
    assert "No held-out metric yet" in html and 'id="summary-held-out"' not in html
    assert _cells(html) == {"train-first": "0.0625 (0)", "train-last": "0.2500 (1)"}


def test_owner_shared_and_staff_read_the_card_anyone_else_gets_a_404(alice, bob, staff, make_user, val_run):
    url = f"/runs/{val_run.pk}/summary/card/"
    assert _client(bob).get(url).status_code == 404  # not shared yet
    run_share(run=val_run, by=alice, add=["bob"])
    for user in (alice, bob, staff):
        r = _client(user).get(url)
        assert r.status_code == 200 and "0.7500 (600)" in r.content.decode(), user
    assert _client(make_user("carol")).get(url).status_code == 404
    assert _client(alice).get("/runs/987654/summary/card/").status_code == 404
    assert Client().get(url).status_code == 302  # not logged in: to the login page
    assert _client(alice).post(url).status_code == 405


def test_the_run_page_holds_the_placeholder_not_the_figures(alice, val_run):
    html = _client(alice).get(f"/runs/{val_run.pk}/").content.decode()
    card = html[html.index('id="summary-card"'):html.index("</section>", html.index('id="summary-card"'))]
    assert f'data-url="/runs/{val_run.pk}/summary/card/"' in card and "Loading" in card
    assert 'data-stat=' not in html  # the figures come with the fragment only
    assert html.index("js/fragment_poller.js") < html.index("js/run_summary.js")
    # Under the live charts (the first screen is theirs: tests/browser/test_run_page_jump_links.py), in the links bar.
    assert html.index('id="charts-card"') < html.index('id="summary-card"') < html.index('id="memory-card"')
    assert '<a href="#summary-card">Summary</a>' in html


def test_held_out_stats_first_is_asked_for_and_the_other_callers_keep_their_four_keys(alice, val_run):
    points = [(0, None), (5, 0.5), (10, 0.75), (15, float("nan")), (20, 0.25)]
    assert compare.held_out_stats(points) == {"best": 0.75, "best_step": 10, "last": 0.25, "last_step": 20}
    assert compare.held_out_stats(points, first=True) == {"first": 0.5, "first_step": 5, "best": 0.75,
                                                          "best_step": 10, "last": 0.25, "last_step": 20}
    assert compare.held_out_stats([(1, None)], first=True) is None
    plain = compare.held_out_of(val_run.pk)  # what exports.facts (HeldOut(**stats)) and sweeps read
    assert set(plain) == {ACC, VAL} and all(set(s) == {"best", "best_step", "last", "last_step"}
                                           for s in plain.values())
    assert compare.held_out_of(val_run.pk, first=True)[VAL]["first_step"] == 0
    assert compare.train_reward_of(val_run.pk)["last_step"] == 1201


def test_the_figures_are_cached_until_the_runs_rows_change(alice, val_run, monkeypatch):
    from rlstudio.telemetry import summary_views

    url = f"/runs/{val_run.pk}/summary/card/"
    first = _client(alice).get(url).content.decode()

    def no_scan(*_args, **_kwargs):
        raise AssertionError("the rows were read again though none changed")

    monkeypatch.setattr(summary_views, "held_out_of", no_scan)
    assert _client(alice).get(url).content.decode() == first  # from the cache
    monkeypatch.undo()

    # A new validation step, then a later event merged into that step's row (the ingest's upsert sets
    # the row's time): each is read at the next fetch.
    t = timezone.now()
    MetricRow.objects.create(run=val_run, step=1300, time=t, metrics={VAL: 0.875})
    assert _cells(_client(alice).get(url).content.decode())[f"{VAL}/best"] == "0.8750 (1,300)"
    MetricRow.objects.filter(run=val_run, step=1300).update(metrics={VAL: 0.9375}, time=t + timedelta(seconds=1))
    assert _cells(_client(alice).get(url).content.decode())[f"{VAL}/best"] == "0.9375 (1,300)"


def test_the_card_says_when_responses_hit_the_length_limit_or_no_group_has_a_signal(alice, make_run):
    """The hints of telemetry.hints from the last steps: every response cut at the length limit and no
    group whose samples scored differently (a tiny model's GSM8K run at 16 tokens); none while the
    last steps are fine, none from a single step."""
    from rlstudio.runs.models import Run
    from rlstudio.telemetry.hints import run_hints

    run = make_run(alice, "cut-off")
    Run.objects.filter(pk=run.pk).update(config={"data": {"max_response_length": 16}})
    stuck = {"critic/score/mean": 0.0, "response_length/clip_ratio": 1.0, "critic/zero_adv_group_ratio": 1.0}
    _rows(run, [(1, {**stuck, "response_length/clip_ratio": 0.5}), (2, stuck), (3, stuck), (4, stuck)])
    html = _client(alice).get(f"/runs/{run.pk}/summary/card/").content.decode()
    assert 'data-hint="length"' in html and "(16 tokens, data.max_response_length)" in html
    assert 'data-hint="no_signal"' in html and "the last 3 steps" in html
    fine = {"response_length/clip_ratio": 0.2, "critic/zero_adv_group_ratio": 0.4}
    assert run_hints([stuck, stuck, fine]) == []  # the last steps decide
    assert run_hints([stuck]) == []  # one step says too little
    assert [h["kind"] for h in run_hints([{**stuck, "critic/zero_adv_group_ratio": 0.5}, stuck])] == ["length"]
