"""Runs end to end: API → Celery → Ray job → trainer → reconcile (Celery beat), all real.

A real PostgreSQL, Redis, local Ray head, Celery worker and Celery beat; the cpu_smoke recipe on the
tiny smoke model and GSM8K rows converted to the trainer's verl row shape.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from django.db import transaction
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs import ray_jobs
from rlstudio.runs.launch import submission_id_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import RunRefused, queue_admit_all, run_admit, run_create, run_stop, run_submit

S = RunStatus
# The first GSM8K train rows the repository carries (MIT; tests/fixtures/gsm8k/README.md).
GSM8K = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k" / "train_64.jsonl"
pytestmark = [pytest.mark.django_db(transaction=True)]


def _gsm8k_rows(n: int) -> list[dict]:
    rows = []
    with open(GSM8K, encoding="utf-8") as f:
        for i, line in zip(range(n), f):
            raw = json.loads(line)
            rows.append({
                "prompt": [{"role": "user", "content": raw["question"]}],
                "data_source": "openai/gsm8k",
                "reward_model": {"ground_truth": raw["answer"].split("####")[-1].strip()},
                "extra_info": {"index": i},
            })
    return rows


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny model and a converted GSM8K file on a path the worker and Ray both see."""
    from trainer.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("run-assets")
    model_dir = make_tiny_model(root / "tiny", preset="smoke", seed=0)
    data = root / "gsm8k-train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _gsm8k_rows(16)), encoding="utf-8")
    return {"model": str(model_dir), "data": str(data)}


@pytest.fixture(scope="module")
def services(celery_worker, celery_beat, ray_head):
    """The session's worker, beat and Ray head."""
    from django.conf import settings

    old = settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head  # the test process talks to Ray too
    try:
        yield {"worker": celery_worker, "ray": ray_head, "beat_log": celery_beat["log"], "beat": celery_beat["process"]}
    finally:
        settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL = old


@pytest.fixture
def make_user(transactional_db):
    from django.contrib.auth import get_user_model

    return lambda name: get_user_model().objects.create_user(username=name, password="pw-for-tests-1")


@pytest.fixture
def world(services, assets, make_user):
    user = make_user("runner")
    dataset = Dataset.objects.create(owner=user, name="gsm8k-16", file_path=assets["data"], sha256="0" * 64,
                                     status="ready", format="jsonl")
    model = ModelAsset.objects.create(owner=user, name="tiny-smoke", path=assets["model"], tokenizer_ok=True)
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=50)
    api = APIClient()
    api.force_authenticate(user)
    return {"user": user, "dataset": dataset, "model": model, "api": api,
            "worker_state": services["worker"]["state_dir"], "beat": services["beat"]}


def _launch(world, name: str, **overrides) -> dict:
    body = {"name": name, "dataset": world["dataset"].pk, "model": world["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "overrides": {"trainer.total_training_steps": 2, **overrides}}
    resp = world["api"].post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def _wait(run_id: int, pred, *, timeout: float, what: str) -> Run:
    deadline = time.monotonic() + timeout
    run = Run.objects.get(pk=run_id)
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if pred(run):
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id}: {what} not reached in {timeout:.0f}s; it is {run.status} "
                         f"step {run.step} error {run.error[-2000:]!r}")


def _path_of_states(run_id: int) -> list[str]:
    events = AuditEvent.objects.filter(action="run.transition", object_id=str(run_id)).order_by("id")
    return [S.QUEUED] + [e.data["to"] for e in events]


def _trainer_process(run: Run) -> psutil.Process | None:
    out = (run.config.get("trainer") or {}).get("default_local_dir")
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "trainer" in cmd and out in cmd:
            return p
    return None


def test_launch_goes_queued_submitting_running_succeeded_with_a_checkpoint(world):
    body = _launch(world, "smoke")
    assert body["status"] in (S.SUBMITTING, S.RUNNING) and body["total_steps"] == 2
    run = _wait(body["id"], lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    assert _path_of_states(run.pk) == [S.QUEUED, S.SUBMITTING, S.RUNNING, S.SUCCEEDED]
    assert run.checkpoint_path.endswith("global_step_2") and Path(run.checkpoint_path).is_dir()
    assert run.step == 2 and run.started and run.finished and run.last_heartbeat
    spec = run.config
    assert spec["data"]["train_files"] == world["dataset"].file_path
    assert spec["actor_rollout_ref"]["model"]["path"] == world["model"].path
    assert "jsonl" in spec["trainer"]["logger"]
    assert "http" in spec["trainer"]["logger"]
    # The trainer reports "succeeded" through the ingest API just before its process exits, so
    # Ray's job may still be RUNNING for a moment: it must end SUCCEEDED.
    deadline, job = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        job = ray_jobs.job_info(run.ray_submission_id)
        if job is not None and job.status != "RUNNING":
            break
        time.sleep(0.5)
    assert job is not None and job.status == ray_jobs.SUCCEEDED
    logs = world["api"].get(f"/api/v1/runs/{run.pk}/job-log/?tail=5").json()
    assert logs["source"] == "ray" and 0 < len(logs["lines"]) <= 5
    # The download streams the whole driver log from Ray's log API: it ends with the tail's lines.
    resp = world["api"].get(f"/api/v1/runs/{run.pk}/job-log/?download=1")
    assert resp.status_code == 200 and resp["Content-Disposition"] == f'attachment; filename="run-{run.pk}.log"'
    whole = b"".join(resp.streaming_content).decode("utf-8", "replace").splitlines()
    assert len(whole) > len(logs["lines"]) and whole[-len(logs["lines"]):] == logs["lines"]
    assert not any(line.startswith("[rlstudio: log cut") for line in whole)


def test_stop_saves_a_checkpoint_and_resume_continues_at_the_next_step(world):
    body = _launch(world, "long", **{"trainer.total_training_steps": 200, "trainer.save_freq": -1})
    _wait(body["id"], lambda r: r.status == S.RUNNING and r.step >= 1, timeout=120, what="running, step 1")
    t0 = time.monotonic()
    resp = world["api"].post(f"/api/v1/runs/{body['id']}/stop/", {"checkpoint": True}, format="json")
    assert resp.status_code == 202 and resp.json()["status"] == S.STOPPING
    run = _wait(body["id"], lambda r: r.is_terminal, timeout=60, what="stopped")
    stop_seconds = time.monotonic() - t0
    assert run.status == S.STOPPED, run.error
    ckpt = Path(run.checkpoint_path)
    n = int(ckpt.name.split("_")[-1])
    assert ckpt.is_dir() and n >= 1, run.checkpoint_path
    # A stopped run cannot be stopped again.
    assert world["api"].post(f"/api/v1/runs/{run.pk}/stop/", {}, format="json").status_code == 409

    resp = world["api"].post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 201, resp.content
    child = resp.json()
    assert child["parent"] == run.pk and child["parent_kind"] == "resume"
    new = _wait(child["id"], lambda r: r.step >= n + 1, timeout=120, what=f"step {n + 1}")
    assert new.config["trainer"]["resume_from_path"] == str(ckpt) == new.resume_from
    # A heartbeat names the step being worked on before its metrics exist: wait for the first metrics.
    deadline, steps = time.monotonic() + 60, []
    while not steps and time.monotonic() < deadline:
        events = [json.loads(line) for line in
                  (Path(new.config["trainer"]["default_local_dir"]) / "events.jsonl").read_text().splitlines()
                  if line.strip()]
        steps = [e["data"]["step"] for e in events if e["type"] == "metrics"]
        time.sleep(0.3)
    assert steps and steps[0] == n + 1, steps
    run_stop(run=new, by=world["user"], force=True)
    _wait(new.pk, lambda r: r.is_terminal, timeout=60, what="force-stopped")
    print(f"stop → stopped: {stop_seconds:.1f}s")


def test_sigkilled_trainer_is_failed_with_the_log_tail(world):
    body = _launch(world, "killed", **{"trainer.total_training_steps": 200, "trainer.save_freq": -1})
    run = _wait(body["id"], lambda r: r.status == S.RUNNING and r.step >= 1, timeout=120, what="running")
    proc = _trainer_process(run)
    assert proc is not None
    proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    # Ray notices the dead driver and the reconcile (every second) reads it; 90 s leaves room for a
    # busy machine (the same order as the other waits here), a hang still fails.
    run = _wait(run.pk, lambda r: r.is_terminal, timeout=90, what="failed or lost")
    assert run.status in (S.FAILED, S.LOST)
    assert time.monotonic() - t0 < 90
    # The error carries the job's last log lines (the trainer's console output).
    assert "step" in run.error.lower() or "entrypoint" in run.error.lower(), run.error


def test_a_duplicated_submit_task_makes_one_ray_job(world):
    from rlstudio.runs.tasks import submit_run

    # Admit it by hand, in the transaction that creates it (the session's reconcile, every second,
    # would otherwise admit it first), and send the submit task twice more on top of the one
    # admission sends once that commits.
    with transaction.atomic():
        run, _ = run_create(owner=world["user"], name="dup", dataset=world["dataset"], model=world["model"],
                            config=_config(world), gpus=0)
        assert run_admit(run=run, by=world["user"])
    submit_run.delay(run.pk)
    submit_run.delay(run.pk)
    run = _wait(run.pk, lambda r: r.ray_submission_id, timeout=60, what="submitted")
    assert run_submit(run_id=run.pk).startswith("skipped")
    c = ray_jobs.client()
    mine = [j for j in c.list_jobs() if (j.metadata or {}).get("rlstudio_run") == str(run.pk)]
    assert len(mine) == 1 and mine[0].submission_id == run.ray_submission_id
    # Ray itself refuses a second job with the run's submission id.
    assert ray_jobs.submit(submission_id=run.ray_submission_id, entrypoint="true", env_vars={},
                           num_cpus=0, num_gpus=0, metadata={}) is False
    _wait(run.pk, lambda r: r.is_terminal, timeout=150, what="finished")


def _config(world) -> dict:
    from rlstudio.runs.launch import build_config

    return build_config(preset="cpu_smoke", overrides={"trainer.total_training_steps": 1},
                        dataset=world["dataset"], model=world["model"])


def _wait_ray_idle(timeout: float = 90) -> None:
    """Earlier tests' jobs may still be exiting; admission also waits for free cluster CPUs."""
    c = ray_jobs.client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(str(j.status) not in ("PENDING", "RUNNING", "JobStatus.PENDING", "JobStatus.RUNNING")
               for j in c.list_jobs()):
            return
        time.sleep(1)


def test_twenty_concurrent_launches_against_a_quota_of_one(world):
    _wait_ray_idle()
    GpuQuota.objects.filter(user=world["user"]).update(max_concurrent_runs=1)
    config = _config(world)
    runs = [run_create(owner=world["user"], name=f"q{i}", dataset=world["dataset"], model=world["model"],
                       config=config, gpus=0)[0] for i in range(20)]
    results: dict[int, bool] = {}
    refused: dict[int, str] = {}
    barrier = threading.Barrier(20)

    def go(run):
        from django.db import connection

        try:
            barrier.wait()
            results[run.pk] = run_admit(run=run, by=world["user"])
        except RunRefused as exc:  # the session's reconcile (every second) admitted it before this thread
            refused[run.pk] = str(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) + len(refused) == 20, (results, refused)  # no thread died of anything else
    # Exactly one of the 20 left the queue, admitted either by its own thread or by the reconcile's
    # queue pass that ran between the runs' creation and the threads (its thread then found it not
    # queued); never two.
    queued = Run.objects.filter(pk__in=[r.pk for r in runs], status=S.QUEUED)
    assert queued.count() == 19
    (first,) = Run.objects.filter(pk__in=[r.pk for r in runs]).exclude(status=S.QUEUED).values_list("pk", flat=True)
    assert sum(results.values()) <= 1
    assert [pk for pk, ok in results.items() if ok] == ([] if first in refused else [first]), (results, refused)
    # A thread whose run the reconcile's pass admitted found it not queued; one whose run that pass held
    # locked at that moment (trying it) was told to try again (admission skips a locked row).
    assert {pk for pk, why in refused.items() if "not queued" in why} <= {first}, refused
    assert all("not queued" in why or "being changed by another request" in why for why in refused.values()), refused
    reasons = set(queued.values_list("queue_reason", flat=True))
    assert all(r for r in reasons), reasons
    # Which reason each racer wrote depends on the lock order ("waiting behind your earlier queued
    # run" for any that locked before an older one); one pass of the reconcile's queue (what beat
    # runs every second) brings them up to date: the oldest waiting run waits for the quota. A pass
    # is one transaction, and ours admits nothing while the session's reconcile runs one: until the
    # reasons are up to date, pass again.
    deadline = time.monotonic() + 30
    while True:
        queue_admit_all()
        oldest_waiting = queued.order_by("created", "id").first()
        if "1 of your 1 concurrent run" in oldest_waiting.queue_reason or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "1 of your 1 concurrent run" in oldest_waiting.queue_reason, oldest_waiting.queue_reason
    # Position and reason are what the quota API shows.
    usage = world["api"].get("/api/v1/quota/").json()
    assert [q["position"] for q in usage["queued"]] == list(range(1, 20))
    # The first one runs to its end; the reconcile then admits the oldest waiting one.
    _wait(first, lambda r: r.is_terminal, timeout=150, what="first run finished")
    oldest = min(r.pk for r in runs if r.pk != first)
    _wait(oldest, lambda r: r.status != S.QUEUED, timeout=30, what="next admitted")
    for r in Run.objects.filter(pk__in=[r.pk for r in runs], status=S.QUEUED):
        run_stop(run=r, by=world["user"])
    _wait(oldest, lambda r: r.is_terminal, timeout=150, what="second run finished")


def test_another_user_cannot_see_stop_resume_or_clone(world, make_user):
    # A quota of 0 runs keeps it queued: the session's reconcile (every second) would admit it.
    GpuQuota.objects.filter(user=world["user"]).update(max_concurrent_runs=0)
    run, _ = run_create(owner=world["user"], name="private", dataset=world["dataset"], model=world["model"],
                        config=_config(world), gpus=0)
    other = APIClient()
    other.force_authenticate(make_user("mallory"))
    assert other.get(f"/api/v1/runs/{run.pk}/").status_code == 404
    for verb in ("stop", "resume", "clone"):
        resp = other.post(f"/api/v1/runs/{run.pk}/{verb}/", {}, format="json")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    assert other.get(f"/api/v1/runs/{run.pk}/job-log/").status_code == 404
    assert Run.objects.get(pk=run.pk).status == S.QUEUED
    assert Run.objects.filter(parent=run).count() == 0
    run_stop(run=run, by=world["user"])


# ------------------------------------------------------------ submit tasks that never arrive
def _submitting(world, name: str, **fields) -> Run:
    """A run in submitting whose submit task was never sent (a lost task), made in one transaction
    so that the session's reconcile never sees it queued; `fields` are then stored on it."""
    from django.db import transaction

    from rlstudio.runs.services import run_transition

    with transaction.atomic():
        run, _ = run_create(owner=world["user"], name=name, dataset=world["dataset"], model=world["model"],
                            config=_config(world), gpus=0)
        run_transition(run=run, to=S.SUBMITTING)
        if fields:
            Run.objects.filter(pk=run.pk).update(**fields)
    return Run.objects.get(pk=run.pk)


def _long_ago():
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() - timedelta(minutes=10)  # past RLSTUDIO_SUBMIT_TIMEOUT_S (120 s)


def test_a_lost_submit_task_is_sent_again_by_the_reconcile(world):
    _wait_ray_idle()
    run = _submitting(world, "lost-task", submit_requested=_long_ago())
    run = _wait(run.pk, lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    resent = AuditEvent.objects.filter(action="run.resubmit", object_id=str(run.pk))
    assert [e.data["resend"] for e in resent] == [1]
    assert _path_of_states(run.pk) == [S.QUEUED, S.SUBMITTING, S.RUNNING, S.SUCCEEDED]


def test_a_job_ray_already_runs_is_adopted_with_its_token(world, asgi_server):
    """The submit task reached Ray and died before its commit: the run knows nothing of the job."""
    from rlstudio.runs import launch, run_secrets
    from rlstudio.runs.services import run_token_check
    from rlstudio.telemetry.models import MetricRow

    _wait_ray_idle()
    run = _submitting(world, "adopt-me")
    # What run_submit did before it died: the spec in the worker's run folder, a token, the job.
    out_dir = Path(world["worker_state"]) / "runs" / str(run.pk)
    spec = launch.freeze_spec(run=run, out_dir=out_dir)
    spec_path = launch.write_spec(spec, out_dir)
    token = "rit_" + "lost-with-the-rollback-" + str(run.pk)
    env = {**launch.job_env(run_id=run.pk, token_file=run_secrets.write_token(out_dir, token)),
           "RLSTUDIO_INGEST_URL": f"{asgi_server}/api/v1/runs/{run.pk}/events/"}
    submission_id = launch.submission_id_for(run)
    assert ray_jobs.submit(submission_id=submission_id, entrypoint=launch.entrypoint(spec_path=spec_path, out_dir=out_dir),
                           env_vars=env, num_cpus=1, num_gpus=0, metadata={"rlstudio_run": str(run.pk)})
    Run.objects.filter(pk=run.pk).update(submit_requested=_long_ago())
    run = _wait(run.pk, lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    assert run.ray_submission_id == submission_id and run.config == spec
    assert token not in json.dumps(ray_jobs.client().get_job_info(submission_id).runtime_env or {})
    assert not run_token_check(run=run, token=token)  # the token died with the run
    assert AuditEvent.objects.get(action="run.adopt", object_id=str(run.pk)).data["token"] is True
    assert not AuditEvent.objects.filter(action="run.resubmit", object_id=str(run.pk)).exists()
    # The job's reports were accepted with its own token: the last step's metrics are stored.
    assert MetricRow.objects.filter(run=run, step=1).exists()
    mine = [j for j in ray_jobs.client().list_jobs() if (j.metadata or {}).get("rlstudio_run") == str(run.pk)]
    assert len(mine) == 1


def test_a_run_whose_submits_never_reach_ray_fails_saying_so(world):
    from django.conf import settings

    run = _submitting(world, "never-submitted", submit_requested=_long_ago(),
                      submit_resends=settings.RLSTUDIO_SUBMIT_MAX_RESENDS)
    run = _wait(run.pk, lambda r: r.is_terminal, timeout=30, what="failed")
    assert run.status == S.FAILED
    assert run.error.startswith("not submitted to Ray: its submit task was sent 3 times"), run.error
    assert submission_id_for(run) in run.error and not run.ray_submission_id


def test_a_launch_during_a_broker_outage_runs_once_the_reconcile_admits_it(world, test_database_url, tmp_path):
    """The web's broker is down (a Daphne on a Redis of this test's own, killed): the launch answers
    201 with the run queued; the reconcile (the session's beat and worker) admits it and it runs.

    The session's beat is paused while the launch is made: its reconcile (every second here) could
    otherwise admit the new run before the launch's own pass does (runs.md says either may come
    first), and then no submit would ever meet the broker outage."""
    import signal
    import urllib.request

    from rlstudio.accounts.services import api_token_create
    from tests.e2e.fault_procs import DaphneServer, RedisServer

    _wait_ray_idle()
    redis = RedisServer(folder=tmp_path / "redis")
    redis.start()
    web = DaphneServer(folder=tmp_path / "web", env={"DATABASE_URL": test_database_url, "REDIS_URL": redis.url})
    web.start()
    beat = world["beat"]
    beat.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3)  # a reconcile the beat sent just before expires or ends (its interval: 1 s)
        redis.kill()
        key = api_token_create(user=world["user"], name="outage").key
        body = {"name": "outage", "dataset": world["dataset"].pk, "model": world["model"].pk,
                "preset": "cpu_smoke", "gpus": 0, "overrides": {"trainer.total_training_steps": 1}}
        req = urllib.request.Request(web.base + "/api/v1/runs/", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Token {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 201
            run_id = json.loads(resp.read())["id"]
        _wait(run_id, lambda r: r.status == S.QUEUED and AuditEvent.objects.filter(
            action="run.submit_unsent", object_id=str(r.pk)).exists(), timeout=30, what="the unsent submit")
    finally:
        beat.send_signal(signal.SIGCONT)
        web.stop()
        redis.kill()
    run = _wait(run_id, lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    assert AuditEvent.objects.filter(action="run.submit_unsent", object_id=str(run_id)).count() == 1
    assert _path_of_states(run_id) == [S.QUEUED, S.SUBMITTING, S.QUEUED, S.SUBMITTING, S.RUNNING, S.SUCCEEDED]


REWARD_FILE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Three quarters for everything: a score no built-in reward gives every sample."""
    return 0.75
'''


def test_a_registered_reward_function_chosen_by_name_trains_and_scores(world, settings):
    """An operator registers a reward file (checked in a process of its own); a user picks it by
    `reward.name`; the worker resolves it to its file when it freezes the spec; the trainer scores
    with it (every sample 0.75)."""
    from django.contrib.auth import get_user_model

    from rlstudio.registry.services import reward_function_register
    from rlstudio.telemetry.models import MetricRow

    root = Path(world["worker_state"]) / "rewards"
    root.mkdir(parents=True, exist_ok=True)
    (root / "three_quarters.py").write_text(REWARD_FILE, encoding="utf-8")
    settings.RLSTUDIO_REWARD_ROOTS = [str(root)]  # the worker's default root, seen from here too
    operator = get_user_model().objects.create_user(username="operator", password="pw-for-tests-1", is_staff=True)
    registered = reward_function_register(by=operator, name="three_quarters", kind="file",
                                          path=str(root / "three_quarters.py"))
    assert registered.status == "ready"
    assert [r.get("score") for r in registered.check_results] == [0.75] * len(registered.check_results)

    body = _launch(world, "custom-reward", **{"reward.name": "three_quarters"})
    run = _wait(body["id"], lambda r: r.is_terminal, timeout=150, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    assert run.config["custom_reward_function"]["path"] == str((root / "three_quarters.py").resolve())
    scores = [row.metrics["critic/score/mean"] for row in MetricRow.objects.filter(run=run).order_by("step")]
    assert scores and all(abs(s - 0.75) < 1e-6 for s in scores), scores
