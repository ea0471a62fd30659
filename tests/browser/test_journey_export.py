"""Journey of issue 19 (item 4) in a real Chromium against the running platform (Daphne, the real
Celery worker): the owner of a finished LoRA run presses "Export step 1" on its page; the worker
exports the checkpoint and registers it; the page lists it with its catalog model and a download link;
the archive, streamed by Daphne, untars to the export's files; a user the run is shared with sees the
export and its link, with no button to start or delete one; the owner deletes it (confirmed); the
page breaks no CSP rule throughout.

The run never trains here: its two LoRA checkpoints are made by the trainer's own worker in this
process, in a folder both server processes read (the run's frozen `trainer.default_local_dir`).
"""
from __future__ import annotations

import io
import json
import re
import tarfile

import pytest

from tests.browser.test_csp import _violations, _watch

pytestmark = [pytest.mark.django_db(transaction=True)]


def _lora_run(owner, model, folder):
    """A succeeded run of 2 steps whose folder holds two committed LoRA checkpoints."""
    from rlstudio.catalog.models import Dataset
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create
    from tests.trainer.parallel.test_lora_fsdp import cfg_dict, step
    from trainer import checkpoint as ckpt
    from trainer.parallel.group import LocalWorkerGroup
    from trainer.tasks import arith

    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("train", 16, seed=0)))
    dataset = Dataset.objects.create(owner=owner, name="arith-train", file_path=str(train), sha256="2" * 64,
                                     status="ready")
    run, _token = run_create(owner=owner, name="lora-arith", dataset=dataset, model=model,
                             config={"trainer": {"total_training_steps": 2}}, gpus=0)
    d = cfg_dict(model.path, train)
    d["trainer"]["default_local_dir"] = str(folder / "runs" / str(run.pk))  # as freeze_spec writes it
    group = LocalWorkerGroup(d)
    try:
        for n in (1, 2):
            step(group, n)
            ckpt.save_checkpoint(folder / "runs" / str(run.pk), n, loader_state={}, trainer_state={}, config=d,
                                 write_actor=lambda p: group.call("save", path=str(p)))
    finally:
        group.shutdown()
    Run.objects.filter(pk=run.pk).update(status="succeeded", step=2, total_steps=2, config=d,
                                         ray_submission_id=f"raysubmit_export_{run.pk}")
    return Run.objects.get(pk=run.pk)


def test_export_a_checkpoint_from_the_run_page_and_download_it(page_as, make_user, register_model, ui,
                                                               tmp_path_factory):
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.exports.models import Export
    from rlstudio.exports.services import export_folder
    from rlstudio.runs.services import run_share

    alice, bob = make_user("alice"), make_user("bob")
    run = _lora_run(alice, register_model(alice, "tiny-base"), tmp_path_factory.mktemp("export-journey"))
    page = page_as(alice, bypass_csp=False)
    console = _watch(page)
    page.goto(f"/runs/{run.pk}/")
    card = page.locator("#exports-card")
    assert "No export yet." in card.inner_text()
    card.get_by_role("button", name="Export step 1").click()
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/#exports-card$"))
    assert "Export of step 1 queued." in page.content()

    def done():
        export = Export.objects.filter(run=run, step=1).first()
        return export if export is not None and export.status in ("succeeded", "failed") else None

    export = ui.wait_for(done, timeout=240, what="the export task")
    assert export.status == "succeeded", export.error
    page.goto(f"/runs/{run.pk}/")  # a reload (the same URL with the #fragment would not be one)
    row = page.locator("#export-list tr[data-step='1']")
    assert "succeeded" in row.inner_text() and "LoRA" in row.inner_text()
    assert f"lora-arith (run {run.pk}, step 1)" in row.inner_text()  # its catalog model
    card.scroll_into_view_if_needed()
    ui.shot(page, "17-run-exports")
    assert card.get_by_role("button", name="Export step 1").is_disabled()

    with page.expect_download() as info:
        row.get_by_role("link", name=".tar.gz").click()
    download = info.value
    assert download.suggested_filename == f"run{run.pk}-step1.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(open(download.path(), "rb").read()), mode="r:gz") as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    folder = export_folder(run, 1)
    want = {f"run{run.pk}-step1/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}
    assert got == want and f"run{run.pk}-step1/lora_adapter/adapter_model.safetensors" in got
    seen = _violations(page, console)
    assert seen == [], "\n".join(seen)

    # Shared with bob: he sees the export and its link, and no button to start one.
    run_share(run=run, by=alice, add=["bob"])
    other = page_as(bob)
    other.goto(f"/runs/{run.pk}/")
    card = other.locator("#exports-card")
    assert "succeeded" in card.inner_text() and card.get_by_role("link", name=".tar.gz").count() == 1
    assert card.get_by_role("button").count() == 0

    # The owner deletes it (a confirmation first): the folder and the catalog model go, the checkpoint stays.
    page.goto(f"/runs/{run.pk}/")
    page.locator("#export-list tr[data-step='1']").get_by_role("button", name="delete").click()
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/#exports-card$"))
    assert page.dialogs and page.dialogs[-1][0] == "confirm" and "step 1" in page.dialogs[-1][1]
    assert "Export of step 1 deleted." in page.content() and not Export.objects.filter(run=run).exists()
    assert not folder.exists() and (folder.parent.parent / "global_step_1").is_dir()
    assert not ModelAsset.objects.filter(source_run=run, name__endswith="step 1)").exists()
    seen = _violations(page, console)
    assert seen == [], "\n".join(seen)
