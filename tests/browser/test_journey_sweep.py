"""Sweeps in a real Chromium: from the new-run form's "or a sweep" link, a 2 x 2 sweep of the CPU
preset (cpu_smoke, the tiny model) over the learning rate and rollout.n; its page lists the four runs
with their axis values and states, links to compare them, and a run's page says it is part of the
sweep. The runs are not waited for (one at a time by alice's quota; the rest wait queued)."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

LR = "actor_rollout_ref.actor.optim.lr"
N = "actor_rollout_ref.rollout.n"


def test_a_2x2_sweep_from_the_form_to_its_page(page_as, make_user, register_model, ui, gsm8k_test_file):
    from playwright.sync_api import expect

    from rlstudio.quotas.models import GpuQuota
    from rlstudio.sweeps.models import Sweep

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=10, max_concurrent_runs=1,
                            max_queued_runs=10)
    register_model(alice, "tiny-smoke")
    page = page_as(alice)
    ui.upload_dataset(page, gsm8k_test_file, name="gsm8k-test", timeout_ms=150_000)

    page.goto("/runs/new/")
    page.click("#new-sweep-link")
    page.wait_for_url(re.compile(r".*/sweeps/new/$"))
    page.fill("#id_name", "lr-by-n")
    page.select_option("#id_dataset", label="gsm8k-test")
    value = page.evaluate("""() => [...document.querySelectorAll('#id_model option')]
        .find((o) => o.text.startsWith('tiny-smoke (')).value""")
    page.select_option("#id_model", value=value)
    page.select_option("#id_preset", "cpu_smoke")
    page.fill("#id_gpus", "0")
    page.fill("#id_overrides", "trainer.total_training_steps=1")
    page.select_option("#id_axis_key_1", LR)
    page.fill("#id_axis_values_1", "1e-6, 3e-6")
    page.select_option("#id_axis_key_2", N)
    page.fill("#id_axis_values_2", "2, 4")
    page.click("#sweep-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/sweeps/\d+/$"), timeout=60_000)

    sweep = Sweep.objects.get(name="lr-by-n")
    assert sweep.sweep_runs.count() == 4
    rows = page.locator("#sweep-runs tbody tr")
    expect(rows).to_have_count(4)
    cells = [[c.strip() for c in rows.nth(i).locator("td").all_inner_texts()[1:3]] for i in range(4)]
    assert cells == [["1e-06", "2"], ["1e-06", "4"], ["3e-06", "2"], ["3e-06", "4"]], cells
    expect(rows.nth(0).locator("td").nth(3)).to_contain_text(f"lr-by-n/{LR}=1e-06,{N}=2")
    expect(page.locator("#sweep-compare")).to_have_attribute("href", re.compile(r"/runs/compare/\?ids=\d+,\d+,\d+,\d+$"))
    expect(page.locator("#sweep-stop")).to_be_visible()
    ui.shot(page, "40-sweep-page")

    rows.nth(3).locator("td a").first.click()
    page.wait_for_url(re.compile(r".*/runs/\d+/$"))
    expect(page.locator("#run-sweep")).to_contain_text("Part of sweep lr-by-n")
    page.click("#run-sweep a")
    page.wait_for_url(re.compile(rf".*/sweeps/{sweep.pk}/$"))
