"""Run again with changes in a real Chromium: from a run's page, the link opens the launch form filled
in from that run (its name "(again)", dataset, model, retention and learning rate); changing the
learning rate and launching makes a new run of the owner's with the changed value, the rest kept.
Alice's quota admits nothing, so the runs stay queued and no trainer starts."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

LR = "actor_rollout_ref.actor.optim.lr"


def test_run_again_from_the_run_page_with_a_changed_learning_rate(page_as, make_user):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_new
    from rlstudio.telemetry.models import RunRetention

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="rows", file_path="/tmp/rows.jsonl", sha256="ab" * 32,
                                     status="ready")
    model = ModelAsset.objects.create(owner=alice, name="policy-1", path="/models/policy-1", tokenizer_ok=True)
    source = run_new(owner=alice, name="probe", dataset=dataset, model=model, preset="cpu_smoke",
                     overrides={LR: 3e-6}, retention={"mode": "every_kth_step", "k": 4})

    page = page_as(alice)
    page.goto(f"/runs/{source.pk}/")
    with page.expect_navigation():
        page.click("#run-again")
    assert f"/runs/new/?from={source.pk}" in page.url
    expect(page.locator("#id_name")).to_have_value("probe (again)")
    expect(page.locator("#id_dataset")).to_have_value(str(dataset.pk))
    expect(page.locator("#id_model")).to_have_value(str(model.pk))
    expect(page.locator("#id_retention_mode")).to_have_value("every_kth_step")
    expect(page.locator("#id_retention_k")).to_have_value("4")
    assert float(page.locator("#id_learning_rate").input_value()) == 3e-6
    assert "/tmp/rows.jsonl" not in page.locator("#id_config_yaml").input_value()

    page.fill("#id_learning_rate", "7e-6")
    with page.expect_navigation():
        page.click("form.run-form button[type=submit]")
    again = Run.objects.get(name="probe (again)")
    assert page.url.rstrip("/").endswith(f"/runs/{again.pk}"), page.url
    assert again.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 7e-6
    assert source.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert again.owner_id == alice.pk and again.dataset_id == dataset.pk and again.parent_id is None
    assert (RunRetention.objects.get(run=again).mode, RunRetention.objects.get(run=again).k) == ("every_kth_step", 4)
