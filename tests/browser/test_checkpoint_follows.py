"""The run page's Checkpoint follows the run while the page is open: the controls card, fetched again
every few seconds while the run is live, carries the current checkpoint and run_controls.js copies it
into the details (a stop that saved one showed the previous checkpoint until a reload)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_checkpoint_saved_while_the_page_is_open_shows_without_a_reload(page_as, make_user):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_create

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="ckpt-run", dataset=dataset, model=model, config={}, gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, checkpoint_path="/srv/runs/1/global_step_5")
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    field = page.locator("dl.fields code[data-run-field=checkpoint]")
    assert field.inner_text() == "/srv/runs/1/global_step_5"
    Run.objects.filter(pk=run.pk).update(checkpoint_path="/srv/runs/1/global_step_10")
    page.wait_for_function("""() => document.querySelector("dl.fields code[data-run-field=checkpoint]")
        .textContent === "/srv/runs/1/global_step_10" """, timeout=15_000)
    assert field.inner_text() == "/srv/runs/1/global_step_10"
