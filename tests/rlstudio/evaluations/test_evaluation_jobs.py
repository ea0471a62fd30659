"""Evaluations as Ray jobs within the owner's quota (issue 19, item 2): admission counted with the
owner's runs (concurrent-run cap, GPUs), the submission (spec from the run's own folder, no secret in
Ray's job API), and the reconcile's outcomes: results and transcripts stored from the files the real
`python -m trainer evaluate` wrote, a failed job's error, a lost job, a stop. Ray itself is faked
here (its real path: tests/e2e/test_evaluations.py)."""
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from rlstudio.evaluations import jobs, services
from rlstudio.evaluations.models import Evaluation, EvaluationSample, EvaluationStatus
from rlstudio.evaluations.reconcile import (
    FAILED, LOST, STOP_AGAIN, STOPPED, SUCCEEDED, WAIT, decide, reconcile_evaluations,
)
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs import ray_jobs
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services.admission import queue_admit_jobs

pytestmark = pytest.mark.django_db
S = EvaluationStatus


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "eval-data", status="ready")


def _new(user, run, data, **over):
    body = {"checkpoints": [1, 2], "k": 2, "max_prompts": 3, **over}
    return services.evaluation_new(user=user, run=run, dataset=data, data=body)


def test_an_evaluation_counts_as_one_of_the_owners_runs(alice, make_run, run_with_ckpts, data, published):
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=100, max_concurrent_runs=1)
    busy = make_run(alice, "busy")
    Run.objects.filter(pk=busy.pk).update(status=RunStatus.RUNNING, started=timezone.now())
    ev = _new(alice, run_with_ckpts, data)
    assert ev.status == S.QUEUED and "you run 1 of your 1 concurrent run" in ev.queue_reason
    assert queue_admit_jobs() == []
    Run.objects.filter(pk=busy.pk).update(status=RunStatus.SUCCEEDED, finished=timezone.now())
    assert [(j.kind, j.id) for j in queue_admit_jobs()] == [("evaluation", ev.pk)]
    ev.refresh_from_db()
    assert ev.status == S.RUNNING and ev.queue_reason == "" and ev.started
    # and now it is the evaluation that keeps a queued run of hers waiting
    from rlstudio.runs.services import run_admit

    waiting = make_run(alice, "waiting")
    assert run_admit(run=waiting) is False
    waiting.refresh_from_db()
    assert "your runs and evaluations are 1 of your 1 concurrent run" in waiting.queue_reason


def test_a_gpu_evaluation_needs_a_free_gpu_of_the_quota(alice, make_run, run_with_ckpts, data, published,
                                                        monkeypatch):
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=100, max_concurrent_runs=3)
    monkeypatch.setattr(ray_jobs, "cluster_total_gpus", lambda: 4.0)
    gpu_run = make_run(alice, "gpu-run", gpus=1)
    Run.objects.filter(pk=gpu_run.pk).update(status=RunStatus.RUNNING, started=timezone.now())
    ev = _new(alice, run_with_ckpts, data, gpus=1)
    assert ev.status == S.QUEUED and "you hold 1 of your 1 GPU and this evaluation needs 1" in ev.queue_reason
    services.evaluation_stop(user=alice, ev=ev)
    cpu = _new(alice, run_with_ckpts, data, gpus=0)  # on the CPU: only the run cap applies
    assert cpu.status == S.RUNNING
    from rlstudio.quotas.selectors import quota_usage_for

    usage = quota_usage_for(user=alice)  # "Your quota" counts it as admission does
    assert (usage.runs_active, usage.gpus_held) == (2, 1)
    with pytest.raises(services.EvaluationRefused):  # one queued or running evaluation per user
        _new(alice, run_with_ckpts, data)


def test_submit_writes_the_spec_from_the_runs_folder_and_gives_ray_no_secret(alice, run_with_ckpts, data, published,
                                                                            monkeypatch, settings):
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    ev = _new(alice, run_with_ckpts, data, include_base=True, checkpoints=[2])
    assert services.evaluation_submit(evaluation_id=ev.pk) == "submitted"
    assert services.evaluation_submit(evaluation_id=ev.pk) == "skipped: already submitted"
    ev.refresh_from_db()
    (job,) = submitted
    assert ev.ray_submission_id == job["submission_id"] == jobs.submission_id_for(ev)
    out = jobs.folder(ev)
    assert out.parent.name == "evaluations" and out.parent.parent.name == str(run_with_ckpts.pk)
    spec = json.loads((out / "spec.json").read_text())
    assert spec["columns"] == [{"key": "base", "step": 0, "path": None},
                               {"key": "2", "step": 2, "path": str(out.parent.parent / "global_step_2")}]
    assert spec["device"] == "cpu" and spec["k"] == 2 and job["num_gpus"] == 0 and job["job_gpus"] == 0
    # a CPU evaluation's job sees no GPU (security review F1)
    assert ray_jobs.job_runtime_env(job["env_vars"], job_gpus=job["job_gpus"])["env_vars"]["CUDA_VISIBLE_DEVICES"] == ""
    assert " -m trainer evaluate " in job["entrypoint"] and str(out / "spec.json") in job["entrypoint"]
    assert not any("TOKEN" in key or "rls_" in value for key, value in job["env_vars"].items())


def test_a_failed_or_lost_job_fails_the_evaluation_with_its_error_and_a_stop_is_a_stop(
        alice, run_with_ckpts, data, published, monkeypatch):
    status = {}
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: ray_jobs.JobInfo(sid, status[sid], "exit 1", 1)
                        if sid in status else None)
    monkeypatch.setattr(ray_jobs, "logs", lambda sid: "line 1\nTraceback: boom\n")
    ev = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev.pk).update(ray_submission_id="sid-1")
    jobs.folder(ev).mkdir(parents=True)
    (jobs.folder(ev) / "error.json").write_text(json.dumps({"error": "ValueError: checkpoint weights do not fit"}))
    status["sid-1"] = ray_jobs.FAILED
    assert reconcile_evaluations()["moved"] == {ev.pk: S.FAILED}
    ev.refresh_from_db()
    assert ev.error == "ValueError: checkpoint weights do not fit" and ev.finished
    assert ev.error_log == "line 1\nTraceback: boom"  # the job log's tail: its managers' only
    # no error.json: Ray's reason, and the job's last log lines as the error log
    ev2 = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev2.pk).update(ray_submission_id="sid-2")
    status["sid-2"] = ray_jobs.FAILED
    reconcile_evaluations()
    ev2.refresh_from_db()
    assert ev2.status == S.FAILED and ev2.error == "exit 1" and "Traceback: boom" in ev2.error_log
    # Ray does not know the job
    ev3 = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev3.pk).update(ray_submission_id="sid-3")
    reconcile_evaluations()
    ev3.refresh_from_db()
    assert ev3.status == S.FAILED and "no longer knows" in ev3.error
    # a stop: Ray kills the job (FAILED or STOPPED), the evaluation is stopped
    monkeypatch.setattr(ray_jobs, "stop", lambda sid: True)
    ev4 = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev4.pk).update(ray_submission_id="sid-4")
    ev4.refresh_from_db()
    services.evaluation_stop(user=alice, ev=ev4)
    status["sid-4"] = ray_jobs.FAILED
    reconcile_evaluations()
    ev4.refresh_from_db()
    assert ev4.status == S.STOPPED and ev4.error == ""
    # succeeded without its results: failed, saying so
    ev5 = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev5.pk).update(ray_submission_id="sid-5")
    status["sid-5"] = ray_jobs.SUCCEEDED
    reconcile_evaluations()
    ev5.refresh_from_db()
    assert ev5.status == S.FAILED and "no results.json" in ev5.error


def test_a_failed_jobs_error_names_no_path_and_its_log_and_paths_go_to_the_error_log(
        alice, run_with_ckpts, data, published, monkeypatch, settings):
    """The job's error.json names the checkpoint's file and its printed traceback the server's code:
    the evaluation's `error` keeps the exception with its paths replaced, its `error_log` the job log's
    last lines and the error as it was; without the log (Ray unreachable) the lines Ray gave."""
    from rlstudio.runs.failure import PATH_MARK

    settings.RLSTUDIO_ERROR_LOG_LINES = 3
    ev = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev.pk).update(ray_submission_id="sid-1")
    missing = jobs.folder(ev).parent.parent / "global_step_1" / "actor" / "model.pt"
    written = f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'"
    log = ('Traceback (most recent call last):\n  File "/srv/rlstudio/trainer/evaluate_job.py", line 70, in main\n'
           f"    results = run_spec(spec, args.output)\n{written}\n")
    message = f"Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n{log}"
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: ray_jobs.JobInfo(sid, ray_jobs.FAILED, message, 1))
    monkeypatch.setattr(ray_jobs, "logs", lambda sid: log)
    jobs.folder(ev).mkdir(parents=True)
    (jobs.folder(ev) / "error.json").write_text(json.dumps({"error": written}))
    assert reconcile_evaluations()["moved"] == {ev.pk: S.FAILED}
    ev.refresh_from_db()
    assert ev.error == f"FileNotFoundError: [Errno 2] No such file or directory: '{PATH_MARK}'"
    assert ev.error_log == ray_jobs.tail_lines(log, 3)  # it holds the error as it was already
    assert str(missing) in ev.error_log and "evaluate_job.py" in ev.error_log
    from rlstudio.accounts.models import AuditEvent

    audit = AuditEvent.objects.get(action="evaluation.failed", data__evaluation=ev.pk)
    assert audit.data["error"] == ev.error

    def unavailable(sid):
        raise ray_jobs.RayUnavailable("Ray is not reachable")

    ev2 = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev2.pk).update(ray_submission_id="sid-2")
    monkeypatch.setattr(ray_jobs, "logs", unavailable)
    reconcile_evaluations()
    ev2.refresh_from_db()
    assert ev2.error == "Job entrypoint command failed with exit code 1"
    assert ev2.error_log == ray_jobs.tail_lines(log, 3) + "\n(logs unavailable: Ray is not reachable)"


def test_a_submission_refused_for_a_path_names_no_path(alice, run_with_ckpts, data, published, monkeypatch):
    from rlstudio.runs.failure import PATH_MARK

    ev = _new(alice, run_with_ckpts, data)
    where = jobs.folder(ev)

    def refused(spec, out):
        raise PermissionError(f"[Errno 13] Permission denied: '{where}/spec.json'")

    monkeypatch.setattr(services, "write_spec", refused)
    assert services.evaluation_submit(evaluation_id=ev.pk) == "failed"
    ev.refresh_from_db()
    assert ev.status == S.FAILED
    assert ev.error == f"could not submit the evaluation: PermissionError: [Errno 13] Permission denied: '{PATH_MARK}'"
    assert ev.error_log == f"could not submit the evaluation: PermissionError: [Errno 13] Permission denied: '{where}/spec.json'"


def test_an_admitted_evaluation_never_submitted_fails_after_the_timeout(alice, run_with_ckpts, data, published,
                                                                        monkeypatch, settings):
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: None)
    ev = _new(alice, run_with_ckpts, data)
    reconcile_evaluations()
    ev.refresh_from_db()
    assert ev.status == S.RUNNING  # within the timeout its task may still come
    Evaluation.objects.filter(pk=ev.pk).update(
        started=timezone.now() - timedelta(seconds=settings.RLSTUDIO_SUBMIT_TIMEOUT_S + 5))
    reconcile_evaluations()
    ev.refresh_from_db()
    assert ev.status == S.FAILED and "submit task was lost" in ev.error


def test_a_submit_task_that_was_slow_not_lost_wins_over_the_reconciles_failure(alice, run_with_ckpts, data,
                                                                               published, monkeypatch, settings):
    """The reconcile asks Ray (no job) past the timeout and decides to fail the evaluation; meanwhile the
    slow submit task commits the submission: it is not failed under its live Ray job."""
    ev = _new(alice, run_with_ckpts, data)
    Evaluation.objects.filter(pk=ev.pk).update(
        started=timezone.now() - timedelta(seconds=settings.RLSTUDIO_SUBMIT_TIMEOUT_S + 5))

    def job_info(sid):
        Evaluation.objects.filter(pk=ev.pk).update(ray_submission_id=sid)  # the submit task commits now
        return None

    monkeypatch.setattr(ray_jobs, "job_info", job_info)
    reconcile_evaluations()
    ev.refresh_from_db()
    assert ev.status == S.RUNNING and ev.ray_submission_id and not ev.error


def test_decide_table():
    now = timezone.now()
    assert decide(job_status=None, stop_requested=None, now=now, grace_s=60) == LOST
    assert decide(job_status=ray_jobs.SUCCEEDED, stop_requested=now, now=now, grace_s=60) == SUCCEEDED
    assert decide(job_status=ray_jobs.STOPPED, stop_requested=None, now=now, grace_s=60) == STOPPED
    assert decide(job_status=ray_jobs.FAILED, stop_requested=None, now=now, grace_s=60) == FAILED
    assert decide(job_status=ray_jobs.FAILED, stop_requested=now, now=now, grace_s=60) == STOPPED
    assert decide(job_status=ray_jobs.RUNNING, stop_requested=None, now=now, grace_s=60) == WAIT
    assert decide(job_status=ray_jobs.RUNNING, stop_requested=now, now=now, grace_s=60) == WAIT
    late = now - timedelta(seconds=80)
    assert decide(job_status=ray_jobs.PENDING, stop_requested=late, now=now, grace_s=60) == STOP_AGAIN


def test_a_tiny_runs_base_and_checkpoints_evaluated_by_the_job_command_and_stored(
        alice, make_run, make_dataset, settings, tmp_path, monkeypatch, published):
    """A real 2-step cpu_smoke run in the run's folder; the job command (in process) on the spec the
    platform wrote; the reconcile stores its results and every transcript."""
    from trainer.config import apply_overrides
    from trainer.evaluate_job import main as job_main
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.run import run as train
    from trainer.tasks import arith

    settings.RUNS_DIR = str(tmp_path / "runs")
    model = make_tiny_model(tmp_path / "model", preset="smoke", seed=0)
    train_file, test_file = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    for path, rows in ((train_file, arith.make_rl_rows("train", 32, seed=0)),
                       (test_file, arith.make_rl_rows("test", 4, seed=1))):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = make_run(alice, "tiny")
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train_file), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(tmp_path / "runs" / str(run.pk)), "trainer.logger": ["jsonl"],
        "trainer.save_freq": 1, "reward.name": "arith"})
    assert train(cfg) == 0
    Run.objects.filter(pk=run.pk).update(config=cfg.to_dict(), status=RunStatus.SUCCEEDED)
    type(run.model).objects.filter(pk=run.model_id).update(path=str(model))  # the catalog's record of it
    run.refresh_from_db()
    data = make_dataset(alice, "arith-test", status="ready")
    type(data).objects.filter(pk=data.pk).update(file_path=str(test_file))
    data.refresh_from_db()
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    ev = _new(alice, run, data, include_base=True, sampling={"max_new_tokens": 12, "seed": 3})
    assert services.evaluation_submit(evaluation_id=ev.pk) == "submitted"
    out = jobs.folder(ev)
    assert job_main([str(out / "spec.json"), "--output", str(out)]) == 0
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: ray_jobs.JobInfo(sid, ray_jobs.SUCCEEDED, "", 0))
    assert reconcile_evaluations()["moved"] == {ev.pk: S.SUCCEEDED}
    ev.refresh_from_db()
    figures = ev.results["checkpoints"]
    assert [(f["key"], f["step"], f["base"]) for f in figures] == [("base", 0, True), ("1", 1, False), ("2", 2, False)]
    assert all(f["samples"] == 3 * 2 for f in figures)
    assert EvaluationSample.objects.filter(evaluation=ev).count() == 3 * 3 * 2
    cell = ev.results["prompts"][1]["cells"]["2"]
    stored = EvaluationSample.objects.filter(evaluation=ev, prompt=1, column="2")
    assert stored.count() == 2 and sum(s.correct for s in stored) == cell["correct"]


# --- a run's evaluation resolves its reward and tool set from the registries again (never the frozen paths) --
def _api(user):
    from rest_framework.test import APIClient

    c = APIClient()
    c.force_authenticate(user)
    return c


@pytest.fixture
def reward_run(run_with_ckpts, registered_reward, settings, tmp_path):
    """alice's run scored with the registered reward `three_quarters` and offering the tool set `calc`,
    its config as its submission froze it: the reward file's and the tool config's paths written in."""
    from rlstudio.registry.models import ToolSet

    ToolSet.objects.create(name="calc", config_yaml="tools:\n  - class_name: calculator\n", status="ready")
    config = json.loads(json.dumps(run_with_ckpts.config))
    config["reward"]["name"] = "three_quarters"
    config["custom_reward_function"] = {"path": str(registered_reward), "name": "compute_score"}
    config["tools"]["config_path"] = str(tmp_path / "runs" / str(run_with_ckpts.pk) / "tool_config.yaml")
    Run.objects.filter(pk=run_with_ckpts.pk).update(config=config, tool_set="calc")
    run_with_ckpts.refresh_from_db()
    return run_with_ckpts


def _post(user, run, data):
    return _api(user).post(f"/api/v1/runs/{run.pk}/evaluations/",
                           {"dataset": data.pk, "k": 2, "checkpoints": [1]}, format="json")


def test_a_runs_evaluation_gets_its_reward_and_tool_set_from_the_registries(alice, reward_run, registered_reward,
                                                                           data, published, monkeypatch):
    # what the run's stored config says about files is not read: the registries' records are
    config = json.loads(json.dumps(reward_run.config))
    config["custom_reward_function"] = {"path": "/tmp/evil.py", "name": "steal"}
    config["tools"]["config_path"] = "/tmp/evil_tools.yaml"
    Run.objects.filter(pk=reward_run.pk).update(config=config)
    r = _post(alice, reward_run, data)
    assert r.status_code == 202, r.content
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: True)
    assert services.evaluation_submit(evaluation_id=r.json()["id"]) == "submitted"
    ev = Evaluation.objects.get(pk=r.json()["id"])
    spec = json.loads((jobs.folder(ev) / "spec.json").read_text())
    assert spec["config"]["reward"]["name"] == "three_quarters"
    assert spec["config"]["custom_reward_function"] == {"path": str(registered_reward), "name": "compute_score"}
    assert spec["config"]["tools"]["config_path"] == str(jobs.folder(ev) / "tool_config.yaml")
    assert (jobs.folder(ev) / "tool_config.yaml").read_text() == "tools:\n  - class_name: calculator\n"


@pytest.mark.parametrize("change,field,says", [
    ("disabled", "reward.name", "is broken"),
    ("deleted", "reward.name", "no reward function named 'three_quarters'"),
    ("file_changed", "reward.name", "changed since it was checked"),
    ("tool_set_disabled", "tool_set", "no longer a ready registered tool set"),
])
def test_a_run_whose_reward_or_tool_set_is_no_longer_usable_is_refused_an_evaluation(
        alice, reward_run, registered_reward, data, published, change, field, says):
    from rlstudio.registry.models import RewardFunction, ToolSet

    if change == "disabled":
        RewardFunction.objects.filter(name="three_quarters").update(status="broken", error="it raised")
    elif change == "deleted":
        RewardFunction.objects.filter(name="three_quarters").delete()
    elif change == "file_changed":
        registered_reward.write_text("def compute_score(*a, **k):\n    return 1.0\n", encoding="utf-8")
    else:
        ToolSet.objects.filter(name="calc").update(status="broken")
    r = _post(alice, reward_run, data)
    assert r.status_code == 400, r.content
    err = r.json()["error"]
    assert err["field"] == field and says in err["message"], err
    assert not Evaluation.objects.exists() and not published


def test_a_reward_changed_between_creation_and_the_job_fails_the_evaluation_and_nothing_runs(
        alice, reward_run, registered_reward, data, published, monkeypatch):
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    r = _post(alice, reward_run, data)
    assert r.status_code == 202, r.content
    registered_reward.write_text("import os\ndef compute_score(*a, **k):\n    return 1.0\n", encoding="utf-8")
    assert services.evaluation_submit(evaluation_id=r.json()["id"]) == "failed"
    ev = Evaluation.objects.get(pk=r.json()["id"])
    assert ev.status == S.FAILED and "reward.name: " in ev.error and "changed since it was checked" in ev.error
    assert submitted == [] and not (jobs.folder(ev) / "spec.json").exists()
