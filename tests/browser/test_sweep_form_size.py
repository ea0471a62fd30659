"""The sweep form counts the runs its grid makes as the axes are filled in, and warns (before the
server refuses it whole) when that is more than the user's queue has room for."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

LR = "actor_rollout_ref.actor.optim.lr"
N = "actor_rollout_ref.rollout.n"


def test_the_form_counts_the_grid_and_warns_past_the_queue(page_as, make_user, shot):
    from playwright.sync_api import expect

    from rlstudio.quotas.models import GpuQuota

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0, max_queued_runs=5)
    page = page_as(alice)
    page.goto("/sweeps/new/")
    size = page.locator("#sweep-size")
    expect(size).to_contain_text("your quota queues at most 5 runs (0 queued now)")
    page.select_option("#id_axis_key_1", LR)
    page.fill("#id_axis_values_1", "1e-6, 3e-6")
    expect(size).to_have_text("This sweep launches 2 runs.")
    page.select_option("#id_axis_key_2", N)
    page.fill("#id_axis_values_2", "2, 4, 8")
    expect(size).to_have_text("This sweep launches 6 runs (2 × 3). Your queue has room for 5 more: it would be "
                              "refused; use fewer values or wait for queued runs to start.")
    expect(size).to_have_class(re.compile(r"\bfield-error\b"))
    expect(size).not_to_have_class(re.compile(r"\bmuted\b"))  # red, not greyed
    shot(page, "sweep-form-size")
    page.fill("#id_axis_values_2", "2, 4")
    expect(size).to_have_text("This sweep launches 4 runs (2 × 2).")
    expect(size).not_to_have_class(re.compile(r"\bfield-error\b"))
    page.select_option("#id_axis_key_2", "")  # an axis without its key does not count
    expect(size).to_have_text("This sweep launches 2 runs.")
    GpuQuota.objects.filter(user=alice).update(max_queued_runs=100)
    page.goto("/sweeps/new/")
    page.select_option("#id_axis_key_1", LR)
    page.fill("#id_axis_values_1", ", ".join(f"{i}e-6" for i in range(1, 18)))
    expect(size).to_have_text("This sweep launches 17 runs. A sweep makes at most 16: it would be refused; "
                              "use fewer values.")


def test_a_random_search_counts_the_runs_box(page_as, make_user):
    from playwright.sync_api import expect

    page = page_as(make_user("bob"))
    page.goto("/sweeps/new/")
    size = page.locator("#sweep-size")
    page.select_option("#id_axis_key_1", LR)
    page.fill("#id_axis_values_1", "1e-7..1e-5 log")
    page.select_option("#id_axis_key_2", N)
    page.fill("#id_axis_values_2", "2, 4, 8")
    expect(size).to_have_text("This sweep launches 3 runs (1 × 3).")  # a grid reads the range as one value
    page.check("input[name=mode][value=random]")
    page.fill("#id_runs", "4")  # within the default quota's room (5 queued runs)
    expect(size).to_have_text("This sweep launches 4 runs.")
    expect(size).not_to_have_class(re.compile(r"\bfield-error\b"))
    page.fill("#id_runs", "20")
    expect(size).to_have_text(re.compile(r"^This sweep launches 20 runs\. A sweep makes at most 16"))
    expect(size).to_have_class(re.compile(r"\bfield-error\b"))
    page.check("input[name=mode][value=grid]")
    expect(size).to_have_text("This sweep launches 3 runs (1 × 3).")
