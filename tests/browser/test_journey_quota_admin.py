"""Journey: staff run quotas and the queue from their own page (/quotas/admin/), under the real
Content-Security-Policy, in Chromium on the running platform (the reconcile admits and writes queue
reasons meanwhile): the nav link, the cluster, the usage chart, the queue with reasons; a queued run
moved to the front, a quota changed through the form with the user picked by name, a queued run
cancelled; the page shows each change and the audit log has it.

Before this page the only tool was Django's raw forms: the user a raw id box, no queue, no chart.
"""
from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def _queued_run(owner, name: str):
    """A queued run made by the service (the quotas below keep it queued: the reconcile runs)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.runs.services import run_create

    dataset = Dataset.objects.create(owner=owner, name=f"{name}-data", file_path=f"/tmp/{name}.jsonl",
                                     sha256="ab" * 32)
    model = ModelAsset.objects.create(owner=owner, name=f"{name}-model", path=f"/models/{name}")
    run, _token = run_create(owner=owner, name=name, dataset=dataset, model=model,
                             config={"trainer": {"total_steps": 2}}, gpus=0)
    return run


def _queue_rows(page) -> list[list[str]]:
    return [row.locator("td").all_inner_texts() for row in page.locator("#queue tbody tr").all()]


def test_staff_move_a_queued_run_change_a_quota_by_name_and_cancel(page_as, make_user, ui):
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run

    root, bob, carol = make_user("root", staff=True), make_user("bob"), make_user("carol")
    for user in (bob, carol):  # 0 concurrent runs: their runs wait, whatever the reconcile does
        GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    first = _queued_run(carol, "carol-first")
    later = _queued_run(bob, "bob-later")

    page = page_as(root, bypass_csp=False)
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text)
            if "Content Security Policy" in m.text or m.text.startswith("Refused to") else None)
    page.click("header nav a:text-is('Quotas')")
    page.wait_for_url("**/quotas/admin/")
    assert page.locator("h1").inner_text() == "Quotas and the queue"
    assert page.title().startswith("Quotas and queue")

    # The cluster: Ray's GPUs, or "Ray unreachable" with why (the session's server is not given the
    # test Ray head's address); then the chart drawn by the static script.
    gpus = page.locator("#cluster-gpus").inner_text()
    assert re.fullmatch(r"\d+(\.\d+)?", gpus) or re.match(r"Ray unreachable \(.+\)", gpus), gpus
    assert page.locator("#cluster-held").inner_text().startswith("0")
    page.wait_for_selector("#usage-chart .main-svg")
    assert page.locator("#usage-chart .barlayer .trace").count() == 3  # GPU-hours, runs, queued
    assert page.locator("#usage-chart .legendtext").all_text_contents() == ["used", "quota"]
    users = page.locator("#users tbody tr").evaluate_all("rows => rows.map(r => r.dataset.username)")
    assert users == ["bob", "carol", "root"]

    # The queue in admission order, each with why it waits.
    rows = _queue_rows(page)
    # columns: position, kind, job, owner, GPUs, queued since, why it waits, actions
    assert [r[0] for r in rows] == ["1", "2"] and [r[3] for r in rows] == ["carol", "bob"], rows
    assert [r[1] for r in rows] == ["run", "run"] and all(r[6] for r in rows), rows

    # Move bob's later run to the front.
    with page.expect_navigation():
        page.locator(f"#queue tr[data-run-id='{later.pk}'] button:text-is('To the front')").click()
    assert "moved to the front of the queue" in page.locator("ul.messages").inner_text()
    rows = _queue_rows(page)
    assert [(r[0], r[3]) for r in rows] == [("1", "bob"), ("2", "carol")], rows
    assert "moved up" in rows[0][2]
    assert Run.objects.get(pk=later.pk).queue_priority > Run.objects.get(pk=first.pk).queue_priority
    assert AuditEvent.objects.filter(action="run.queue_move", actor=root, object_id=str(later.pk)).exists()

    # Change bob's quota: pick him by name; the form fills in his limits now; save two new ones.
    page.select_option("#id_user", label="bob")
    assert page.input_value("#id_max_concurrent_runs") == "0"
    assert page.input_value("#id_max_queued_runs") == str(GpuQuota.objects.get(user=bob).max_queued_runs)
    page.fill("#id_gpu_hours_per_month", "250")
    page.fill("#id_max_queued_runs", "9")
    page.click("#quota-form button[type=submit]")
    page.wait_for_url("**/quotas/admin/?user=bob")
    assert "Quota of bob saved" in page.locator("ul.messages").inner_text()
    bob_row = page.locator("#users tr[data-username='bob']").inner_text()
    assert "0.00 of 250" in bob_row and "1 of 9" in bob_row, bob_row
    chart = json.loads(page.locator("#quota-admin-data").text_content())
    assert next(u for u in chart["users"] if u["username"] == "bob")["gpu_hours_per_month"] == 250
    quota = GpuQuota.objects.get(user=bob)
    assert (quota.gpu_hours_per_month, quota.max_queued_runs, quota.max_concurrent_runs) == (250, 9, 0)
    change = AuditEvent.objects.get(action="quota.change", actor=root)
    assert change.data["changed"]["max_queued_runs"][1] == 9
    ui.shot(page, "quota-admin-page")

    # Cancel carol's queued run (after a confirm).
    with page.expect_navigation():
        page.locator(f"#queue tr[data-run-id='{first.pk}'] button:text-is('Cancel')").click()
    assert page.dialogs and page.dialogs[-1][0] == "confirm" and "carol-first" in page.dialogs[-1][1]
    assert f"Run #{first.pk} (carol-first) cancelled." in page.locator("ul.messages").inner_text()
    assert [r[3] for r in _queue_rows(page)] == ["bob"]
    assert Run.objects.get(pk=first.pk).status == "stopped"
    assert AuditEvent.objects.filter(action="run.queue_cancel", actor=root).exists()
    assert refused == [], refused
