"""The group pages show the trainer's own group statistics when its samples carry them (computed from
the stored rewards otherwise); a malformed tool call's raw text is shown, escaped; the run page's flash
message names the run's status now and its header carries the times run_controls.js keeps live."""
import json

import pytest
from django.contrib.messages import constants as message_levels
from django.contrib.messages.storage.cookie import CookieStorage
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from rlstudio.telemetry.selectors import prompt_history
from rlstudio.telemetry.models import Sample
from trainer.types import prompt_hash

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0
# The prompt's stable key as the trainer reports it (the uid is new at each draw).
KEY = {"prompt_split": "train", "prompt_index": 3, "prompt_hash": prompt_hash([5, 6, 7])}
RAW = '<tool_call>{"name": "calculator", <script>alert(1)</script></tool_call>'


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _sample(seq, step, uid, index, reward, adv, **group):
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": uid, "index": index, "reward": reward, "advantage": adv, "response_length": 5,
        "num_turns": 2, "finish_reason": "stop", "tool_calls": 0, **group,
        "messages": [{"role": "user", "content": "6*7?"},
                     {"role": "assistant", "content": "", "tool_calls": [], "raw": RAW,
                      "tool_call_errors": [{"reason": "bad_json", "message": "tool call is not valid JSON"}]},
                     {"role": "tool", "content": "Error: malformed tool call (bad_json): ..."},
                     {"role": "assistant", "content": "#### 42"}]}}


@pytest.fixture
def run_with_groups(alice, make_dataset, make_model):
    run, token = run_create(owner=alice, name="groups", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    # Step 1: the trainer's group of 4 (mean 0.5, std 0.57735 of its scores), all reported.
    rewards = [0.0, 1.0, 1.0, 0.0]
    events = [_sample(1 + i, 1, "g", i, r, (r - 0.5) / 0.57735, group_size=4, group_mean=0.5, group_std=0.57735,
                      **KEY) for i, r in enumerate(rewards)]
    # Step 2: the same prompt drawn again (a new uid), 2 of the 4 reported without statistics:
    # computed from what is stored.
    events += [_sample(10 + i, 2, "g2", i, float(i), 0.0, **KEY) for i in range(2)]
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == len(events), r.json()
    return run


@pytest.fixture
def client_of(alice):
    c = Client()
    c.force_login(alice)
    return c


def test_group_view_uses_the_trainers_statistics(client_of, run_with_groups):
    run = run_with_groups
    api = client_of.get(f"/api/v1/runs/{run.pk}/groups/?step=1&uid=g").json()
    assert (api["n"], api["size"], api["mean"], api["std"], api["source"]) == (4, 4, 0.5, 0.57735, "trainer")
    assert api["samples"][0]["group_mean"] == 0.5
    page = client_of.get(f"/runs/{run.pk}/groups/?step=1&uid=g").content.decode()
    assert 'class="group-mean">0.5000<' in page and 'class="group-std">0.5774<' in page
    assert 'data-source="trainer"' in page and page.count('class="card sample-card"') == 4
    old = client_of.get(f"/api/v1/runs/{run.pk}/groups/?step=2&uid=g2").json()
    assert (old["n"], old["size"], old["mean"], old["source"]) == (2, None, 0.5, "stored")
    assert old["std"] == pytest.approx(0.70711, abs=1e-5)
    overview = client_of.get(f"/api/v1/runs/{run.pk}/groups/?step=1").json()["groups"]
    assert [(g["uid"], g["std"], g["source"]) for g in overview] == [("g", 0.57735, "trainer")]
    history = {row["step"]: row for row in prompt_history(run=run, prompt_split="train",
                                                          prompt_hash=KEY["prompt_hash"])}
    assert history[1]["source"] == "trainer" and history[2]["source"] == "stored"
    assert (history[1]["uid"], history[2]["uid"]) == ("g", "g2")


def test_malformed_call_is_shown_escaped(client_of, run_with_groups):
    run = run_with_groups
    s = Sample.objects.filter(run=run).order_by("seq").first()
    page = client_of.get(f"/runs/{run.pk}/samples/{s.pk}/").content.decode()
    assert "malformed tool call" in page and "bad_json: tool call is not valid JSON" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    # The group card falls back to the raw text when the last assistant turn has no content.
    assert "#### 42" in client_of.get(f"/runs/{run.pk}/groups/?step=1&uid=g").content.decode()


def test_flash_names_the_status_now_and_header_carries_the_clock(client_of, run_with_groups, settings):
    run = run_with_groups
    run.status = "running"
    from django.utils import timezone

    run.started = timezone.now()
    run.save(update_fields=["status", "started"])
    # What the launch left in the message storage (cookie storage: the test client keeps it).
    settings.MESSAGE_STORAGE = "django.contrib.messages.storage.cookie.CookieStorage"
    storage = CookieStorage(type("R", (), {"COOKIES": {}})())
    from django.contrib.messages.storage.base import Message
    from django.http import HttpResponse

    response = HttpResponse()
    storage._store([Message(message_levels.SUCCESS, f"Run “{run.name}” is submitting."),
                    Message(message_levels.INFO, "something else <b>")], response)
    client_of.cookies[storage.cookie_name] = response.cookies[storage.cookie_name].value
    page = client_of.get(f"/runs/{run.pk}/").content.decode()
    assert f'Run “{run.name}” is <span data-run-field="status">running</span>.' in page
    assert "is submitting" not in page and "something else &lt;b&gt;" in page
    assert 'class="run-times' in page and f'data-started="{run.started.timestamp():.3f}"' in page
    assert 'data-run-field="duration">0:00:0' in page
    fragment = client_of.get(f"/runs/{run.pk}/controls/").content.decode()
    assert 'data-run-field="started"' in fragment and 'data-now="' in fragment
