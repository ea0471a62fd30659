"""One prompt across training: the sample events' stable key (prompt_split, prompt_index, prompt_hash)
is validated and stored by the ingest, and the prompt page, its links and the samples API follow it
over steps whose draws have different uids, within one run and its visibility only."""

import json
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client, TestCase

from rlstudio.runs.services import run_create, run_share
from rlstudio.telemetry.models import Sample
from rlstudio.telemetry.selectors import prompt_history
from trainer.types import prompt_hash

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0
H = prompt_hash([1, 2, 3])  # the followed prompt
OTHER = prompt_hash([4, 5])


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def sample(seq, step, uid, index, reward, *, split="train", row=7, digest=H, mean=None, **extra):
    data = {
        "step": step,
        "uid": uid,
        "index": index,
        "reward": reward,
        "advantage": 0.0,
        "response_length": 3,
        "num_turns": 1,
        "finish_reason": "stop",
        "messages": [
            {"role": "user", "content": f"prompt {(digest or 'old')[:4]}"},
            {"role": "assistant", "content": "#### 1"},
        ],
        **extra,
    }
    if digest is not None:
        data.update(prompt_split=split, prompt_index=row, prompt_hash=digest)
    if mean is not None:
        data.update(group_size=2, group_mean=mean, group_std=0.5)
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": data}


def post(run, token, events):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return (
            Client()
            .post(
                f"/api/v1/runs/{run.pk}/events/",
                json.dumps({"events": events}),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
            .json()
        )


@pytest.fixture
def runs(alice, make_dataset, make_model):
    """Alice's run: the prompt H drawn at steps 1, 2, 3 (a fresh uid each time, as the loader draws),
    its group mean rising; another prompt; H's text in the validation set; an older trainer's sample
    without a key. A second run of hers with the same prompt."""
    mk = dict(owner=alice, dataset=make_dataset(alice), model=make_model(alice), config={}, gpus=0)
    run, token = run_create(name="followed", **mk)
    events = []
    for step, (uid, rewards, mean) in enumerate(
        [("d1", (0.0, 0.0), 0.0), ("d2", (0.0, 1.0), 0.5), ("d3", (1.0, 1.0), 1.0)], start=1
    ):
        events += [sample(10 * step + i, step, uid, i, r, mean=mean) for i, r in enumerate(rewards)]
    events += [sample(50, 2, "other-prompt-uid", 0, 0.25, row=3, digest=OTHER)]
    events += [sample(60, 2, "val-prompt-uid", 0, 0.75, split="val", row=0, validation=True)]
    events += [sample(70, 1, "legacy", 0, 0.5, digest=None)]
    assert post(run, token, events)["accepted"] == len(events)
    other, other_token = run_create(name="other", **mk)
    assert post(other, other_token, [sample(1, 1, "elsewhere", 0, 0.9)])["accepted"] == 1
    return run, other


def test_ingest_stores_the_key_and_refuses_a_malformed_one(runs):
    run, _ = runs
    stored = Sample.objects.get(run=run, uid="d2", index=1)
    assert (stored.prompt_split, stored.prompt_index, stored.prompt_hash) == ("train", 7, H)
    legacy = Sample.objects.get(run=run, uid="legacy")
    assert (legacy.prompt_split, legacy.prompt_index, legacy.prompt_hash) == (None, None, None)
    fresh, tok = run_create(
        owner=run.owner, name="bad", dataset=run.dataset, model=run.model, config={}, gpus=0
    )
    bad = [
        sample(1, 1, "b", 0, 0.0, digest=H.upper()),
        sample(2, 1, "b", 1, 0.0, split="test"),
        sample(3, 1, "b", 2, 0.0, row=-1),
        sample(4, 1, "b", 3, 0.0),
    ]
    body = post(fresh, tok, bad)
    assert body["accepted"] == 1
    reasons = [r["reason"] for r in body["refused"]]
    assert "data.prompt_hash must be 32 lowercase hex digits" in reasons[0]
    assert "data.prompt_split must be one of train, val" in reasons[1]
    assert "data.prompt_index" in reasons[2]


def test_selector_follows_the_prompt_over_three_steps(runs):
    run, other = runs
    history = prompt_history(run=run, prompt_split="train", prompt_hash=H)
    assert [(d["step"], d["uid"], d["prompt_index"]) for d in history] == [
        (1, "d1", 7),
        (2, "d2", 7),
        (3, "d3", 7),
    ]
    assert [d["mean"] for d in history] == [0.0, 0.5, 1.0] and {d["source"] for d in history} == {
        "trainer"
    }
    assert [[s["reward"] for s in d["samples"]] for d in history] == [
        [0.0, 0.0],
        [0.0, 1.0],
        [1.0, 1.0],
    ]
    # the same text in the validation set is another prompt; the other run's samples are never read
    assert [d["uid"] for d in prompt_history(run=run, prompt_split="val", prompt_hash=H)] == ["val-prompt-uid"]
    assert [d["uid"] for d in prompt_history(run=other, prompt_split="train", prompt_hash=H)] == [
        "elsewhere"
    ]


def test_page_shows_every_step_with_the_group_mean(alice_client, runs):
    run, _ = runs
    page = alice_client.get(
        f"/runs/{run.pk}/prompts/", {"prompt_split": "train", "prompt_hash": H}
    ).content.decode()
    assert page.count('class="prompt-step') == 3
    assert page.index('data-step="1"') < page.index('data-step="2"') < page.index('data-step="3"')
    assert [page.count(f'class="group-mean num">{m}<') for m in ("0.000", "0.500", "1.000")] == [
        1,
        1,
        1,
    ]
    assert "training set, row 7" in page and "3 times with stored samples" in page
    assert (
        'class="mean-line"' in page and page.count("<circle") == 6
    )  # the curve: 6 rewards, 3 means
    assert "History unknown" not in page and "other-prompt-uid" not in page and "val-prompt-uid" not in page


def test_links_and_old_uid_links_lead_to_the_prompts_history(alice_client, runs):
    run, _ = runs
    want = {"prompt_split": ["train"], "prompt_hash": [H]}
    s = Sample.objects.get(run=run, uid="d1", index=0)
    for url in (f"/runs/{run.pk}/samples/{s.pk}/", f"/runs/{run.pk}/groups/?step=1&uid=d1"):
        page = alice_client.get(url).content.decode()
        href = page.split('class="prompt-link" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        assert parse_qs(urlparse(href).query) == want, url
    r = alice_client.get(f"/runs/{run.pk}/prompts/?uid=d2")  # an older link: the draw's key
    assert r.status_code == 302 and parse_qs(urlparse(r["Location"]).query) == want
    run_page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'data-prompt-key="train:{H}"' in run_page and f"prompt_hash={H}" in run_page


def test_samples_without_a_key_say_their_history_is_unknown(alice_client, runs):
    run, _ = runs
    page = alice_client.get(f"/runs/{run.pk}/prompts/?uid=legacy").content.decode()
    assert "History unknown" in page and page.count('class="prompt-step') == 1
    s = Sample.objects.get(run=run, uid="legacy")
    assert "?uid=legacy" in alice_client.get(f"/runs/{run.pk}/samples/{s.pk}/").content.decode()


def test_lookup_stays_within_a_visible_run(client, alice, bob, runs):
    run, _ = runs
    client.force_login(bob)
    urls = (
        f"/runs/{run.pk}/prompts/?prompt_split=train&prompt_hash={H}",
        f"/runs/{run.pk}/prompts/?uid=d1",
        f"/api/v1/runs/{run.pk}/samples/?prompt_hash={H}",
    )
    for url in urls:
        assert client.get(url).status_code == 404, url
    run_share(run=run, by=alice, add=["bob"])  # shared with bob: he reads it, this run's draws only
    page = client.get(urls[0]).content.decode()
    assert page.count('class="prompt-step') == 3 and "elsewhere" not in page
    assert client.get(urls[1]).status_code == 302


@pytest.mark.parametrize(
    "query, field",
    [
        ("prompt_split=train&prompt_hash=xyz", "prompt_hash"),
        (f"prompt_split=test&prompt_hash={H}", "prompt_split"),
        (f"prompt_hash={H}", "prompt_split"),
        ("", "prompt_hash"),
    ],
)
def test_bad_prompt_parameters_are_a_400_naming_them(alice_client, runs, query, field):
    run, _ = runs
    r = alice_client.get(f"/runs/{run.pk}/prompts/?{query}")
    assert r.status_code == 400 and f'data-field="{field}"' in r.content.decode()


def test_samples_api_filters_by_the_key(alice_client, runs):
    run, _ = runs
    base = f"/api/v1/runs/{run.pk}/samples/"
    rows = alice_client.get(
        base, {"prompt_split": "train", "prompt_hash": H, "order": "step"}
    ).json()["results"]
    assert [(r["step"], r["uid"], r["prompt_index"]) for r in rows] == [
        (1, "d1", 7),
        (1, "d1", 7),
        (2, "d2", 7),
        (2, "d2", 7),
        (3, "d3", 7),
        (3, "d3", 7),
    ]
    assert {r["prompt_hash"] for r in rows} == {H}
    r = alice_client.get(base, {"prompt_hash": "nothex"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "prompt_hash"
