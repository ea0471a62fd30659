"""Your quota page says how many of your queued runs the quota allows, next to the active ones: a
launch past max_queued_runs is refused, and the page now shows the limit that refusal names."""
import pytest
from django.test import Client

from rlstudio.quotas.models import GpuQuota

pytestmark = pytest.mark.django_db


def test_the_page_counts_queued_runs_against_the_quota(alice, make_run):
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0,
                            max_queued_runs=3)
    client = Client()
    client.force_login(alice)
    assert '<dd id="runs-queued">0 of 3</dd>' in client.get("/runs/quota/").content.decode()
    make_run(alice, "one")
    make_run(alice, "two")  # both wait: no concurrent run allowed
    assert '<dd id="runs-queued">2 of 3</dd>' in client.get("/runs/quota/").content.decode()
