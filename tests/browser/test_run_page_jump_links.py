"""A run page's live views come first and its in-page links stay in reach: the links bar sticks to the
top of the window while the page scrolls, and a link lands its card just below the bar (not under it).
The runs list's filters keep each label on the line of its field when the bar wraps (a narrow window
put "Whose" at the end of one line and its select on the next)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def _alice_with_a_run(make_user):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    # Her quota admits no run: it stays queued, its page rendered from stored rows only.
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="gsm8k-slice", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="a-model-with-a-rather-long-name-to-fill-the-select",
                                      path="/tmp/m")
    run, _token = run_create(owner=alice, name="a-run", dataset=dataset, model=model, config={}, gpus=0)
    return alice, run


def test_the_links_bar_sticks_and_lands_each_card_below_it(page_as, make_user, shot):
    alice, run = _alice_with_a_run(make_user)
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    # The metrics card is on the first screen (it used to sit under the sharing and alerts forms).
    assert page.locator("#charts-card").bounding_box()["y"] < page.viewport_size["height"]
    for target in ("#samples-card", "#run-sharing", "#run-config"):
        page.click(f"#run-jump a[href='{target}']")
        page.wait_for_function(f"Math.abs(document.querySelector('{target}').getBoundingClientRect().top"
                               " - document.getElementById('run-jump').getBoundingClientRect().bottom) < 40"
                               " || window.innerHeight + window.scrollY >= document.body.scrollHeight - 1")
        bar = page.locator("#run-jump").bounding_box()
        card = page.locator(target).bounding_box()
        assert page.evaluate("window.scrollY") > 0, target
        assert abs(bar["y"]) <= 1, (target, bar)  # stuck to the top of the window
        assert card["y"] >= bar["y"] + bar["height"] - 1, (target, bar, card)  # not hidden under it
    shot(page, "run-jump-links")


def test_each_runs_filter_label_sits_on_its_fields_line(page_as, make_user, shot):
    alice, _run = _alice_with_a_run(make_user)
    page = page_as(alice)
    for width in (1400, 1000, 760):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto("/runs/")
        for field in ("id_q", "id_status", "id_tag", "id_model", "id_dataset", "id_project", "id_scope"):
            label = page.locator(f"#run-filters label[for={field}]").bounding_box()
            box = page.locator(f"#{field}").bounding_box()
            assert abs((label["y"] + label["height"] / 2) - (box["y"] + box["height"] / 2)) < box["height"] / 2, (
                width, field, label, box)
            assert label["x"] < box["x"], (width, field, label, box)
    shot(page, "runs-filters-narrow")


def test_on_a_phone_the_links_bar_is_one_line(page_as, make_user):
    alice, run = _alice_with_a_run(make_user)
    page = page_as(alice)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/runs/{run.pk}/")
    bar = page.locator("#run-jump").bounding_box()
    link = page.locator("#run-jump a").first.bounding_box()
    assert bar["height"] < 2.5 * link["height"], (bar, link)  # one row of links (it was three)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # it scrolls itself, not the page
