"""Journeys 1–4 in a real Chromium against the whole running platform, as one user's afternoon:

1. log in; upload GSM8K's test split with the gsm8k preset through the upload page; the worker makes it
   ready; see its preview; run the reward check on its page;
2. launch a cpu_smoke run on a tiny model through /runs/new/; on the run page, without reloading, the
   reward chart gets points and the samples table gets rows; open a transcript, switch to tokens;
3. stop the run with "save a checkpoint first" ticked, see it stopped with its checkpoint; resume it
   and see the new run continue after that step;
4. fork the stopped run from its checkpoint: a key a fork may not change is refused naming it; with a
   new learning rate the fork's page says where it started and what it changed, and it runs.

One test because each step needs the one before (the database is flushed between tests).
"""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

REWARD_TRACE = """() => {
    const plot = document.querySelector('#charts .plot[data-family="critic/score"]');
    const t = plot && (plot.data || []).find((d) => d.meta === 'critic/score/mean');
    return t ? t.x.length : 0;
}"""


def _badge(page) -> str:
    return page.locator("#run-controls .badge").inner_text().strip().lower()


def _reload_until(page, pred, *, timeout_s: float, what: str):
    """What a user does: reload the page every couple of seconds until it shows `pred`."""
    import time

    from playwright.sync_api import Error as PlaywrightError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            page.reload()
            page.wait_for_load_state("load")
        except PlaywrightError as exc:
            # A reload that meets a navigation still under way (the form's redirect, or the page's own
            # refresh) is refused by Chromium ("Not attached to an active page"): a user reloads again.
            if time.monotonic() > deadline:
                raise
            print(f"reload refused ({exc}); again")
            page.wait_for_timeout(500)
            continue
        if pred():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not shown within {timeout_s:.0f}s (badge {_badge(page)!r})")
        page.wait_for_timeout(2000)


def _poll(pred, *, timeout_s: float, what: str):
    import time

    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout_s:.0f} s")
        time.sleep(0.3)


def test_upload_check_launch_watch_stop_resume(page_as, make_user, register_model, ui, gsm8k_test_file):
    from rlstudio.catalog.models import Dataset
    from rlstudio.runs.models import Run

    alice = make_user("alice")
    register_model(alice, "tiny-smoke")
    page = page_as(alice)

    # --- 1. upload, ready, preview, reward check
    page.goto("/datasets/upload/")
    ui.shot(page, "01-dataset-upload")
    ds_id = ui.upload_dataset(page, gsm8k_test_file, name="gsm8k-test", timeout_ms=150_000)
    ds = Dataset.objects.get(pk=ds_id)
    assert ds.owner == alice and ds.num_rows == 1319 and ds.preset == "gsm8k"
    assert page.locator("#dataset-status").inner_text().strip().lower() == "ready"
    rows = page.locator(".chat-row")
    assert rows.count() == 5
    assert "Janet" in rows.first.inner_text() and rows.first.locator("code").inner_text() == "18"
    page.select_option("select[name=reward]", "gsm8k")
    page.check("input[name=tools][value=calculator]")
    page.click("button:has-text('Check on 3 rows')")
    page.wait_for_load_state("load")
    table = page.locator("section.card:has(h2:has-text('Reward check')) table tbody tr")
    checks = [[c.strip() for c in table.nth(i).locator("td").all_inner_texts()] for i in range(table.count())]
    by_kind = {}
    for row, kind, _answer, score, tool_score, _note in checks:
        by_kind.setdefault(kind, []).append((row, score, tool_score))
    assert [s for _, s, _ in by_kind["correct"]] == ["1.0"] * 3, checks
    assert [s for _, s, _ in by_kind["wrong"]] == ["0.0"] * 3, checks
    assert len(by_kind["tool_call:calculator"]) == 3, checks
    ui.shot(page, "02-dataset-reward-check")

    # --- 2. launch through the form; watch it live
    # The gsm8k preset's prompts (system prompt + question + instruction) are longer than cpu_smoke's
    # max_prompt_length of 256 tokens for the tiny model's small-vocabulary tokenizer: every one would
    # be filtered out ("0 usable prompts"), so the form raises the limit, as the stats card suggests.
    # Steps enough that the run is still going when the journey stops it (it is force-stopped at the end).
    run_id = ui.launch_run(page, name="grpo-live", dataset="gsm8k-test", model="tiny-smoke", steps=2000,
                           save_freq=-1, overrides="data.max_prompt_length=1024")
    run = Run.objects.get(pk=run_id)
    assert run.owner == alice and run.dataset_id == ds_id and run.total_steps == 2000
    assert run.config["trainer"]["total_training_steps"] == 2000
    assert run.config["data"]["max_prompt_length"] == 1024
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    page.evaluate("window.__noReload = 1")
    try:
        page.wait_for_function("(" + REWARD_TRACE + ")() >= 2", timeout=180_000)
    except Exception:
        run.refresh_from_db()
        raise AssertionError(f"no reward points: run {run.status} step {run.step} error {run.error[-1500:]!r}; "
                             f"page step {page.locator('#live-step').inner_text()} charts "
                             f"{page.locator('#charts').inner_text()[:500]!r} conn "
                             f"{page.locator('#live-conn').inner_text()!r}")
    page.wait_for_function("document.querySelectorAll('#samples-body tr:not(.empty)').length >= 2",
                           timeout=30_000)
    assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    assert int(page.locator("#live-step").inner_text()) >= 2
    assert page.locator("#live-reward").inner_text() != "—"
    assert _badge(page) == "running"
    # Scrolled by the page itself: Playwright's scroll waits for the element to hold still, and a
    # live card whose charts grow every step may not, for seconds, on a loaded machine.
    page.evaluate("document.getElementById('charts-card').scrollIntoView()")
    ui.shot(page, "03-run-live-charts")
    page.evaluate("document.getElementById('samples-card').scrollIntoView()")
    ui.shot(page, "04-run-live-samples")

    # A transcript: one with a tool call when the tiny model made one, else the first.
    links = page.locator("#samples-body tr:has(td:nth-child(9):text-is('yes')) a:text-is('transcript')")
    with_tool = links.count() > 0
    (links.first if with_tool else page.locator("#samples-body a:text-is('transcript')").first).click()
    page.wait_for_url(re.compile(r"/runs/\d+/samples/\d+/$"))
    chat = page.locator("#tab-chat .msg")
    assert chat.count() >= 2 and chat.first.locator(".role").text_content().strip() in ("user", "system")
    if with_tool:
        assert page.locator("#tab-chat .toolcall code").first.inner_text() == "calculator"
    ui.shot(page, "05-transcript")
    page.click(".tabs button[data-tab=tokens]")
    tokens = page.locator("#tokens .tok")
    assert page.locator("#tab-tokens").is_visible() and tokens.count() > 0
    assert page.locator("#tokens .tok.trained").count() > 0
    if with_tool:  # the tool's reply is in the view but not trained on
        assert page.locator("#tokens .tok.masked").count() > 0
    page.select_option("#token-colour", "adv")
    ui.shot(page, "06-transcript-tokens")

    # --- 3. stop with a checkpoint, see it stopped, resume
    page.goto(f"/runs/{run_id}/")
    box = page.locator("#run-controls input[name=checkpoint]")
    assert box.is_checked()
    with page.expect_navigation():  # the form's POST and its redirect back to the run page
        page.click("#run-controls button.danger:text-is('Stop')")
    page.wait_for_load_state("load")
    assert page.dialogs and page.dialogs[-1][0] == "confirm" and "grpo-live" in page.dialogs[-1][1]
    # Stopped, with its checkpoint in the details (the trainer's last batch and the reconcile's view of
    # the Ray job may land a moment apart on a loaded machine: a user reloads).
    _reload_until(page, lambda: _badge(page) == "stopped" and "global_step_" in page.locator("dl.fields").inner_text(),
                  timeout_s=120, what="stopped with its checkpoint")
    run.refresh_from_db()
    assert run.status == "stopped" and run.checkpoint_path, run.error
    done = int(run.checkpoint_path.rsplit("_", 1)[-1])
    assert done >= 2 and f"global_step_{done}" in page.locator("dl.fields").inner_text()
    ui.shot(page, "07-run-stopped")

    page.click("#run-controls button:text-is('Resume')")
    page.wait_for_url(lambda url: not url.rstrip("/").endswith(f"/runs/{run_id}"))
    child_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
    child = Run.objects.get(pk=child_id)
    # The spec the trainer runs (resume_from_path in it) is frozen onto the run by its submit task, which
    # may still be under way when its page opens.
    _poll(lambda: Run.objects.get(pk=child_id).ray_submission_id, timeout_s=60, what="the resumed run submitted")
    child.refresh_from_db()
    assert child.parent_id == run_id and child.config["trainer"]["resume_from_path"] == run.checkpoint_path
    assert page.locator(f"#run-controls a[href='/runs/{run_id}/']").count() == 1
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    # The resumed run's first step is the one after the checkpoint, seen live on its page.
    page.wait_for_function(f"Number(document.getElementById('live-step').textContent) >= {done + 1}",
                           timeout=150_000)
    # The page's step counter also follows heartbeats, which can come before the step's metrics row.
    import time

    deadline = time.monotonic() + 60
    while True:
        metrics = page.evaluate("fetch('/api/v1/runs/%d/metrics/').then((r) => r.json())" % child_id)
        if metrics["steps"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert metrics["steps"] and metrics["steps"][0]["step"] == done + 1, metrics["steps"][:3]
    ui.shot(page, "08-run-resumed")
    page.reload()
    with page.expect_navigation():
        page.click("#run-controls button:text-is('Force stop')")
    _reload_until(page, lambda: _badge(page) == "stopped", timeout_s=60, what="force-stopped")

    # --- 4. fork the stopped run from its checkpoint with a new learning rate
    page.goto(f"/runs/{run_id}/")
    page.click("#run-fork summary")
    assert page.locator("#id_fork_step option").first.get_attribute("value") == str(done)  # newest first
    # A key a fork may not change (the group size) is refused naming it, and nothing is made.
    page.fill("#id_fork_more", "actor_rollout_ref.rollout.n=3")
    with page.expect_navigation():
        page.click("#run-fork button[type=submit]")
    refusal = page.locator("ul.messages li.error").inner_text()
    assert "Not forked" in refusal and "actor_rollout_ref.rollout.n" in refusal, refusal
    assert not Run.objects.filter(parent_id=run_id, parent_kind="fork").exists()
    page.click("#run-fork summary")
    page.select_option("#id_fork_step", str(done))
    page.fill("#id_fork_lr", "5e-06")
    with page.expect_navigation():
        page.click("#run-fork button[type=submit]")
    fork_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
    assert fork_id not in (run_id, child_id)
    fork = Run.objects.get(pk=fork_id)
    assert fork.parent_id == run_id and fork.parent_kind == "fork"
    assert fork.resume_from.endswith(f"/global_step_{done}") and fork.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 5e-06
    assert f"fork of #{run_id} at step {done}" in page.locator("#run-lineage").inner_text()
    changes = page.locator("#fork-changes").inner_text()
    assert "actor_rollout_ref.actor.optim.lr: 0.0001 → 0.000005" in changes, changes  # the owner reads both
    ui.shot(page, "09-run-forked")
    # The fork is a real run: it starts, then is force-stopped so that nothing outlives the journey.
    _reload_until(page, lambda: _badge(page) == "running", timeout_s=150, what="the fork running")
    with page.expect_navigation():
        page.click("#run-controls button:text-is('Force stop')")
    _reload_until(page, lambda: _badge(page) == "stopped", timeout_s=60, what="the fork force-stopped")
