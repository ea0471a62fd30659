"""Journey 4: an admin sets a user's quota to 0 GPUs / 1 run in the admin site; that user's first launch
runs, the second shows "queued" with its reason on its page and on /runs/quota/ (real Chromium, the
real admin, the real admission on the running platform)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_admin_quota_of_one_run_queues_the_second_launch_with_its_reason(page_as, make_user, register_model,
                                                                        ui, gsm8k_test_file, tmp_path):
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run

    root, bob = make_user("root", staff=True), make_user("bob")
    register_model(bob, "tiny-smoke")
    small = tmp_path / "gsm8k-8.jsonl"
    small.write_text("".join(gsm8k_test_file.read_text(encoding="utf-8").splitlines(keepends=True)[:8]))

    admin = page_as(root)
    admin.goto("/admin/quotas/gpuquota/add/")
    # The user is picked by name (the admin's autocomplete), not typed as a raw id.
    admin.click("#id_user + .select2 .select2-selection")
    admin.fill(".select2-search__field", "bo")
    admin.click(".select2-results__option:text-is('bob')")
    admin.fill("#id_max_gpus", "0")
    admin.fill("#id_max_concurrent_runs", "1")
    admin.click("input[name=_save]")
    admin.wait_for_url("**/admin/quotas/gpuquota/")
    assert "was added successfully" in admin.locator("ul.messagelist").inner_text()
    quota = GpuQuota.objects.get(user=bob)
    assert (quota.max_gpus, quota.max_concurrent_runs) == (0, 1)
    assert AuditEvent.objects.filter(action="quota.create", actor=root).exists()
    ui.shot(admin, "09-admin-quota")

    page = page_as(bob)
    ui.upload_dataset(page, small, name="gsm8k-8")
    first = ui.launch_run(page, name="first", dataset="gsm8k-8", model="tiny-smoke", steps=100, save_freq=-1,
                          overrides="data.max_prompt_length=1024")
    assert Run.objects.get(pk=first).status in ("submitting", "running")
    second = ui.launch_run(page, name="second", dataset="gsm8k-8", model="tiny-smoke", steps=2)
    run = Run.objects.get(pk=second)
    assert run.status == "queued" and "1 of your 1 concurrent run" in run.queue_reason, run.queue_reason
    assert page.locator("#run-controls .badge").inner_text().strip().lower() == "queued"
    note = page.locator("#run-controls .queue-note").inner_text()
    assert note.startswith("Queued, position 1") and run.queue_reason in note, note
    ui.shot(page, "10-run-queued")
    page.goto("/runs/quota/")
    fields = page.locator("dl.fields").inner_text()
    assert "0 of 0" in fields and "your own quota" in fields, fields
    row = page.locator("table tbody tr").first.locator("td").all_inner_texts()
    assert row[0] == "1" and row[1] == f"second #{run.pk}" and run.queue_reason in row[2], row
    ui.shot(page, "11-quota-page")
