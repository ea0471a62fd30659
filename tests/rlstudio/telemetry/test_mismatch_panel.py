"""The training–inference mismatch on the run pages (rollout correction, algorithm.rollout_correction).

A run's rollout_corr/* metrics and a sample whose token view carries the rollout engine's log-probs go
in through the ingest API; the sample page offers the rollout log-prob and the rollout − actor gap as
token colourings (Django's test client); then, in Chromium (Debian's, driven by Playwright, with no
server: the pages are fetched with the test client beforehand, static files read from the finders),
the live run page draws the metrics in their own chart group and the token view colours the trained
tokens by the gap.
"""
import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.contrib.staticfiles import finders
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0
CHROMIUM = "/usr/bin/chromium"
GROUP = "Training–inference mismatch"


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _metrics(seq, step, kl):
    return {"seq": seq, "type": "metrics", "time": T0 + seq, "data": {"step": step, "metrics": {
        "critic/score/mean": 0.5, "actor/pg_loss": -0.1, "rollout_corr/kl": kl, "rollout_corr/ppl_ratio": 1 + kl,
        "rollout_corr/rollout_is_mean": 1.0, "rollout_corr/rollout_is_max": 1.4, "rollout_corr/rollout_is_min": 0.7,
        "rollout_corr/rollout_is_ratio_fraction_high": 0.01, "training/rollout_probs_diff_max": 0.02}}}


SAMPLE = {"seq": 10, "type": "sample", "time": T0 + 10, "data": {
    "step": 1, "uid": "p1", "index": 0, "reward": 1.0, "advantage": 0.5, "response_length": 4, "num_turns": 1,
    "finish_reason": "stop", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    "token_view": {"ids": [11, 12, 13, 14], "pieces": ["Th", "e", " 4", "<end>"], "loss_mask": [1, 1, 1, 0],
                   "logprobs": [-0.5, -1.25, -0.01, -3.0], "ref_logprobs": None, "advantages": [0.5, 0.5, 0.5, 0.0],
                   "rollout_logprobs": [-0.25, -1.25, -0.31, None]}}}


@pytest.fixture
def run_with_mismatch(alice, make_dataset, make_model):
    run, token = run_create(owner=alice, name="tis-run", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    events = [_metrics(1, 1, 0.002), _metrics(2, 2, 0.004), SAMPLE]
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == len(events), r.json()
    return run


def test_ingest_checks_the_rollout_log_probs(alice, make_dataset, make_model):
    run, token = run_create(owner=alice, name="bad-view", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    bad = json.loads(json.dumps(SAMPLE))
    bad["data"]["token_view"]["rollout_logprobs"] = [-0.25, None]
    r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": [bad]}),
                      content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == 0
    assert "token_view.rollout_logprobs must have one entry per token (4)" in r.json()["refused"][0]["reason"]


def test_sample_page_offers_the_rollout_gap(alice_client, run_with_mismatch):
    s = Sample.objects.get(run=run_with_mismatch, seq=10)
    page = alice_client.get(f"/runs/{run_with_mismatch.pk}/samples/{s.pk}/").content.decode()
    assert '">rollout log-prob</option>' in page and '<option value="gap" data-legend="blue: ' in page
    # the colourings' key beside the select: the log-prob's first (the one selected), as text
    assert '<span id="token-legend" class="small">orange: less likely' in page
    # gap = rollout − actor per sampled token; none on the token the engine did not sample
    assert page.count('data-gap="0.25"') == 1 and page.count('data-gap="0.0"') == 1
    assert page.count('data-gap="-0.3"') == 1 and page.count('data-gap=""') == 1
    assert 'data-rollout="-0.31"' in page and "gap 0.25" in page


def test_sample_page_without_rollout_log_probs_has_no_gap(alice_client, run_with_mismatch):
    s = Sample.objects.get(run=run_with_mismatch, seq=10)
    view = dict(s.token_view)
    view.pop("rollout_logprobs")
    Sample.objects.filter(pk=s.pk).update(token_view=view)
    page = alice_client.get(f"/runs/{run_with_mismatch.pk}/samples/{s.pk}/").content.decode()
    assert 'value="gap"' not in page and 'data-gap=""' in page


def _serve(client, urls, unexpected):
    """A Playwright route handler: `urls` fetched with the Django test client first (Playwright calls
    the handler from another greenlet, where the ORM would not see this test's transaction), served by
    path with their Content-Security-Policy; static files from the finders; anything else 404, noted
    in `unexpected`."""
    pages = {}
    for u in urls:
        resp = client.get(u)
        assert resp.status_code == 200, (u, resp.status_code)
        headers = {k: resp[k] for k in ("Content-Type", "Content-Security-Policy") if resp.has_header(k)}
        pages[urlparse(u).path] = (resp.content, headers)

    def handle(route, request):
        path = urlparse(request.url).path
        found = finders.find(path[len("/static/"):]) if path.startswith("/static/") else None
        if found:
            kind = {".js": "application/javascript", ".css": "text/css"}.get(Path(found).suffix, "application/octet-stream")
            return route.fulfill(status=200, body=Path(found).read_bytes(), content_type=kind)
        if path in pages:
            body, headers = pages[path]
            return route.fulfill(status=200, body=body, headers=headers)
        unexpected.append(request.url)
        return route.fulfill(status=404, body="")
    return handle


def test_chromium_draws_the_mismatch_group_and_colours_tokens_by_the_gap(alice_client, run_with_mismatch):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (Debian's package)")
    from playwright.sync_api import sync_playwright

    run = run_with_mismatch
    sample = Sample.objects.get(run=run, seq=10)
    errors, unexpected = [], []
    handler = _serve(alice_client, [f"/runs/{run.pk}/", f"/api/v1/runs/{run.pk}/job-log/?tail=500",
                                    f"/runs/{run.pk}/summary/card/",
                                    f"/runs/{run.pk}/samples/{sample.pk}/"], unexpected)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.route("http://testserver/**", handler)
            page.goto(f"http://testserver/runs/{run.pk}/")
            group = page.locator(".chart-group", has=page.locator("h3", has_text=GROUP))
            group.wait_for(timeout=20_000)
            families = group.locator(".plot").evaluate_all("els => els.map((e) => e.dataset.family)")
            # rollout_is_mean/max/min as one min–max band, the others one panel each; nothing else here
            assert sorted(families) == ["rollout_corr/kl", "rollout_corr/ppl_ratio", "rollout_corr/rollout_is",
                                        "rollout_corr/rollout_is_ratio_fraction_high", "training/rollout_probs_diff"]
            titles = page.locator(".chart-group h3").all_inner_texts()
            assert titles.index("Policy") < titles.index(GROUP)

            page.goto(f"http://testserver/runs/{run.pk}/samples/{sample.pk}/")
            page.click("button[data-tab=tokens]")
            legend = page.locator("#token-legend")
            assert legend.inner_text().startswith("orange: less likely")  # log-prob's key
            page.select_option("#token-colour", "gap")
            assert legend.inner_text().startswith("blue: the rollout engine more sure")  # follows the select
            colours = page.locator("#tokens .tok").evaluate_all("els => els.map((e) => e.style.backgroundColor)")
            assert colours[0].startswith("rgba(40, 90, 220")  # the engine surer than the actor: blue
            assert colours[1] in ("rgba(40, 90, 220, 0)", "rgba(170, 40, 170, 0)")  # no gap: transparent
            assert colours[2].startswith("rgba(170, 40, 170")  # the actor surer: purple
            assert colours[3] == ""  # not sampled by the engine: no value
        finally:
            browser.close()
    assert not errors and not unexpected, (errors, unexpected)
