"""Journey 6: hostile text (dataset question, model text, tool output, token pieces, names) is shown
as text everywhere in a real Chromium: the dataset preview, the live samples table, the transcript
and the token view leave `document.title` alone and fire no dialog.

The dataset goes in through the upload page's drop zone and the real worker's validation; the
samples go in through the real ingest endpoint (with the run's token) while the run page is open.
"""
from __future__ import annotations

import re
import json

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.title='pwned'\">"
ALERT = "<img src=x onerror=\"alert('xss')\">"
HOSTILE = f"What is 2+3? {SCRIPT} {IMG}"
T0 = 1_764_440_000.0


def _rows() -> str:
    rows = [{"question": HOSTILE, "answer": "2+3=5\n#### 5"},
            {"question": f"What is 4*4? {ALERT}", "answer": "#### 16"},
            {"question": "What is 1+1?", "answer": "#### 2"}]
    return "".join(json.dumps(r) + "\n" for r in rows)


# The prompt's stable key as the trainer reports it (the uid is new at each draw).
KEY = {"prompt_split": "train", "prompt_index": 0, "prompt_hash": "0123456789abcdef" * 2}


def _sample(seq: int, index: int, step: int = 1, uid: str = f"p0{IMG}") -> dict:
    """A sample whose model text, tool call, tool output and token pieces all carry the payloads."""
    messages = [
        {"role": "user", "content": HOSTILE},
        {"role": "assistant", "content": f"Let me compute {SCRIPT}",
         "tool_calls": [{"name": "calculator", "arguments": {"expression": f"2+3 {IMG}"}}]},
        {"role": "tool", "content": f"5 {IMG} {ALERT}"},
        {"role": "assistant", "content": f"#### 5 {SCRIPT}{ALERT}"},
    ]
    pieces = ["#", SCRIPT, IMG, ALERT, " 5"]
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": uid, "index": index, "reward": 1.0, "advantage": 0.5, **KEY,
        "response_length": len(pieces), "num_turns": 2, "finish_reason": "stop", "tool_calls": 1,
        "messages": messages,
        "token_view": {"ids": list(range(10, 10 + len(pieces))), "pieces": pieces,
                       "loss_mask": [1, 1, 0, 1, 1], "logprobs": [-0.1, -2.0, -0.5, -1.0, -0.2],
                       "ref_logprobs": None, "advantages": [0.5] * len(pieces)}}}


def _assert_untouched(page, expected_title: str) -> None:
    page.wait_for_timeout(400)  # a failed <img> fires onerror asynchronously
    assert page.title() == expected_title
    assert page.evaluate("document.title") != "pwned"
    assert page.dialogs == [], page.dialogs


def test_hostile_text_is_escaped_in_preview_samples_transcript_and_tokens(page_as, make_user, register_model,
                                                                             ingest, shot):
    from rlstudio.catalog.models import Dataset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import Sample

    alice = make_user("alice")
    model = register_model(alice)
    # No run of hers is ever admitted: the run below stays queued and only the ingest API writes to it.
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    page = page_as(alice)

    # --- the dataset: dropped on the upload page, validated by the worker, previewed
    page.goto("/datasets/upload/")
    page.fill("input[name=name]", f"xss {ALERT}")
    page.select_option("select[name=preset]", "gsm8k")
    page.evaluate("""([name, text]) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], name, {type: "application/json"}));
        document.getElementById("dropzone").dispatchEvent(
            new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", ["hostile.jsonl", _rows()])
    assert page.locator("#file-name").inner_text() == "hostile.jsonl"
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"), timeout=60_000)
    page.wait_for_selector("#dataset-status[data-status=ready]", timeout=90_000)
    page.wait_for_load_state("load")
    ds = Dataset.objects.get(owner=alice)
    assert ds.status == "ready" and ds.num_rows == 3
    title = f"Dataset #{ds.pk} · {ds.name} — RL Studio"
    _assert_untouched(page, title)
    preview = page.locator(".chat-row .msg pre").all_inner_texts()
    assert any(HOSTILE in t for t in preview) and any(ALERT in t for t in preview), (
        preview, page.locator("main").inner_html()[:6000])
    assert page.locator(".chat-row img").count() == 0 and page.locator(".chat-row script").count() == 0
    shot(page, "xss-dataset-preview")

    # --- a run's samples arrive live on the open page
    run, token = run_create(owner=alice, name=f"xss-run {ALERT}", dataset=ds, model=model,
                            config={"trainer": {"total_training_steps": 3}}, gpus=0)
    page.goto(f"/runs/{run.pk}/")
    run_title = f"Run #{run.pk} · {run.name} — RL Studio"
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    page.evaluate("window.__noReload = 1")
    assert page.locator("#samples-body tr.empty").count() == 1
    result = ingest(run.pk, token, [_sample(1, 0), _sample(2, 1)])
    assert result == {"accepted": 2, "duplicates": 0, "refused": []}
    page.wait_for_function("document.querySelectorAll('#samples-body tr:not(.empty)').length === 2")
    assert page.evaluate("window.__noReload") == 1  # appeared live, without a reload
    first = page.locator("#samples-body tr").first
    assert first.locator("td").nth(8).inner_text() == "yes"  # the tool column
    prompt_href = first.locator("td.prompt a").get_attribute("href")  # run_live.js names the prompt's key
    assert f"prompt_hash={KEY['prompt_hash']}" in prompt_href and "uid=" not in prompt_href
    assert page.locator("#samples-body img").count() == 0
    _assert_untouched(page, run_title)
    shot(page, "xss-samples-live")
    # Metric names are shown as typed in the panels' titles and the charts' trace names (hover text):
    # Plotly reads a few tags (<b>, <a href>, <br>) in names, so run_live.js escapes them
    # (window.rlstudioPlotlyText) and Plotly shows the text as typed.
    hostile_metrics = {"custom/a <b>bold<br>": 1.0, f"custom/b {IMG}": 2.0}  # a panel's name: after the last /
    page.evaluate("""(metrics) => window.rlstudioLive.apply({seq: window.rlstudioLive.lastSeq() + 1,
        type: "metrics", time: Date.now() / 1000, data: {step: 1, metrics}})""", hostile_metrics)
    page.wait_for_function("document.querySelectorAll('#charts .plot .main-svg').length >= 2")
    names = page.evaluate("""() => [...document.querySelectorAll('#charts .plot')].flatMap(
        (d) => (d.data || []).map((t) => t.name))""")
    escaped = [f"{k[len('custom/'):]}".replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
               for k in hostile_metrics]
    assert escaped[0] == "a &lt;b&gt;bold&lt;br&gt;" and all(e in names for e in escaped), names
    titles = page.locator("#charts .chart h4").all_text_contents()
    assert "custom/a <b>bold<br>" in titles and f"custom/b {IMG}" in titles, titles
    assert page.locator("#charts img, #charts b").count() == 0
    _assert_untouched(page, run_title)
    # The server-rendered table (a reload) escapes too.
    page.reload()
    page.wait_for_selector("#samples-body tr td a")
    _assert_untouched(page, run_title)

    # --- the transcript with its tool call, then the token view
    sample = Sample.objects.filter(run=run).order_by("index").first()
    page.goto(f"/runs/{run.pk}/samples/{sample.pk}/")
    tr_title = f"Sample {sample.pk} · {run.name} — RL Studio"
    _assert_untouched(page, tr_title)
    chat = page.locator("#tab-chat")
    assert chat.locator(".toolcall code").inner_text() == "calculator"
    assert json.loads(chat.locator(".toolcall pre").inner_text()) == {"expression": f"2+3 {IMG}"}
    roles = chat.locator(".msg .role").all_inner_texts()
    assert [r.split(" ·")[0].lower() for r in roles] == ["user", "assistant", "tool", "assistant"], roles
    texts = chat.locator(".msg pre.content").all_inner_texts()
    assert f"5 {IMG} {ALERT}" in texts and HOSTILE in texts
    assert chat.locator("img, script").count() == 0
    assert page.locator("ul.messages").count() == 0  # the transcript is not listed as flash messages
    shot(page, "xss-transcript")
    page.click(".tabs button[data-tab=tokens]")
    assert page.locator("#tab-tokens").is_visible() and not page.locator("#tab-chat").is_visible()
    toks = page.locator("#tokens .tok")
    assert toks.all_inner_texts() == ["#", SCRIPT, IMG, ALERT, " 5"]
    assert page.locator("#tokens .tok.masked").count() == 1
    # Coloured by log-prob from data attributes: the lowest log-prob gets the strongest colour.
    assert toks.nth(1).evaluate("e => e.style.backgroundColor") != ""
    page.select_option("#token-colour", "adv")
    _assert_untouched(page, tr_title)
    assert page.locator("#tokens img, #tokens script").count() == 0

    # --- the group view and the prompt history show the same text, escaped
    page.goto(f"/runs/{run.pk}/groups/?step=1")
    _assert_untouched(page, page.title())
    assert page.title() != "pwned"
    # the same prompt drawn again at step 2 (a new uid): the live row's link shows both steps
    assert ingest(run.pk, token, [_sample(3, 0, step=2, uid=f"p1{IMG}"), _sample(4, 1, step=2, uid=f"p1{IMG}")])[
        "accepted"] == 2
    page.goto(prompt_href)
    _assert_untouched(page, page.title())
    assert page.title() != "pwned" and page.dialogs == []
    assert [r.get_attribute("data-step") for r in page.locator("tr.prompt-step").all()] == ["1", "2"]
