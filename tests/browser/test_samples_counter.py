"""The run page's samples counter, written by run_live.js from the samples API's page, prints its
numbers with thousands separators ("51–100 of 1,234"), as the server-rendered counts do (intcomma).
The run never trains (its owner's quota admits none); its 1,234 samples are stored rows."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_samples_counter_has_separators(page_as, make_user):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import Sample

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="many-samples", dataset=dataset, model=model, config={}, gpus=0)
    Sample.objects.bulk_create(
        Sample(run=run, seq=i + 1, step=1 + i // 8, uid=f"u{i // 8}", index=i % 8, reward=float(i % 2),
               response_length=1000 + i, transcript=[{"role": "user", "content": "q"}])
        for i in range(1234))

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.click("#samples-next")
    expect(page.locator("#samples-count")).to_have_text("51–100 of 1,234")
    expect(page.locator("#samples-prev")).to_be_enabled()
    page.click("#samples-prev")
    expect(page.locator("#samples-count")).to_have_text("1–50 of 1,234")
