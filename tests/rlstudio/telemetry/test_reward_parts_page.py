"""The sample page shows each part of a combined reward (rule, reward model, tools, overlong penalty,
total) with the run's weights, from the sample's reward_extra as the trainer reports it through the
ingest API; hostile text in reward_extra is escaped; the API serves the same parts."""
import json

import pytest
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0
EXTRA = {"rule_score": 0.0, "rm_score": 1.75, "tool_reward": 0.5, "overlong_reward": -0.25, "total": 3.25,
         "note": "<script>alert(1)</script>"}
SAMPLE = {"seq": 1, "type": "sample", "time": T0, "data": {
    "step": 1, "uid": "p1", "index": 0, "reward": 3.25, "advantage": 0.5, "response_length": 4, "num_turns": 1,
    "finish_reason": "stop", "reward_extra": EXTRA,
    "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}]}}


@pytest.fixture
def sample(alice, make_dataset, make_model, settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")
    config = {"reward_model": {"enable": True, "rm_weight": 2.0, "rule_weight": 0.0, "tool_reward_weight": 1.0}}
    run, token = run_create(owner=alice, name="rm-run", dataset=make_dataset(alice), model=make_model(alice),
                            config=config, gpus=0)
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": [SAMPLE]}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == 1, r.json()
    return run, Sample.objects.get(run=run, seq=1)


def test_the_sample_page_lists_each_part_with_its_weight(alice, sample):
    run, s = sample
    web = Client()
    web.force_login(alice)
    page = web.get(f"/runs/{run.pk}/samples/{s.pk}/").content.decode()
    table = page.split('class="dense reward-breakdown"', 1)[1].split("</table>", 1)[0]
    rows = {part: table.split(f'data-part="{part}"', 1)[1].split("</tr>", 1)[0]
            for part in ("rule_score", "rm_score", "tool_reward", "overlong_reward", "total")}
    assert "Reward model" in rows["rm_score"] and "1.7500" in rows["rm_score"] and "× 2.0" in rows["rm_score"]
    assert "3.5000" in rows["rm_score"]  # weighted: 2.0 x 1.75
    assert "× 0.0" in rows["rule_score"] and "0.0000" in rows["rule_score"]
    assert "0.5000" in rows["tool_reward"] and "× 1.0" in rows["tool_reward"]
    assert "-0.2500" in rows["overlong_reward"] and "3.2500" in rows["total"]
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_an_absent_part_says_so(alice, sample):
    run, s = sample
    Sample.objects.filter(pk=s.pk).update(transcript={**s.transcript, "reward_extra": {**EXTRA, "rule_score": None}})
    web = Client()
    web.force_login(alice)
    page = web.get(f"/runs/{run.pk}/samples/{s.pk}/").content.decode()
    row = page.split('data-part="rule_score"', 1)[1].split("</tr>", 1)[0]
    assert "absent" in row


def test_the_api_serves_the_parts(alice, sample):
    from rest_framework.test import APIClient

    run, s = sample
    api = APIClient()
    api.force_authenticate(alice)
    resp = api.get(f"/api/v1/runs/{run.pk}/samples/{s.pk}/")
    assert resp.status_code == 200, resp.content
    assert resp.json()["reward_extra"]["rm_score"] == 1.75 and resp.json()["reward_extra"]["total"] == 3.25
