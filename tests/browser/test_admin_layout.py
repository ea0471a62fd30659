"""The operator's Django admin pages keep their layout at 1280x800, measured in a real Chromium.

An operator trial found three broken layouts: the admin index's link to the staff quota page set one
letter per line (Django's dashboard styles squeezed its cell), the GPU quota list wider than the page
with its right-hand columns cut off, and the team form's "Members:" label on the right of its picker
(the picker's script put the picker before the label); and, with Django's navigation sidebar, the
runs' and models' lists ran past their box too. Each test measures what the trial saw.
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def _rect(page, selector: str) -> dict:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not on the page"
    return box


def test_the_index_link_to_the_quota_page_is_one_line(page_as, make_user, shot):
    page = page_as(make_user("root", staff=True))
    page.goto("/admin/")
    link = page.locator("#quota-page-link a")
    assert link.inner_text() == "Quotas and the queue"
    # An inline link has one client rectangle per line it spans (19 when it broke letter by letter).
    lines = link.evaluate("(a) => a.getClientRects().length")
    box = _rect(page, "#quota-page-link a")
    shot(page, "admin-index")
    assert lines == 1, f"the link spans {lines} lines ({box})"
    assert box["width"] > 3 * box["height"], box
    # The description beside it stays inside the module (it wraps instead of widening the table).
    module = _rect(page, "#quota-page-link")
    description = _rect(page, "#quota-page-link td")
    assert description["x"] + description["width"] <= module["x"] + module["width"] + 1


def test_the_gpu_quota_list_fits_the_window(page_as, make_user, shot):
    from rlstudio.quotas.models import GpuQuota

    root = make_user("root", staff=True)
    for name in ("alice", "bob"):
        GpuQuota.objects.create(user=make_user(name), max_gpus=2, gpu_hours_per_month=100,
                                max_concurrent_runs=2, max_queued_runs=5, dataset_storage_gb=20)
    page = page_as(root)
    page.goto("/admin/quotas/gpuquota/")
    shot(page, "admin-gpu-quotas")
    width = page.viewport_size["width"]
    results = page.locator("#changelist .results")
    scroll, client = results.evaluate("(el) => [el.scrollWidth, el.clientWidth]")
    assert scroll <= client, f"the list is {scroll} px wide in a {client} px box: columns cut off"
    last = _rect(page, "#result_list thead th:last-child")
    assert last["x"] + last["width"] <= width, last
    assert "updated" in page.locator("#result_list thead th:last-child").inner_text().lower()
    # Each row's link (whose quota it is) is one line, not the quota's description wrapped tall.
    for row in page.locator("#result_list tbody tr").all():
        link = row.locator("th a, td a").first
        assert link.evaluate("(a) => a.getClientRects().length") == 1, link.inner_text()
    assert sorted(page.locator("#result_list tbody tr th a").all_inner_texts()) == ["(default)", "alice", "bob"]


def test_the_runs_and_models_lists_fit_beside_their_filters(page_as, make_user, shot):
    """With Django's navigation sidebar (275 px) and a list's filters, a list of ten columns had
    631 px and ran past it; the admin shows no sidebar, and both lists fit with their filters."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run

    root = make_user("root", staff=True)
    alice = make_user("alice")
    model = ModelAsset.objects.create(owner=alice, name="qwen2.5-0.5b-instruct-long-name", path="/models/qwen")
    dataset = Dataset.objects.create(owner=alice, name="gsm8k-train", file_path="/data/gsm8k.jsonl",
                                     sha256="a" * 64)
    for i in range(3):
        Run.objects.create(owner=alice, name=f"grpo-gsm8k-qwen-run-{i}-with-long-name", dataset=dataset,
                           model=model, status="succeeded")
    page = page_as(root)
    for url, name in (("/admin/runs/run/", "admin-runs"), ("/admin/catalog/modelasset/", "admin-models")):
        page.goto(url)
        shot(page, name)
        assert page.locator("#changelist-filter").is_visible()
        scroll, client = page.locator("#changelist .results").evaluate("(el) => [el.scrollWidth, el.clientWidth]")
        assert scroll <= client, f"{url}: the list is {scroll} px wide in a {client} px box"
        last = _rect(page, "#result_list thead th:last-child")
        filters = _rect(page, "#changelist-filter")
        assert last["x"] + last["width"] <= filters["x"], (url, last, filters)


def _label_left_of_picker(page, field: str) -> None:
    page.wait_for_selector(f".field-{field} .selector")
    label = _rect(page, f"label[for=id_{field}]")
    picker = _rect(page, f".field-{field} .selector")
    assert label["x"] + label["width"] <= picker["x"], (label, picker)
    assert abs(label["y"] - picker["y"]) < 40, (label, picker)  # on the same row, not above or below


def test_the_team_form_labels_its_members_picker_on_the_left(page_as, make_user, shot):
    from rlstudio.accounts.models import Team

    root = make_user("root", staff=True)
    alice = make_user("alice")
    page = page_as(root)
    page.goto("/admin/accounts/team/add/")
    _label_left_of_picker(page, "members")
    shot(page, "admin-team-add")

    team = Team.objects.create(name="rl-team")
    team.user_set.add(alice)
    page.goto(f"/admin/accounts/team/{team.pk}/change/")
    _label_left_of_picker(page, "members")
    assert page.locator("#id_members_to option").all_inner_texts() == ["alice"]
    # The user's page has the same kind of picker, for their teams.
    page.goto(f"/admin/auth/user/{alice.pk}/change/")
    _label_left_of_picker(page, "groups")


def test_the_reward_function_form_starts_with_an_empty_sample_rows_box(page_as, make_user):
    page = page_as(make_user("root", staff=True))
    page.goto("/admin/registry/rewardfunction/add/")
    assert page.input_value("#id_sample_rows") == ""  # was "null"
    assert "empty: a GSM8K-style" in page.locator(".field-sample_rows").inner_text()
