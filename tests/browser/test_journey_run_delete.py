"""Journey: the owner of a finished run deletes it from its page: Delete asks to confirm (the page's
confirm dialog), then the runs list says it was deleted and the run is gone (a real Chromium, the real
server). A reader of the same run sees no Delete button."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_owner_deletes_a_finished_run_from_its_page(page_as, make_user):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create, run_share

    alice, bob = make_user("alice"), make_user("bob")
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="to-delete", dataset=dataset, model=model, config={}, gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STOPPED)
    run_share(run=run, by=alice, add=["bob"])

    reader = page_as(bob)
    reader.goto(f"/runs/{run.pk}/")
    assert reader.locator("#run-controls").get_by_role("button", name="Delete").count() == 0

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.locator("#run-controls").get_by_role("button", name="Delete").click()
    page.wait_for_url("**/runs/")
    assert page.dialogs and page.dialogs[0][0] == "confirm" and "Delete run “to-delete”" in page.dialogs[0][1]
    assert f"Run “to-delete” (#{run.pk}) was deleted." in page.locator("ul.messages").inner_text()
    assert not Run.objects.filter(pk=run.pk).exists()


def test_the_owner_deletes_picked_runs_from_the_runs_list(page_as, make_user):
    """Delete selected: offered while every picked run is the user's (a run shared with them turns it
    off), then the confirm page, whose button deletes them all."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create, run_share

    alice, bob = make_user("alice"), make_user("bob")
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    runs = {}
    for owner, name in ((alice, "old-1"), (alice, "old-2"), (alice, "keep"), (bob, "bobs")):
        runs[name], _token = run_create(owner=owner, name=name, dataset=dataset, model=model, config={}, gpus=0)
        Run.objects.filter(pk=runs[name].pk).update(status=RunStatus.STOPPED)
    run_share(run=runs["bobs"], by=bob, add=["alice"])

    page = page_as(alice)
    page.goto("/")
    delete = page.locator("#delete-button")
    assert delete.is_disabled()
    page.check(f"input[name=ids][value='{runs['bobs'].pk}']")
    assert delete.is_disabled() and "read-only" in page.locator("#compare-count").inner_text()
    page.uncheck(f"input[name=ids][value='{runs['bobs'].pk}']")
    for name in ("old-1", "old-2"):
        page.check(f"input[name=ids][value='{runs[name].pk}']")
    assert delete.is_enabled()
    delete.click()
    page.wait_for_url("**/runs/delete/?ids=*")
    assert page.locator("#bulk-delete-runs tbody tr").count() == 2
    page.get_by_role("button", name="Delete 2 runs").click()
    page.wait_for_url("**/runs/")
    assert "2 runs deleted" in page.locator("ul.messages").inner_text()
    assert not Run.objects.filter(pk__in=[runs["old-1"].pk, runs["old-2"].pk]).exists()
    assert Run.objects.filter(pk__in=[runs["keep"].pk, runs["bobs"].pk]).count() == 2
