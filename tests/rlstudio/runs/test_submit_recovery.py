"""A run whose submit task never got out (broker down) or got lost (submitting, no Ray job).

Real PostgreSQL; no Ray, no worker here. The paths that need Ray's answer and a real worker are in
tests/e2e/test_run_lifecycle.py; the broker outage through a real Daphne in tests/e2e/test_broker_outage.py.
"""
from datetime import timedelta

import pytest
from django.utils import timezone

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs import launch, run_secrets
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.reconcile import ADOPT, FAIL, RESEND, WAIT, decide_unsubmitted, reconcile_run
from rlstudio.runs.services import (
    SUBMIT_UNSENT_REASON,
    run_adopt_job,
    run_requeue_unsent,
    run_resubmit,
    run_token_check,
    run_transition,
)

pytestmark = pytest.mark.django_db
S = RunStatus


@pytest.mark.parametrize("waited,known,resends,expected", [
    (10, None, 0, WAIT),     # within the timeout: the task may be queued behind others
    (10, False, 0, WAIT),    # even when Ray was asked
    (121, None, 0, WAIT),    # Ray not asked yet
    (121, True, 0, ADOPT),   # Ray has the job: record it
    (121, True, 2, ADOPT),   # ... whatever the re-sends
    (121, False, 0, RESEND),
    (121, False, 1, RESEND),
    (121, False, 2, FAIL),   # re-sends spent
])
def test_decide_unsubmitted(waited, known, resends, expected):
    assert decide_unsubmitted(waited_s=waited, timeout_s=120, job_known=known, resends=resends,
                              max_resends=2) == expected


@pytest.fixture
def submitting(alice, make_run):
    run = make_run(alice, "stuck")
    return run_transition(run=run, to=S.SUBMITTING)


def test_entering_submitting_stamps_the_submit_time_and_clears_the_resends(submitting):
    run = Run.objects.get(pk=submitting.pk)
    assert run.submit_requested is not None and run.submit_resends == 0
    assert abs((timezone.now() - run.submit_requested).total_seconds()) < 60
    Run.objects.filter(pk=run.pk).update(submit_resends=2)
    run_transition(run=run, to=S.QUEUED, reason="x")
    run_transition(run=run, to=S.SUBMITTING)
    assert Run.objects.get(pk=run.pk).submit_resends == 0


def test_an_unsent_submit_puts_the_run_back_in_the_queue_with_the_reason(submitting):
    assert run_requeue_unsent(run_id=submitting.pk, error="Error 111 connecting to 127.0.0.1:1")
    run = Run.objects.get(pk=submitting.pk)
    assert run.status == S.QUEUED and run.queue_reason == SUBMIT_UNSENT_REASON
    unsent = AuditEvent.objects.get(action="run.submit_unsent", object_id=str(run.pk))
    assert "Error 111" in unsent.data["error"]
    assert not run_requeue_unsent(run_id=run.pk, error="again")  # only a submitting run moves


def test_an_unsent_submit_does_not_undo_a_submission_that_happened(submitting):
    Run.objects.filter(pk=submitting.pk).update(ray_submission_id="rlstudio-run-x")
    assert not run_requeue_unsent(run_id=submitting.pk, error="late")
    assert Run.objects.get(pk=submitting.pk).status == S.SUBMITTING


def test_resubmit_counts_and_restarts_the_timeout(submitting):
    old = timezone.now() - timedelta(minutes=10)
    Run.objects.filter(pk=submitting.pk).update(submit_requested=old)
    assert run_resubmit(run_id=submitting.pk)
    run = Run.objects.get(pk=submitting.pk)
    assert run.submit_resends == 1 and run.submit_requested > old
    assert AuditEvent.objects.get(action="run.resubmit", object_id=str(run.pk)).data == {"resend": 1}
    Run.objects.filter(pk=run.pk).update(ray_submission_id="rlstudio-run-y")
    assert not run_resubmit(run_id=run.pk)  # submitted meanwhile: nothing to send


def test_adopting_a_job_takes_its_spec_and_its_ingest_token(submitting, settings, tmp_path):
    settings.RUNS_DIR = tmp_path
    # What the lost task froze and wrote before it submitted (run_submit writes spec.json first).
    spec = {"trainer": {"default_local_dir": str(tmp_path / str(submitting.pk)), "total_training_steps": 7}}
    launch.write_spec(spec, tmp_path / str(submitting.pk))
    run_secrets.write_token(tmp_path / str(submitting.pk), "rit_the-jobs-token")  # written for the job
    assert run_adopt_job(run_id=submitting.pk, submission_id="rlstudio-run-z")
    run = Run.objects.get(pk=submitting.pk)
    assert run.ray_submission_id == "rlstudio-run-z" and run.status == S.SUBMITTING
    assert run.config == spec and run.total_steps == 7
    assert run_token_check(run=run, token="rit_the-jobs-token")
    assert AuditEvent.objects.get(action="run.adopt", object_id=str(run.pk)).data["token"] is True
    assert not run_adopt_job(run_id=run.pk, submission_id="another")


def test_reconcile_leaves_a_submitting_run_alone_within_the_timeout(submitting, settings):
    # No RAY_ADDRESS: asking Ray would raise RayUnavailable, so this also shows Ray is not asked.
    settings.RAY_ADDRESS = None
    settings.RLSTUDIO_SUBMIT_TIMEOUT_S = 120
    assert reconcile_run(Run.objects.get(pk=submitting.pk)) is None
    assert Run.objects.get(pk=submitting.pk).status == S.SUBMITTING


def test_reconcile_asks_ray_about_a_run_submitting_past_the_timeout(submitting, settings):
    from rlstudio.runs import ray_jobs

    settings.RAY_ADDRESS = None  # asking Ray raises: the reconcile pass stops there, deciding nothing
    settings.RLSTUDIO_SUBMIT_TIMEOUT_S = 120
    Run.objects.filter(pk=submitting.pk).update(submit_requested=timezone.now() - timedelta(seconds=121))
    with pytest.raises(ray_jobs.RayUnavailable):
        reconcile_run(Run.objects.get(pk=submitting.pk))
    run = Run.objects.get(pk=submitting.pk)
    assert run.status == S.SUBMITTING and run.submit_resends == 0


def test_a_submit_task_that_was_slow_not_lost_wins_over_the_reconciles_failure(submitting, settings, monkeypatch):
    """The reconcile asks Ray (no job), decides to fail the run (its re-sends spent), and meanwhile the
    slow submit task commits the submission: the run is not failed under its live Ray job."""
    from rlstudio.runs import ray_jobs

    settings.RLSTUDIO_SUBMIT_TIMEOUT_S = 120
    Run.objects.filter(pk=submitting.pk).update(submit_requested=timezone.now() - timedelta(seconds=121),
                                                submit_resends=2)

    def job_info(sid):
        Run.objects.filter(pk=submitting.pk).update(ray_submission_id=sid)  # the submit task commits now
        return None

    monkeypatch.setattr(ray_jobs, "job_info", job_info)
    assert reconcile_run(Run.objects.get(pk=submitting.pk)) is None
    run = Run.objects.get(pk=submitting.pk)
    assert run.status == S.SUBMITTING and run.ray_submission_id and not run.error
    # a submit task that died after Ray took its job (nothing recorded): Ray is asked again under the lock
    asked = []

    def job_info_later(sid):  # none when the reconcile asks first, the job when it asks under the lock
        asked.append(sid)
        return None if len(asked) == 1 else ray_jobs.JobInfo(sid, ray_jobs.RUNNING, "", None)

    Run.objects.filter(pk=run.pk).update(ray_submission_id=None)
    monkeypatch.setattr(ray_jobs, "job_info", job_info_later)
    assert reconcile_run(Run.objects.get(pk=run.pk)) is None and len(asked) == 2
    assert Run.objects.get(pk=run.pk).status == S.SUBMITTING  # the next pass adopts the job
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: None)
    assert reconcile_run(Run.objects.get(pk=run.pk)) == S.FAILED  # really lost: failed, saying so
    assert "not submitted to Ray" in Run.objects.get(pk=run.pk).error


def _write_events(path, events, tail=""):
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail, encoding="utf-8")


def _job_events(steps: int = 2) -> list[dict]:
    """What the trainer's JSONL sink writes for a short run: starting, running, a metrics event per
    step, succeeded (the shapes of a real cpu_smoke events.jsonl)."""
    events = [{"seq": 1, "type": "status", "time": 1.0, "data": {"state": "starting", "message": "loading",
                                                                 "step": 0, "total_steps": 0}},
              {"seq": 2, "type": "status", "time": 2.0, "data": {"state": "running", "message": "training",
                                                                 "step": 0, "total_steps": steps}}]
    for step in range(1, steps + 1):
        events.append({"seq": 2 + step, "type": "metrics", "time": 2.0 + step,
                       "data": {"step": step, "metrics": {"critic/score/mean": 0.25 * step}}})
    events.append({"seq": 3 + steps, "type": "status", "time": 9.0,
                   "data": {"state": "succeeded", "message": "done", "step": steps, "total_steps": steps}})
    return events


def test_adopting_a_job_stores_the_reports_it_made_before(submitting, settings, tmp_path):
    """The job reported while its token was unknown here (refused) and finished: its events file
    brings the run to its end, as its reports would have; a second pass stores nothing twice."""
    from rlstudio.telemetry.models import MetricRow, RunEvent

    settings.RUNS_DIR = tmp_path
    # a half-written last line (the job still writing) is skipped, not an error
    _write_events(tmp_path / str(submitting.pk) / "events.jsonl", _job_events(), tail='{"seq": 6, "ty')
    assert run_adopt_job(run_id=submitting.pk, submission_id="rlstudio-run-z")
    run = Run.objects.get(pk=submitting.pk)
    assert run.status == S.SUCCEEDED and run.ray_submission_id == "rlstudio-run-z"
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [1, 2, 3, 4, 5]
    assert MetricRow.objects.filter(run=run).count() == 2
    from rlstudio.telemetry.backfill import backfill_local_events as run_backfill_local_events

    assert run_backfill_local_events(run_id=run.pk) == 0  # all stored already


def test_backfill_keeps_what_arrived_and_adds_only_the_missing(submitting, settings, tmp_path):
    from rlstudio.telemetry.backfill import backfill_local_events as run_backfill_local_events
    from rlstudio.telemetry.models import RunEvent
    from rlstudio.telemetry.services import events_ingest

    settings.RUNS_DIR = tmp_path
    events = _job_events(steps=3)
    events_ingest(run=submitting, raw_events=events[:3])  # what got through before
    _write_events(tmp_path / str(submitting.pk) / "events.jsonl", events)
    assert run_backfill_local_events(run_id=submitting.pk) == len(events) - 3
    assert RunEvent.objects.filter(run=submitting).count() == len(events)
    assert Run.objects.get(pk=submitting.pk).status == S.SUCCEEDED


def test_backfill_without_an_events_file_does_nothing(submitting, settings, tmp_path):
    from rlstudio.telemetry.backfill import backfill_local_events as run_backfill_local_events

    settings.RUNS_DIR = tmp_path  # the job ran elsewhere: no file in this machine's run folder
    assert run_backfill_local_events(run_id=submitting.pk) == 0
    assert Run.objects.get(pk=submitting.pk).status == S.SUBMITTING
