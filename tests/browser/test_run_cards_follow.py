"""The run page's Exports and Evaluations cards follow what is under way while the page is open, each
through the shared loop of static/js/fragment_poller.js: an export and an evaluation that finish show
finished without a reload (the evaluation's figures drawn), and once nothing is under way (the run itself
ended) the page stops fetching the cards' fragments."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_an_export_and_an_evaluation_finish_on_the_open_run_page_then_polling_stops(page_as, make_user):
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.evaluations.services import DEFAULT_SAMPLING
    from rlstudio.exports.models import Export, ExportStatus
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64,
                                     status="ready")
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="cards-run", dataset=dataset, model=model, config={}, gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=5, total_steps=5)  # not live
    now = timezone.now()
    export = Export.objects.create(run=run, owner=alice, step=5, status=ExportStatus.RUNNING, started=now)
    # Admitted just now, its job not submitted yet: the reconcile leaves it be for RLSTUDIO_SUBMIT_TIMEOUT_S.
    ev = Evaluation.objects.create(run=run, owner=alice, dataset=dataset, checkpoints=[5], include_base=True, k=2,
                                   max_prompts=4, sampling=DEFAULT_SAMPLING, status=EvaluationStatus.RUNNING,
                                   started=now)
    page = page_as(alice)
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if r.url.endswith("/card/") else None)
    page.goto(f"/runs/{run.pk}/")
    export_row, eval_row = "#export-list tr[data-step='5']", f"#eval-list tr[data-id='{ev.pk}']"
    assert "running" in page.inner_text(export_row) and page.get_attribute("#exports-card", "data-active") == "1"
    assert page.get_attribute(eval_row, "data-active") == "1" and page.locator("#eval-curve").count() == 0
    page.evaluate("window.__noReload = 1")  # gone if the page reloads

    Export.objects.filter(pk=export.pk).update(status=ExportStatus.SUCCEEDED, finished=timezone.now(),
                                               size_bytes=2048)
    figures = [{"key": key, "step": step, "mean_at_k": 0.25 * (1 + step // 5), "pass_at_k": 0.5, "maj_at_k": 0.25,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0} for key, step in (("base", 0), ("5", 5))]
    figures[0]["base"] = True
    Evaluation.objects.filter(pk=ev.pk).update(status=EvaluationStatus.SUCCEEDED, finished=timezone.now(),
                                               results={"checkpoints": figures, "prompts": []})

    page.wait_for_function(f"(document.querySelector(\"{eval_row}\") || {{}}).dataset?.active === '0'",
                           timeout=30_000)
    page.wait_for_selector("#eval-curve .main-svg")
    assert page.locator("#eval-figures tbody tr").all_inner_texts()[1].startswith("step 5")
    page.wait_for_function(f"(document.querySelector(\"{export_row}\") || {{}}).textContent?.includes('succeeded')",
                           timeout=30_000)
    assert page.get_attribute("#exports-card", "data-active") == "0" and ".tar.gz" in page.inner_text(export_row)
    assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    assert any("/exports/card/" in u for u in fetched) and any("/evaluations/card/" in u for u in fetched)

    # Nothing is under way any more: the cards are not fetched again (they were every 5 and 10 s).
    seen = len(fetched)
    page.wait_for_timeout(12_000)
    assert fetched[seen:] == [], fetched[seen:]
