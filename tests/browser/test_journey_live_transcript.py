"""Transcript and group view as a new user meets them (issue 15, items 3 and 4), in a real Chromium
under the site's Content-Security-Policy (not bypassed):

- an assistant turn whose tool call could not be parsed shows the text the model wrote, marked as a
  malformed tool call with the parser's reason, as text (the model's text is hostile), never as an
  empty bubble;
- the group view shows every sample of the group and the trainer's own mean and std of its scores
  (what the step's advantages used), not statistics recomputed from whichever samples were stored;
  a group of an older run (no statistics from its trainer) says that its numbers are computed here.

The run is never admitted (no quota): only the real ingest endpoint writes to it.
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

T0 = 1_764_440_000.0
RAW = ('Let me call it <tool_call>{"name": "calculator", "arguments": {"expression": "6*7"'
       '<img src=x onerror="document.title=\'pwned\'"></tool_call>')
REASON = "bad_json: tool call is not valid JSON (Expecting ',' delimiter at char 55)"
# The trainer's group: scores 0, 1, 1, 0 -> mean 0.5, unbiased std 0.57735 (GRPO's torch.std).
SCORES = [0.0, 1.0, 1.0, 0.0]
MEAN, STD = 0.5, 0.5773502691896258


def _sample(seq: int, *, step: int, index: int, reward: float, group: bool) -> dict:
    adv = (reward - MEAN) / (STD + 1e-6) if group else 0.0
    stats = {"group_size": 4, "group_mean": MEAN, "group_std": STD} if group else {}
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": "prompt-7", "index": index, "reward": reward, "advantage": adv, "response_length": 9,
        "num_turns": 2, "finish_reason": "stop", "tool_calls": 0, **stats,
        "messages": [{"role": "user", "content": "What is 6*7?"},
                     {"role": "assistant", "content": "", "tool_calls": [], "raw": RAW,
                      "tool_call_errors": [{"reason": "bad_json",
                                            "message": REASON.split(": ", 1)[1]}]},
                     {"role": "tool", "content": "Error: malformed tool call (bad_json): ..."},
                     {"role": "assistant", "content": f"#### {42 if reward else 41}"}]}}


def test_malformed_call_and_the_trainers_group(page_as, quiet_run, ingest, shot):
    from rlstudio.telemetry.models import Sample

    alice, run, token = quiet_run
    # Step 1: the whole group with the trainer's statistics; step 2: two samples of an older trainer.
    events = [_sample(1 + i, step=1, index=i, reward=r, group=True) for i, r in enumerate(SCORES)]
    events += [_sample(10 + i, step=2, index=i, reward=float(i), group=False) for i in range(2)]
    assert ingest(run.pk, token, events)["accepted"] == len(events)
    page = page_as(alice, bypass_csp=False)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    # --- the transcript: the malformed turn shows what the model wrote, marked, as text
    sample = Sample.objects.get(run=run, seq=2)
    page.goto(f"/runs/{run.pk}/samples/{sample.pk}/")
    title = page.title()
    turns = page.locator("#tab-chat .msg")
    assert turns.count() == 4
    bad = turns.nth(1)
    assert bad.locator(".role").inner_text().strip().lower() == "assistant"
    assert bad.locator(".malformed-call .flag").inner_text() == "malformed tool call"
    assert bad.locator(".call-error").inner_text() == REASON
    assert bad.locator("pre.raw").inner_text() == RAW
    assert bad.locator("img, script").count() == 0
    for i in range(turns.count()):  # no empty bubble: every turn shows some text besides its role
        body = turns.nth(i).inner_text().replace(turns.nth(i).locator(".role").inner_text(), "").strip()
        assert body, f"turn {i} is empty"
    page.wait_for_timeout(300)  # an <img> that got in would fire onerror now
    assert page.title() == title and page.dialogs == []
    shot(page, "live-transcript-malformed-call")

    # --- the group view: 4 samples and the trainer's mean / std
    page.goto(f"/runs/{run.pk}/groups/?step=1&uid=prompt-7")
    assert page.locator(".sample-card").count() == 4
    assert page.locator(".group-n").inner_text().strip() == "4"
    assert page.locator(".group-mean").inner_text() == "0.5000"
    assert page.locator(".group-std").inner_text() == "0.5774"
    assert page.locator(".group-source").get_attribute("data-source") == "trainer"
    advantages = [float(c.locator("dd").nth(1).inner_text()) for c in page.locator(".sample-card").all()]
    assert advantages == pytest.approx([(r - MEAN) / (STD + 1e-6) for r in SCORES], abs=1e-3)
    shot(page, "live-group-trainer-stats")
    # An older run's group: computed from what was stored, and said so.
    page.goto(f"/runs/{run.pk}/groups/?step=2&uid=prompt-7")
    assert page.locator(".sample-card").count() == 2
    assert page.locator(".group-source").get_attribute("data-source") == "stored"
    assert page.locator(".group-mean").inner_text() == "0.5000"
    assert page.locator(".group-std").inner_text() == "0.7071"
    assert not [e for e in errors if "Content Security Policy" in e], errors
