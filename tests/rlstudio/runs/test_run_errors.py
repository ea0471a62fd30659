"""A failed run's `error` (the reason, read by whoever reads the run) and `error_log` (the job log's
tail or the trainer's traceback, which name server paths: the owner's and staff's only).

The pure splitting and scrubbing (runs.failure), then each writer: the reconcile of a failed Ray job,
the trainer's failed status through the ingest, and any error stored by run_transition.
"""
from datetime import timedelta

import pytest
from django.utils import timezone

from rlstudio.runs import ray_jobs
from rlstudio.runs.failure import PATH_MARK, ray_failure, scrub_paths, stored_error, trainer_failure
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.reconcile import reconcile_run
from rlstudio.runs.services import run_transition

S = RunStatus

RAY_MESSAGE = ("Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
               "loading /srv/rlstudio/models/qwen-0.5b\n"
               "FileNotFoundError: /srv/rlstudio/datasets/7/train.parquet")
JOB_LOG = "\n".join([
    "starting the trainer",
    "dataset /srv/rlstudio/datasets/7/train.parquet",
    "model /srv/rlstudio/models/qwen-0.5b",
    "",
    "Traceback (most recent call last):",
    '  File "/opt/rlstudio/trainer/run.py", line 151, in run',
    "FileNotFoundError: /srv/rlstudio/datasets/7/train.parquet",
])
TRACEBACK = ("Traceback (most recent call last):\n"
             '  File "/opt/rlstudio/trainer/run.py", line 151, in run\n'
             "    trainer.setup()\n"
             '  File "/opt/rlstudio/trainer/data.py", line 40, in load\n'
             "    raise FileNotFoundError(path)\n"
             "FileNotFoundError: [Errno 2] No such file or directory: '/srv/rlstudio/datasets/7/train.parquet'\n")


@pytest.mark.parametrize("text,expected", [
    ("FileNotFoundError: '/srv/data/x.parquet'", f"FileNotFoundError: '{PATH_MARK}'"),
    ("trainer.resume_from_path /srv/runs/3/global_step_2 does not exist",
     f"trainer.resume_from_path {PATH_MARK} does not exist"),
    ("cache at ~/.cache/huggingface (x=/tmp/y)", f"cache at {PATH_MARK} (x={PATH_MARK})"),
    # not paths: metric names, fractions, URLs, a folder named relative to the run's folder
    ("critic/score/mean 3/10 at http://ray:8265/api/jobs/ and/or GB/s", None),
    ("exported the final policy (huggingface/ in the run's folder)", None),
    ("no heartbeat for 121 s", None),
])
def test_scrub_paths_replaces_absolute_paths_only(text, expected):
    assert scrub_paths(text) == (text if expected is None else expected)


def test_ray_failure_keeps_the_reason_and_gives_back_the_log_lines_ray_appended():
    reason, rest = ray_failure(RAY_MESSAGE)
    assert reason == "Job entrypoint command failed with exit code 1"
    assert rest.splitlines() == RAY_MESSAGE.splitlines()[1:]
    assert ray_failure("Job entrypoint command failed with exit code 1. No logs available.") == (
        "Job entrypoint command failed with exit code 1. No logs available.", "")
    assert ray_failure("") == ("", "")


def test_trainer_failure_takes_a_tracebacks_last_line_as_the_reason():
    reason, detail = trainer_failure(TRACEBACK)
    assert reason == "FileNotFoundError: [Errno 2] No such file or directory: '/srv/rlstudio/datasets/7/train.parquet'"
    assert detail == TRACEBACK.rstrip("\n")
    budget = "the run's folder holds 250.40 GB with only its newest checkpoint kept, more than its disk budget"
    assert trainer_failure(budget) == (budget, "")  # a message that is not a traceback is the reason
    # the trainer keeps a traceback's last 4000 characters: its start may be cut off
    assert trainer_failure(TRACEBACK[40:])[0] == reason


def test_stored_error_scrubs_the_reason_and_keeps_the_original_for_the_detail():
    assert stored_error("CUDA out of memory") == ("CUDA out of memory", "")
    assert stored_error("could not prepare the run: '/srv/runs/4'") == (
        f"could not prepare the run: '{PATH_MARK}'", "could not prepare the run: '/srv/runs/4'")
    reason, detail = trainer_failure(TRACEBACK)
    assert stored_error(reason, detail) == (scrub_paths(reason), detail)  # the traceback holds it already


@pytest.fixture
def running(alice, make_run, settings, tmp_path):
    settings.RUNS_DIR = tmp_path
    run = make_run(alice, "failing")
    Run.objects.filter(pk=run.pk).update(status=S.RUNNING, ray_submission_id="rlstudio-run-failing",
                                         started=timezone.now() - timedelta(minutes=5))
    return Run.objects.get(pk=run.pk)


def _ray_says_failed(monkeypatch, logs):
    job = ray_jobs.JobInfo(submission_id="rlstudio-run-failing", status=ray_jobs.FAILED, message=RAY_MESSAGE,
                           driver_exit_code=1)
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: job)
    monkeypatch.setattr(ray_jobs, "logs", logs)


@pytest.mark.django_db
def test_a_failed_jobs_log_tail_goes_to_the_error_log_not_the_error(running, monkeypatch, settings):
    settings.RLSTUDIO_ERROR_LOG_LINES = 4
    _ray_says_failed(monkeypatch, lambda submission_id, **kw: JOB_LOG)
    assert reconcile_run(running) == S.FAILED
    run = Run.objects.get(pk=running.pk)
    assert run.error == "Job entrypoint command failed with exit code 1"
    assert run.error_log == ray_jobs.tail_lines(JOB_LOG, 4)
    assert run.error_log.splitlines()[-1] == "FileNotFoundError: /srv/rlstudio/datasets/7/train.parquet"


@pytest.mark.django_db
def test_without_the_job_log_the_error_log_has_the_lines_ray_gave(running, monkeypatch, settings):
    settings.RLSTUDIO_ERROR_LOG_LINES = 1

    def unavailable(submission_id, **kw):
        raise ray_jobs.RayUnavailable("Ray is not reachable")

    _ray_says_failed(monkeypatch, unavailable)
    assert reconcile_run(running) == S.FAILED
    run = Run.objects.get(pk=running.pk)
    assert run.error == "Job entrypoint command failed with exit code 1"
    assert run.error_log == ("FileNotFoundError: /srv/rlstudio/datasets/7/train.parquet\n"
                             "(logs unavailable: Ray is not reachable)")


@pytest.mark.django_db
def test_the_trainers_failed_status_stores_its_reason_and_its_traceback_apart(running):
    from rlstudio.telemetry.services import events_ingest

    failed = {"seq": 1, "type": "status", "time": 1.0,
              "data": {"state": "failed", "message": TRACEBACK, "step": 3, "total_steps": 10}}
    assert events_ingest(run=running, raw_events=[failed]).accepted == 1
    run = Run.objects.get(pk=running.pk)
    assert run.status == S.FAILED
    assert run.error == f"FileNotFoundError: [Errno 2] No such file or directory: '{PATH_MARK}'"
    assert run.error_log == TRACEBACK.rstrip("\n")


@pytest.mark.django_db
def test_every_stored_error_is_scrubbed_and_the_original_kept_for_the_owner(alice, make_run):
    from rlstudio.accounts.models import AuditEvent

    run = run_transition(run=make_run(alice), to=S.SUBMITTING)
    run_transition(run=run, to=S.FAILED, error="could not prepare the run: [Errno 13] Permission denied: "
                                               "'/srv/rlstudio/runs/5'")
    run = Run.objects.get(pk=run.pk)
    assert run.error == f"could not prepare the run: [Errno 13] Permission denied: '{PATH_MARK}'"
    assert run.error_log == "could not prepare the run: [Errno 13] Permission denied: '/srv/rlstudio/runs/5'"
    audit = AuditEvent.objects.get(action="run.transition", object_id=str(run.pk), data__to=S.FAILED)
    assert audit.data["error"] == run.error
