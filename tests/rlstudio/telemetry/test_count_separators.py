"""The pages' "n of N" counters carry thousands separators like every other count on the pages
(intcomma): the group pages' ("n shown of size", a step's and a prompt's groups) and the staff queue's
"the first n of N queued jobs"; the API keeps the raw numbers. (The run page's samples counter is
written by run_live.js: tests/browser/test_samples_counter.py.)"""
import json

import pytest
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from trainer.types import prompt_hash

pytestmark = pytest.mark.django_db
KEY = {"prompt_split": "train", "prompt_index": 3, "prompt_hash": prompt_hash([5, 6, 7])}


@pytest.fixture
def big_group_run(alice, make_dataset, make_model):
    """A run whose step 1 stored 2 samples of a group of 1,234 (the trainer's statistics on them)."""
    run, token = run_create(owner=alice, name="big", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    events = [{"seq": 1 + i, "type": "sample", "time": 1_764_440_000.0 + i, "data": {
        "step": 1, "uid": "g", "index": i, "reward": float(i), "advantage": 0.0, "response_length": 5,
        "num_turns": 1, "finish_reason": "stop", "tool_calls": 0, "group_size": 1234, "group_mean": 0.5,
        "group_std": 0.5, **KEY, "messages": [{"role": "user", "content": "q"},
                                             {"role": "assistant", "content": "a"}]}} for i in range(2)]
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == 2, r.json()
    return run


def test_group_counters_have_separators(alice, big_group_run):
    run = big_group_run
    c = Client()
    c.force_login(alice)
    group = c.get(f"/runs/{run.pk}/groups/?step=1&uid=g").content.decode()
    assert '<dd class="group-n">2 shown of 1,234 in the group</dd>' in group
    assert "the scores of all 1,234 samples" in group
    step = c.get(f"/runs/{run.pk}/groups/?step=1").content.decode()
    assert '<td class="num">2 of 1,234</td>' in step
    prompt = c.get(f"/runs/{run.pk}/prompts/?prompt_split=train&prompt_hash={KEY['prompt_hash']}").content.decode()
    assert '<td class="num">2 of 1,234</td>' in prompt
    assert c.get(f"/api/v1/runs/{run.pk}/groups/?step=1&uid=g").json()["size"] == 1234


def test_the_staff_queue_counter_has_separators(staff, alice, make_run, settings, monkeypatch):
    import dataclasses

    from rlstudio.quotas import views

    settings.RAY_ADDRESS = None
    make_run(alice, "queued")
    real = views.quota_admin_overview
    # 1,234 queued jobs would take a while to make: the page is given the total the selector counts
    monkeypatch.setattr(views, "quota_admin_overview", lambda: dataclasses.replace(real(), queue_total=1234))
    c = Client()
    c.force_login(staff)
    body = c.get("/quotas/admin/").content.decode()
    assert "The first 1 of 1,234 queued jobs;" in body
