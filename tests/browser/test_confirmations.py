"""Every destructive button asks first (base.html's delegated form[data-confirm]): Cancel leaves the
thing as it was, OK goes through. Checked on a dataset's Delete and a finished sweep's Delete; the
run page's stop and delete, the export's delete and the quota admin's cancel ask through the same
handler (their journeys check the dialog)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_delete_dataset_and_sweep_ask_first_and_cancel_keeps_them(page_as, make_user):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create
    from rlstudio.sweeps.models import Sweep, SweepRun

    alice = make_user("alice")
    doomed = Dataset.objects.create(owner=alice, name='old "rows"', file_path="/tmp/old.jsonl", sha256="1" * 64,
                                    status="invalid")
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    sweep = Sweep.objects.create(owner=alice, name="grid", dataset=dataset, model=model, axes=[])
    run = run_create(owner=alice, name="grid/x=1", dataset=dataset, model=model, config={}, gpus=0)[0]
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    SweepRun.objects.create(sweep=sweep, run=run, index=0, params={})

    page = page_as(alice)
    page.answer_dialogs = False
    page.goto(f"/datasets/{doomed.pk}/")
    page.click("text=Delete dataset")
    assert page.dialogs[-1] == ("confirm", "Delete dataset “old \"rows\"”? Its stored rows go, and its file unless "
                                           "another dataset shares it; this cannot be undone.")
    assert page.url.endswith(f"/datasets/{doomed.pk}/") and Dataset.objects.filter(pk=doomed.pk).exists()
    page.goto(f"/sweeps/{sweep.pk}/")
    page.click("#sweep-delete button")
    assert "Delete sweep “grid”?" in page.dialogs[-1][1] and Sweep.objects.filter(pk=sweep.pk).exists()

    page.answer_dialogs = True
    page.click("#sweep-delete button")
    page.wait_for_url("**/sweeps/")
    expect(page.locator("body")).to_contain_text("its 1 run(s) stay on the runs list")
    assert not Sweep.objects.filter(pk=sweep.pk).exists() and Run.objects.filter(pk=run.pk).exists()
    page.goto(f"/datasets/{doomed.pk}/")
    page.click("text=Delete dataset")
    page.wait_for_url("**/datasets/")
    assert not Dataset.objects.filter(pk=doomed.pk).exists()
