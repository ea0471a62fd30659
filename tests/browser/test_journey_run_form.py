"""The new-run form in a real Chromium (issue 15, item 8): a preset made for 8 GPUs, picked with 0 GPUs,
is adapted for the CPU and says so in the preview; two bad overrides show two errors at once (live in
the preview, and on the overrides field after Launch); the memory table shows; then, without a single
override, the run launches and its trainer starts on the CPU with a tiny model."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

BAD = "actor_rollout_ref.rollout.temperature=99\ntrainer.default_local_dir=/etc"


def test_gpu_preset_on_the_cpu_preview_errors_memory_and_launch(page_as, make_user, register_model, ui,
                                                                  gsm8k_test_file):
    from playwright.sync_api import expect

    from rlstudio.runs.models import Run

    alice = make_user("alice")
    register_model(alice, "tiny-smoke")
    page = page_as(alice)
    # The whole test split: the preset's batch is 256 prompts, and the trainer refuses fewer rows.
    ui.upload_dataset(page, gsm8k_test_file, name="gsm8k-test", timeout_ms=150_000)

    page.goto("/runs/new/")
    page.fill("#id_name", "gsm8k-on-cpu")
    page.select_option("#id_dataset", label="gsm8k-test")
    ui.select_model(page, "tiny-smoke")
    page.select_option("#id_preset", "gsm8k_multiturn_grpo")
    page.fill("#id_gpus", "0")

    adapted = page.locator("#preview-adapted")
    expect(adapted).to_contain_text("adapted for CPU:")
    expect(adapted).to_contain_text("actor_rollout_ref.rollout.name sglang \u2192 hf")
    expect(adapted).to_contain_text("trainer.n_gpus_per_node 8 \u2192 1")
    line = page.locator("#preview-yaml span.mark-adapted[data-key='actor_rollout_ref.rollout.name']")
    expect(line).to_have_text(re.compile(r"^\s+name: hf$"))
    assert page.locator("#preview-yaml span.mark-yours").count() == 0  # nothing typed yet
    table = page.locator("#memory-table")
    expect(table).to_be_visible()
    names = [t.strip() for t in table.locator("tr td:first-child").all_inner_texts()]
    assert names[:4] == ["actor weights", "actor gradients", "optimizer states", "reference weights"], names
    assert "rollout KV cache" in names and names[-1].startswith("peak ("), names
    assert page.locator("#preview-errors li").count() == 0
    assert page.locator("#lora-saving").count() == 0  # full fine-tuning: nothing to compare with
    # one checkpoint's disk under the table, against the operator's budget per run (200 GiB)
    expect(page.locator("#checkpoint-size")).to_contain_text("One checkpoint: about ")
    expect(page.locator("#checkpoint-size")).to_contain_text("of this deployment's 200.00 GiB per run")
    page.evaluate("document.getElementById('run-preview').scrollIntoView()")
    ui.shot(page, "12-run-form-preview")

    # LoRA: the table shows the same config's full fine-tuning peak and the saving per device.
    page.fill("#id_overrides", "actor_rollout_ref.model.lora_rank=8")
    saving = page.locator("#lora-saving")
    expect(saving).to_contain_text("full fine-tuning (LoRA off)")
    expect(saving).to_contain_text(re.compile(r"LoRA rank 8 (saves|needs) (< )?\d+\.\d\d GiB (more )?per device"))
    page.fill("#id_overrides", "")
    expect(page.locator("#lora-saving")).to_have_count(0)

    # Two bad overrides: both errors at once, live under the field and in the preview ...
    page.fill("#id_overrides", BAD)
    expect(page.locator("#preview-errors li")).to_have_count(2)
    live = page.locator("[data-live-for=overrides] .live-item")
    expect(live).to_have_count(2)
    assert "rollout.temperature: must be <= 10, got 99" in live.nth(0).inner_text()
    assert "trainer.default_local_dir: set by the platform" in live.nth(1).inner_text()
    # ... and after Launch, on the field, from the server (nothing launched)
    with page.expect_navigation():
        page.click("form.run-form button[type=submit]")
    server = page.locator("p[data-field=overrides] > span.field-error:not(.live)")
    assert server.count() == 2, server.all_inner_texts()
    assert "temperature" in server.nth(0).inner_text() and "default_local_dir" in server.nth(1).inner_text()
    assert Run.objects.count() == 0
    # the page's live preview finds the same two: each is said once under the field, not twice
    page.wait_for_selector("#run-preview[data-ready]", state="attached")
    expect(page.locator("#preview-errors li")).to_have_count(2)
    assert page.locator("[data-live-for=overrides] .live-item").count() == 0
    ui.shot(page, "13-run-form-errors")

    # No overrides at all: it launches, and the trainer runs on the CPU.
    page.fill("#id_overrides", "")
    page.click("form.run-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/runs/\d+/$"), timeout=60_000)
    run = Run.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[-1]))
    assert run.config["actor_rollout_ref"]["rollout"]["name"] == "hf"
    assert (run.config["trainer"]["device"], run.config["trainer"]["n_gpus_per_node"]) == ("cpu", 1)
    assert run.config["data"]["train_batch_size"] == 256  # the experiment itself is the preset's

    def started():
        run.refresh_from_db()
        assert run.status not in ("failed", "lost"), run.error[-2000:]
        return run.status == "running" and run.last_heartbeat is not None

    try:
        ui.wait_for(started, timeout=300, what="the trainer's first heartbeat")
    except AssertionError:
        from rlstudio.runs.selectors import run_logs

        raise AssertionError(f"run {run.status} (queue: {run.queue_reason!r}, heartbeat {run.last_heartbeat}); "
                             f"job log: {run_logs(run=run, tail=40)}") from None


def test_a_refused_launchs_errors_go_from_a_field_once_it_is_edited(page_as, make_user):
    """After a refused Launch each field shows the server's error for what was sent; editing a field
    drops its own (it said "This field is required." under a name already typed until the next Launch),
    and the other fields' errors stay."""
    alice = make_user("alice")
    page = page_as(alice)
    page.goto("/runs/new/")
    with page.expect_navigation():
        page.click("form.run-form button[type=submit]")
    server = "p[data-field={}] > span.field-error:not(.live)"
    for field in ("name", "dataset", "model"):
        assert page.locator(server.format(field)).all_inner_texts() == ["This field is required."], field
    assert page.get_attribute("#id_name", "aria-invalid") == "true"

    page.fill("#id_name", "typed now")
    assert page.locator(server.format("name")).count() == 0
    assert page.get_attribute("#id_name", "aria-invalid") is None
    for field in ("dataset", "model"):
        assert page.locator(server.format(field)).count() == 1, field
