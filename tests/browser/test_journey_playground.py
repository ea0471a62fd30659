"""Journey: the playground in a real Chromium under the site's Content-Security-Policy (not bypassed).

"Talk to it" on a run's page (next to each checkpoint) and on the Models page opens the playground with
that target chosen. Two catalog models side by side answer the same message: the real Celery worker generates, the text
streams over the websocket into both columns (docs' screenshot `19-playground`). Then hostile text as
model output (a `<script>`, an `<img onerror>`, as a delta and as a tool reply, published on the
session's real event log and group while the page listens) and as the user's own message is shown as
text: no element is made from it, the title stays, no dialog opens. Stop ends the session, and the
browser reported no CSP violation.

The page closes its socket on the session's `end` event, and the tiny model can answer within a
fraction of a second: the hostile session is held open by pausing the test's Celery worker's
consumption of the queue (its task waits queued) until the page has shown the hostile text and Stop
has ended it. Streaming a real answer is the first session's part.
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
from playwright.sync_api import expect

from tests.browser.test_csp import _violations, _watch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.title='pwned'\">"
ALERT = "<img src=x onerror=\"alert('xss')\">"


def test_two_models_answer_side_by_side_and_model_text_stays_text(page_as, make_user, register_model, model_root,
                                                                  shot, ui, tmp_path):
    from rlstudio.catalog.models import Dataset
    from rlstudio.catalog.services.model_assets import model_register
    from rlstudio.playground.models import PlaygroundSession
    from rlstudio.playground.runner import Pump
    from rlstudio.runs.models import Run
    from trainer.models.tiny import make_tiny_model

    alice = make_user("alice")
    first = register_model(alice, "tiny-smoke")
    other = model_root / "tiny-smoke-seed1"
    if not other.exists():
        make_tiny_model(other, preset="smoke", seed=1)
    second = model_register(owner=alice, name="tiny-smoke-seed1", path=str(other))
    # A finished run as the platform records one (its frozen spec names its own folder), with a committed
    # checkpoint at step 3: only its page's link is followed here, nothing is generated from it.
    data = Dataset.objects.create(owner=alice, name="arith", file_path=str(tmp_path / "a.jsonl"), sha256="a1" * 32,
                                  status="ready")
    run = Run.objects.create(owner=alice, name="talk-run", dataset=data, model=first, status="succeeded", step=3)
    folder = tmp_path / "runs" / str(run.pk)
    (folder / "global_step_3" / "actor").mkdir(parents=True)
    Run.objects.filter(pk=run.pk).update(config={"trainer": {"default_local_dir": str(folder)}},
                                         ray_submission_id=f"rlstudio-run-{run.pk}-done")
    page = page_as(alice, bypass_csp=False)
    console = _watch(page)
    page.goto("/playground/")
    expect(page.locator("header nav a", has_text="Playground")).to_be_visible()
    page.select_option("#pg-target-a", f"model:{first.pk}")
    page.select_option("#pg-target-b", f"model:{second.pk}")
    page.fill("input[name=max_new_tokens]", "40")
    page.fill("input[name=seed]", "1")
    page.fill("#pg-system", "You are a careful assistant.")
    page.fill("#pg-input", "What is 2+3?")
    page.click("#pg-send-button")
    for col in ("a", "b"):  # each column: the user's message, then the streamed answer and its figures
        expect(page.locator(f"#pg-chat-{col} .pg-user")).to_have_text("userWhat is 2+3?")
        expect(page.locator(f"#pg-chat-{col} .pg-meta")).to_contain_text("tokens", timeout=120_000)
    expect(page.locator("#pg-status")).to_have_text("succeeded", timeout=30_000)
    session = PlaygroundSession.objects.filter(owner=alice).latest("created")
    assert session.status == "succeeded" and set(session.results) == {"a", "b"}
    answer_a = [t["content"] for t in session.results["a"]["turns"] if t["role"] == "assistant"][-1]
    shown = page.locator("#pg-chat-a .pg-assistant").text_content()
    assert shown.removeprefix("assistant").strip() == answer_a
    assert session.messages["a"][0] == {"role": "system", "content": "You are a careful assistant."}
    shot(page, "19-playground")

    # Hostile text: the user's own message, and model text arriving on the session's stream while the
    # session is held queued (see the module docstring): the page listens for as long as the test needs.
    from django.conf import settings

    from rlstudio.config.celery import app

    worker = f"test-{os.getpid()}@{socket.gethostname()}"  # tests/conftest.py's worker (-n test-<pid>@%h)
    queue = settings.RLSTUDIO_PLAYGROUND_QUEUE or app.conf.task_default_queue
    replies = app.control.cancel_consumer(queue, destination=[worker], reply=True, timeout=10)
    assert [list(r) for r in replies] == [[worker]] and "ok" in replies[0][worker], replies
    try:
        page.select_option("#pg-target-b", "")
        page.fill("#pg-input", f"Hi {SCRIPT}")
        page.click("#pg-send-button")
        expect(page.locator("#pg-status")).to_have_text("answering…")
        hostile = PlaygroundSession.objects.filter(owner=alice).exclude(pk=session.pk).get()
        pump = Pump(hostile.pk)
        events = [{"type": "delta", "target": "a", "turn": 0, "text": f"model says {SCRIPT} {IMG}"},
                  {"type": "tool", "target": "a", "turn": 0, "name": f"calc{ALERT}", "arguments": IMG,
                   "result": f"5 {SCRIPT}"}]
        # Playwright's sync API keeps a loop running on this thread: publish from a thread of its own.
        sender = threading.Thread(target=lambda: asyncio.run(pump.send(events)))
        sender.start()
        sender.join(timeout=30)
        said = page.locator("#pg-chat-a .pg-assistant").filter(has_text="model says")
        expect(said).to_have_text(f"assistantmodel says {SCRIPT} {IMG}")
        expect(page.locator("#pg-chat-a .pg-tool").filter(has_text="calc")).to_contain_text(f"calc{ALERT}({IMG})")
        expect(page.locator("#pg-chat-a .pg-user").last).to_have_text(f"userHi {SCRIPT}")
        page.wait_for_timeout(400)  # a failed <img> fires onerror asynchronously
        assert page.locator("#pg-columns script, #pg-columns img").count() == 0
        assert page.title() == "Playground — RL Studio"
        assert page.dialogs == [], page.dialogs
        hostile.refresh_from_db()
        assert hostile.status == "queued"  # held: the page heard these while the session was still open
        expect(page.locator("#pg-status")).to_have_text("answering…")
        page.click("#pg-stop")  # Stop ends it (a queued session at once)
        ui.wait_for(lambda: PlaygroundSession.objects.get(pk=hostile.pk).status == "stopped", timeout=60,
                    what="the stopped session")
        assert PlaygroundSession.objects.get(pk=hostile.pk).stop_reason == "stopped by the user"
    finally:
        replies = app.control.add_consumer(queue, destination=[worker], reply=True, timeout=10)
    assert [list(r) for r in replies] == [[worker]] and "ok" in replies[0][worker], replies
    seen = _violations(page, console)
    assert seen == [], "\n".join(seen)

    # "Talk to it" on the run's page (next to its checkpoint) and on the Models page: the playground opens
    # with that target chosen.
    page.goto(f"/runs/{run.pk}/")
    page.locator('#checkpoint-list tr[data-step="3"] a.talk-link').click()
    page.wait_for_url(f"**/playground/?target=run:{run.pk}:3")
    expect(page.locator("#pg-target-a")).to_have_value(f"run:{run.pk}:3")
    page.goto("/models/")
    page.locator(f'tr[data-model-id="{second.pk}"] a.talk-link').click()
    expect(page.locator("#pg-target-a")).to_have_value(f"model:{second.pk}")


def test_empty_settings_are_left_out_of_the_session_request(page_as, make_user, register_model):
    """A settings box left empty is left out of the request (the server's default applies): it once
    went as 0, so an empty temperature answered greedily without a word and an empty budget was refused
    as 0 new tokens."""
    import json

    alice = make_user("alice")
    model = register_model(alice, "tiny-smoke")
    page = page_as(alice)
    page.goto(f"/playground/?target=model:{model.pk}")
    sent = []

    def answer(route):
        sent.append(json.loads(route.request.post_data))
        route.fulfill(status=400, content_type="application/json",
                      body=json.dumps({"error": {"code": "invalid", "message": "answered by the test", "field": None}}))

    page.route("**/api/v1/playground/sessions/", answer)
    for name in ("temperature", "top_p", "top_k", "max_new_tokens", "max_turns"):
        page.fill(f"#pg-form input[name={name}]", "")
    page.fill("#pg-input", "What is 2 + 2?")
    page.click("#pg-send-button")
    expect(page.locator("#pg-error")).to_have_text("answered by the test")
    assert len(sent) == 1 and [t["model"] for t in sent[0]["targets"]] == [model.pk]
    assert sent[0]["settings"] == {"tools": False}, sent[0]
