"""The transcript page's view in its address (telemetry.views.token_view_state): ?view=tokens opens the
token view and ?colour= one of the select's colourings, rendered by the server (the tab active, the other
section hidden, the option selected, its key beside the select); a value the page does not know, or a
colouring this sample's token view cannot show, is the default (the conversation, the log-prob) and never
an error. static/js/telemetry_tokens.js writes the address back (tests/browser/test_transcript_address.py)."""
import json
import re

import pytest
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import Sample
from rlstudio.telemetry.views import TOKEN_COLOURINGS, token_view_state

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


def _sample(seq: int, *, rollout: bool, token_view: bool = True) -> dict:
    view = {"ids": [11, 12, 13], "pieces": ["Th", "e", " 4"], "loss_mask": [0, 1, 1],
            "logprobs": [-0.5, -1.25, -0.01], "ref_logprobs": None, "advantages": [0.0, 0.5, 0.5],
            "rollout_logprobs": [None, -1.0, -0.02] if rollout else None}
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": 1, "uid": f"p{seq}", "index": 0, "reward": 1.0, "advantage": 0.5, "response_length": 2,
        "num_turns": 1, "finish_reason": "stop",
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        **({"token_view": view} if token_view else {})}}


@pytest.fixture
def samples(alice, make_dataset, make_model):
    """(run, {name: sample}): one with a rollout view, one without, one with no token view at all."""
    run, token = run_create(owner=alice, name="addr", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    events = [_sample(1, rollout=True), _sample(2, rollout=False), _sample(3, rollout=False, token_view=False)]
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == 3, r.json()
    by_seq = {s.seq: s for s in Sample.objects.filter(run=run)}
    return run, {"rollout": by_seq[1], "plain": by_seq[2], "none": by_seq[3]}


def _page(client, run, sample, query: str = "") -> str:
    r = client.get(f"/runs/{run.pk}/samples/{sample.pk}/{query}")
    assert r.status_code == 200
    return r.content.decode()


def _state(page: str) -> dict:
    """What the server rendered: the active tab, which sections are hidden, the selected colouring and
    the legend beside the select."""
    active = re.findall(r'<button type="button" data-tab="(\w+)"[^>]* aria-selected="true" class="active"', page)
    selected = re.findall(r'<option value="(\w+)"[^>]* selected>', page)
    legend = re.search(r'<span id="token-legend" class="small">([^<]*)</span>', page)
    return {"active": active, "chat_hidden": bool(re.search(r'id="tab-chat"[^>]* hidden>', page)),
            "tokens_hidden": bool(re.search(r'id="tab-tokens"[^>]* hidden>', page)),
            "selected": selected, "legend": legend.group(1) if legend else None}


def test_default_is_the_conversation_and_the_log_prob(alice_client, samples):
    run, s = samples
    state = _state(_page(alice_client, run, s["rollout"]))
    assert state["active"] == ["chat"] and not state["chat_hidden"] and state["tokens_hidden"]
    assert state["selected"] == ["lp"] and state["legend"].startswith("orange: less likely")


def test_the_address_opens_the_token_view_with_its_colouring(alice_client, samples):
    run, s = samples
    page = _page(alice_client, run, s["rollout"], "?view=tokens&colour=gap")
    state = _state(page)
    assert state["active"] == ["tokens"] and state["chat_hidden"] and not state["tokens_hidden"]
    assert state["selected"] == ["gap"] and state["legend"].startswith("blue: the rollout engine more sure")
    assert 'data-default="lp"' in page  # the default the script leaves out of the address
    # the colouring alone, with other parameters beside it
    state = _state(_page(alice_client, run, s["rollout"], "?x=1&colour=adv"))
    assert state["active"] == ["chat"] and state["tokens_hidden"] and state["selected"] == ["adv"]
    assert state["legend"] == "green: advantage above 0; red: below 0 (deeper: larger)"


@pytest.mark.parametrize("query", ["?view=TOKENS&colour=zzz", "?view=&colour=", "?view=chat&colour=%3Cb%3E",
                                   "?view=tokens%20&colour=adv%20"])
def test_an_unknown_value_is_the_default(alice_client, samples, query):
    run, s = samples
    page = _page(alice_client, run, s["rollout"], query)
    state = _state(page)
    assert state["active"] == ["chat"] and state["tokens_hidden"] and state["selected"] == ["lp"]
    assert "<b>" not in page


def test_a_colouring_the_sample_cannot_show_is_the_default(alice_client, samples):
    run, s = samples
    # no rollout log-probs (and no reference): gap, rollout and ref are not offered
    page = _page(alice_client, run, s["plain"], "?view=tokens&colour=gap")
    state = _state(page)
    assert state["active"] == ["tokens"] and state["selected"] == ["lp"]
    assert 'value="gap"' not in page and 'value="ref"' not in page
    # no token view at all: the (disabled) tokens tab is not opened, the conversation is
    page = _page(alice_client, run, s["none"], "?view=tokens&colour=adv")
    state = _state(page)
    assert state["active"] == ["chat"] and not state["chat_hidden"] and state["tokens_hidden"]
    assert 'id="token-colour"' not in page and 'id="no-token-view"' in page


def test_token_view_state_offers_what_the_view_carries():
    full = token_view_state({"view": "tokens", "colour": "ref"}, has_tokens=True, has_ref=True, has_rollout=True)
    assert [c["value"] for c in full["colourings"]] == [c[0] for c in TOKEN_COLOURINGS]
    assert full["view"] == "tokens" and full["colour"] == "ref" and full["colour_default"] == "lp"
    assert [c["value"] for c in full["colourings"] if c["selected"]] == ["ref"]
    bare = token_view_state({"colour": "ref"}, has_tokens=True, has_ref=False, has_rollout=False)
    assert [c["value"] for c in bare["colourings"]] == ["lp", "adv"] and bare["colour"] == "lp"
    assert token_view_state({}, has_tokens=False, has_ref=False, has_rollout=False)["view"] == "chat"
