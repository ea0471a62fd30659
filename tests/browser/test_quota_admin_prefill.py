"""The staff quota page's form: picking a user fills in every limit that applies to them now, their
dataset storage too (it stayed empty, which saves as "unchanged" but reads as no limit), from their
own quota or the default; the storage field says what empty and 0 mean."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_picking_a_user_fills_in_their_dataset_storage(page_as, make_user):
    from rlstudio.quotas.models import GpuQuota, default_dataset_storage_gb

    root = make_user("root", staff=True)
    alice = make_user("alice")
    make_user("bob")  # no quota of his own: the default's
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=5, max_concurrent_runs=1,
                            max_queued_runs=3, dataset_storage_gb=7.5)
    page = page_as(root)
    page.goto("/quotas/admin/")
    page.select_option("#id_user", label="alice")
    assert page.input_value("#id_max_queued_runs") == "3"
    assert page.input_value("#id_dataset_storage_gb") == "7.5"
    page.select_option("#id_user", label="bob")
    assert float(page.input_value("#id_dataset_storage_gb")) == default_dataset_storage_gb()
    assert "empty = unchanged" in page.locator("#quota-form").inner_text()
