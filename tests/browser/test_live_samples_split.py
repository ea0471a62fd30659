"""A sample pushed over the run page's websocket joins the samples table only when it passes the
table's filters, the split (training / validation prompts) included. The run never trains (its owner's
quota admits none); its samples are stored rows."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

# Push a sample event through the page's own handler and count the table's rows in the same task,
# before the refetch that follows a push (1.5 s later) can redraw the table from the server.
PUSH_AND_COUNT = """(s) => { window.rlstudioLive.apply({seq: window.rlstudioLive.lastSeq() + 1, type: "sample",
    time: Date.now() / 1000, data: s}); return document.querySelectorAll("#samples-body tr").length; }"""


def test_a_pushed_sample_of_the_other_split_stays_out_of_a_split_filtered_table(page_as, make_user):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import Sample

    alice = make_user("alice")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _token = run_create(owner=alice, name="split-live", dataset=dataset, model=model, config={}, gpus=0)
    for seq, split in ((1, "val"), (2, "val"), (3, "train")):
        Sample.objects.create(run=run, seq=seq, step=1, uid=f"u{seq}", index=0, reward=1.0, response_length=10,
                              finish_reason="stop", prompt_split=split,
                              transcript=[{"role": "user", "content": f"q{seq}"}])
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/?prompt_split=val")
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    expect(page.locator("#samples-body tr")).to_have_count(2)

    base = {"step": 2, "index": 0, "reward": 0.0, "advantage": 0.0, "response_length": 12, "num_turns": 1,
            "finish_reason": "stop", "has_tool_call": False}
    assert page.evaluate(PUSH_AND_COUNT, {**base, "id": 9001, "uid": "t2", "prompt_split": "train"}) == 2
    assert page.evaluate(PUSH_AND_COUNT, {**base, "id": 9002, "uid": "v2", "prompt_split": "val"}) == 3
