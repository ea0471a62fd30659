"""The runs page's head: "New run" (a link drawn as a button) and "Launch the demo" (a form's button)
sit on one line at the same height; the button's own top margin put it lower than the link."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_new_run_and_launch_the_demo_line_up(page_as, make_user, shot):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.demo.services import DEMO_CONFIG_NAME
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import RunConfig
    from rlstudio.runs.services import run_create

    root = make_user("root", staff=True)
    RunConfig.objects.create(owner=root, name=DEMO_CONFIG_NAME, config={})  # the demo is "ready"
    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run_create(owner=alice, name="a-run", dataset=dataset, model=model, config={}, gpus=0)
    page = page_as(alice)
    page.goto("/")
    new_run = page.locator(".pagehead a.button", has_text="New run").bounding_box()
    demo = page.locator(".pagehead button", has_text="Launch the demo").bounding_box()
    assert abs(new_run["y"] - demo["y"]) <= 1 and abs(new_run["height"] - demo["height"]) <= 2, (new_run, demo)
    shot(page, "runs-head")
