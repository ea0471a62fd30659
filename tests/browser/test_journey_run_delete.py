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
