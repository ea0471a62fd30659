"""The run page's header and details follow a real run without a reload (issue 15, items 4 and 6),
in a real Chromium against the whole platform (Celery, Ray, the trainer on the CPU):

- launched through /runs/new/, the page opens with the run not started ("—" for started, heartbeat,
  duration) and a flash message naming its status; while it runs, without a reload, the badge says
  running, "Started" and "Last heartbeat" fill in, the duration ticks, the heartbeat moves on, and the
  flash message names the status now (never "submitting" once it runs); when it succeeds, "Finished"
  fills in and the duration stops;
- the group view of a step shows all n = 4 samples of a prompt with the trainer's own mean and std.
"""
from __future__ import annotations

import json
import statistics

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

STEPS = 4


def _rows() -> str:
    rows = [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
            for a, b in ((2, 3), (4, 4), (7, 1), (5, 6), (9, 2), (3, 8), (6, 6), (1, 9))]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


DETAIL = "section.card dl.fields dd[data-run-field={}]"
HEADER = "#run-controls [data-run-field={}]"
BADGE = "document.querySelector('#run-controls .badge').textContent.trim()"
FIELD = "(document.querySelector(\"section.card dl.fields dd[data-run-field={}]\") || {{}}).textContent"


def test_header_and_details_follow_the_run(page_as, make_user, register_model, ui, tmp_path, shot):
    from django.template.defaultfilters import floatformat
    from django.utils.timezone import localtime

    from rlstudio.runs.models import Run
    from rlstudio.telemetry.models import Sample

    alice = make_user("alice")
    register_model(alice, "tiny-smoke")
    page = page_as(alice)
    data = tmp_path / "arith8.jsonl"
    data.write_text(_rows())
    ui.upload_dataset(page, data, name="arith-8", preset="gsm8k", timeout_ms=120_000)

    run_id = ui.launch_run(page, name="live-header", dataset="arith-8", model="tiny-smoke", steps=STEPS,
                           save_freq=-1, overrides="actor_rollout_ref.rollout.n=4")
    page.evaluate("window.__noReload = 1")
    flash = page.locator("ul.messages li").first
    assert flash.inner_text().startswith("Run “live-header” is ")
    first = {k: _text(page, DETAIL.format(k)) for k in ("started", "heartbeat", "duration", "finished")}
    badge = page.evaluate(BADGE)
    print("first paint:", badge, first, flash.inner_text())
    if badge in ("queued", "submitting"):  # the usual first paint: nothing has started yet
        assert first == {"started": "—", "heartbeat": "—", "duration": "—", "finished": "—"}
        assert flash.inner_text() == f"Run “live-header” is {badge}."
    shot(page, "live-header-submitted")

    # --- running: the badge, the times and the flash message change without a reload
    try:
        page.wait_for_function(f"""() => {BADGE} === 'running'
            && !['—', undefined].includes({FIELD.format('started')})
            && !['—', undefined].includes({FIELD.format('heartbeat')})""", timeout=420_000)
    except Exception:
        from rlstudio.runs.selectors import run_logs

        run = Run.objects.get(pk=run_id)
        log = "\n".join(run_logs(run=run, tail=40)["lines"])
        raise AssertionError(f"not seen running: run {run.status} step {run.step} error {run.error[-1500:]!r}; "
                             f"badge {page.evaluate(BADGE)!r}; job {run.ray_submission_id!r} log:\n{log}")
    started, heartbeat = _text(page, DETAIL.format("started")), _text(page, DETAIL.format("heartbeat"))
    run = Run.objects.get(pk=run_id)
    assert started.startswith(localtime(run.started).strftime("%Y-%m-%d %H:%M:%S"))  # the stored time
    assert _text(page, HEADER.format("started")) == started  # the header says the same
    duration = _text(page, DETAIL.format("duration"))
    assert duration != "—"
    # The duration ticks while the run runs (a 4-step run may also finish within these seconds on a loaded
    # machine; its final duration is checked below)
    page.wait_for_function(f"() => {FIELD.format('duration')} !== {json.dumps(duration)} "
                           f"|| {BADGE} === 'succeeded'", timeout=5_000)
    # The heartbeat moves on (cpu_smoke sends one a second) unless the run has already finished: a
    # finished run sends no more heartbeats, and a 4-step run can end between two of them.
    page.wait_for_function(f"() => {FIELD.format('heartbeat')} !== {json.dumps(heartbeat)} "
                           f"|| {BADGE} === 'succeeded'", timeout=30_000)
    if _text(page, DETAIL.format("heartbeat")) == heartbeat:
        assert page.evaluate(BADGE) == "succeeded"
    # Badge, heartbeat age and flash read in one evaluation: a 4-step run may finish in between, and
    # a finished run's header has no heartbeat age.
    status_now, ago, flash_text = page.evaluate(f"""() => [{BADGE},
        document.querySelector({json.dumps(HEADER.format('heartbeat_ago'))}).textContent.trim(),
        document.querySelector('ul.messages li').textContent.trim()]""")
    assert status_now in ("running", "succeeded")
    if status_now == "running":
        assert ago.endswith(" s ago)"), ago
        assert flash_text == "Run “live-header” is running."
    assert "submitting" not in flash.inner_text()
    page.evaluate("document.getElementById('run-controls').scrollIntoView()")
    shot(page, "live-header-running")

    # --- succeeded: "Finished" fills in and the duration stops
    page.wait_for_function(f"() => {BADGE} === 'succeeded'", timeout=300_000)
    page.wait_for_function(f"() => {FIELD.format('finished')} !== '—'", timeout=15_000)
    assert flash.inner_text() == "Run “live-header” is succeeded."
    final = _text(page, DETAIL.format("duration"))
    page.wait_for_timeout(2_500)
    assert _text(page, DETAIL.format("duration")) == final == _text(page, HEADER.format("duration"))
    run.refresh_from_db()
    seconds = int((run.finished - run.started).total_seconds())
    assert final == f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    assert page.evaluate("document.getElementById('live-progress').value") == 100  # the details' bar too
    shot(page, "live-header-succeeded")

    # --- the group view of step 1: all 4 samples of a prompt, with the trainer's mean and std
    sample = Sample.objects.filter(run_id=run_id, step=1).order_by("seq").first()
    group = list(Sample.objects.filter(run_id=run_id, step=1, uid=sample.uid))
    assert len(group) == 4 and sample.transcript["group_size"] == 4
    assert sample.transcript["group_mean"] == pytest.approx(statistics.mean(s.reward for s in group), abs=1e-6)
    page.goto(f"/runs/{run_id}/groups/?step=1&uid={sample.uid}")
    assert page.locator(".sample-card").count() == 4
    assert _text(page, ".group-mean") == floatformat(sample.transcript["group_mean"], 4)
    assert _text(page, ".group-std") == floatformat(sample.transcript["group_std"], 4)
    assert page.locator(".group-source").get_attribute("data-source") == "trainer"
    shot(page, "live-header-group")
