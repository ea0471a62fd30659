"""Counts on the pages carry thousands separators (Django's intcomma) in right-aligned, tabular-figure
cells whose headers are aligned with them; the API and the CSV keep raw numbers. The run page's
connection indicator says the run has ended (never "live") for a stopped / succeeded / failed / lost run,
from the first paint."""
import re

import pytest
from django.test import Client

from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def long_run(alice, make_run):
    run = make_run(alice, "long-run")
    Run.objects.filter(pk=run.pk).update(step=12_345, total_steps=20_000)
    return run


def test_runs_list_and_compare_show_counts_with_separators(alice, make_run, long_run):
    c = _client(alice)
    html = c.get("/runs/").content.decode()
    step_cell = re.search(r'<td class="num">\s*([^<]*?)\s*<', html).group(1)
    assert step_cell == "12,345 / 20,000"
    # The numeric columns' headers are right-aligned with their cells.
    for label in ("Step", "Latest reward", "Duration"):
        assert re.search(rf'<th aria-sort="[a-z]+" class="num"><a href="[^"]*">{label}</a>', html), label
    assert not re.search(r'<th aria-sort="[a-z]+" class="num"><a href="[^"]*">Name</a>', html)
    other = make_run(alice, "other")
    html = c.get(f"/runs/compare/?ids={long_run.pk},{other.pk}").content.decode()
    assert '<td class="num">12,345 / 20,000</td>' in html and '<th class="num">Steps</th>' in html
    # The API keeps the raw number.
    assert c.get(f"/api/v1/runs/{long_run.pk}/").json()["step"] == 12_345


def test_run_page_step_with_separators(alice, long_run):
    html = _client(alice).get(f"/runs/{long_run.pk}/").content.decode()
    assert '<span id="live-step">12,345</span> / <span id="live-total">20,000</span>' in html
    assert '<span data-field="step">12,345</span>' in html  # the controls card's header


@pytest.mark.parametrize("status", ["stopped", "succeeded", "failed", "lost"])
def test_an_ended_run_says_so_not_live(alice, make_run, status):
    run = make_run(alice, "ended")
    Run.objects.filter(pk=run.pk).update(status=status)
    html = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    conn = re.search(r'<span id="live-conn"[^>]*>([^<]*)</span>', html)
    assert conn.group(1) == f"ended ({status})"
    assert f'data-run-state="{status}"' in conn.group(0) and 'data-socket="closed"' in conn.group(0)


def test_a_queued_run_says_nothing_until_its_socket_is_open(alice, make_run):
    run = make_run(alice, "queued")
    html = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r'<span id="live-conn"[^>]*>([^<]*)</span>', html).group(1) == ""


def test_quota_amounts_carry_separators(alice, admin_user):
    from rlstudio.quotas.models import GpuQuota

    GpuQuota.objects.update_or_create(user=alice, defaults={"gpu_hours_per_month": 12_500.0,
                                                             "dataset_storage_gb": 2_048.5})
    html = _client(alice).get("/runs/quota/").content.decode()
    assert "0.00 of 12,500</dd>" in html and "0.00 of 2,048.50 GB" in html
    html = _client(alice).get("/datasets/").content.decode()
    assert "of 2,048.50 GB of storage" in html
    html = _client(admin_user).get("/quotas/admin/").content.decode()
    assert "0.00 of 12,500</td>" in html and "0.00 of 2,048.50</td>" in html
