"""Run creation, config validation, quota admission, stop/resume/clone refusals and the run pages.

Real PostgreSQL; no Ray or worker here (tests/e2e/test_run_lifecycle.py runs them). With the
non-transactional `db`, on-commit task sends never fire, so nothing is queued to Celery.
"""
from datetime import datetime, timedelta, timezone as dt_tz

import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.services import admission_reason
from rlstudio.runs import ray_jobs
from rlstudio.runs.launch import ConfigInvalid, build_config, freeze_spec, submission_id_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.reconcile import TrainerView, decide, read_trainer_view
from rlstudio.runs.services import RunRefused, run_admit, run_stop, run_transition

pytestmark = pytest.mark.django_db
S = RunStatus


def _body(ready, **extra):
    """A launch's body: the preset cpu_smoke unless `extra` gives the config another way (two: a 400)."""
    preset = {} if {"config", "config_id"} & set(extra) else {"preset": "cpu_smoke"}
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, **preset, **extra}


def test_create_validates_builds_the_config_and_admits(api, ready, alice):
    resp = api.post("/api/v1/runs/", _body(ready, overrides={"actor_rollout_ref.rollout.n": 4}), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["status"] == S.SUBMITTING and body["queue_reason"] == ""
    cfg = body["config"]
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 4
    assert cfg["data"]["train_files"] == ready["dataset"].file_path
    assert cfg["actor_rollout_ref"]["model"]["path"] == ready["model"].path
    assert body["total_steps"] == 2
    actions = list(AuditEvent.objects.filter(object_id=str(body["id"])).values_list("action", flat=True))
    assert {"run.create", "run.transition", "run.launch"} <= set(actions)


@pytest.mark.parametrize("extra,field", [
    ({"overrides": {"actor_rollout_ref.rollout.nn": 4}}, "actor_rollout_ref.rollout.nn"),
    ({"overrides": {"data.train_batch_size": 0}}, "data.train_batch_size"),
    ({"overrides": {"trainer.save_freq": "often"}}, "trainer.save_freq"),
    ({"preset": "nope"}, "preset"),
    ({"config": {"trainer": {"bogus": 1}}}, "trainer.bogus"),
    ({"gpus": -1}, "gpus"),
    # an interaction is chosen by its registered name only: a class path is no name of one
    ({"overrides": {"actor_rollout_ref.rollout.multi_turn.interaction": "os.system"}},
     "actor_rollout_ref.rollout.multi_turn.interaction"),
    ({"overrides": {"actor_rollout_ref.rollout.multi_turn.interaction_config_path": "/srv/x.yaml"}},
     "actor_rollout_ref.rollout.multi_turn.interaction_config_path"),
])
def test_bad_configs_are_refused_naming_the_key_before_anything_is_queued(api, ready, extra, field):
    resp = api.post("/api/v1/runs/", _body(ready, **extra), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    assert Run.objects.count() == 0


def test_a_run_with_the_gsm8k_interaction_launches(api, ready):
    overrides = {"actor_rollout_ref.rollout.multi_turn.interaction": "gsm8k",
                 "actor_rollout_ref.rollout.multi_turn.max_user_turns": 2}
    resp = api.post("/api/v1/runs/", _body(ready, overrides=overrides), format="json")
    assert resp.status_code == 201, resp.content
    multi_turn = resp.json()["config"]["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert (multi_turn["interaction"], multi_turn["max_user_turns"]) == ("gsm8k", 2)


def test_another_users_dataset_is_not_usable(api, ready, bob, make_dataset):
    theirs = make_dataset(bob, name="bobs", status="ready")
    resp = api.post("/api/v1/runs/", _body(ready, dataset=theirs.pk), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "dataset"


def test_a_dataset_that_is_not_ready_is_refused(api, alice, make_dataset, make_model):
    ds = make_dataset(alice, status="validating")
    resp = api.post("/api/v1/runs/", {"name": "x", "dataset": ds.pk, "model": make_model(alice).pk}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "dataset"


def test_saved_config_round_trip_and_launch_from_it(api, ready):
    resp = api.post("/api/v1/configs/", {"name": "n8", "config": {"actor_rollout_ref": {"rollout": {"n": 8}}}},
                    format="json")
    assert resp.status_code == 201, resp.content
    config_id = resp.json()["id"]
    assert api.post("/api/v1/configs/", {"name": "n8", "config": {}}, format="json").status_code == 400
    bad = api.post("/api/v1/configs/", {"name": "bad", "config": {"data": {"max_prompt_length": -3}}}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "data.max_prompt_length"
    run = api.post("/api/v1/runs/", _body(ready, config_id=config_id), format="json").json()
    assert run["config"]["actor_rollout_ref"]["rollout"]["n"] == 8


def test_a_saved_configs_description_is_bounded_like_a_runs_note(api):
    """The description was unbounded (a request's 32 MiB each, saved configs uncapped): it is at most
    MAX_NOTE_LENGTH characters, a 400 naming it past that, and nothing is saved."""
    from rlstudio.runs.models import MAX_NOTE_LENGTH, RunConfig

    config = {"actor_rollout_ref": {"rollout": {"n": 8}}}
    long = api.post("/api/v1/configs/", {"name": "long", "config": config, "description": "x" * (MAX_NOTE_LENGTH + 1)},
                    format="json")
    assert long.status_code == 400 and long.json()["error"]["field"] == "description"
    assert not RunConfig.objects.exists()
    ok = api.post("/api/v1/configs/", {"name": "ok", "config": config, "description": "x" * MAX_NOTE_LENGTH},
                  format="json")
    assert ok.status_code == 201 and len(ok.json()["description"]) == MAX_NOTE_LENGTH


def test_presets_list_the_trainer_recipes(api):
    names = {p["name"] for p in api.get("/api/v1/presets/").json()}
    assert "cpu_smoke" in names


def test_quota_reasons(alice, make_run):
    GpuQuota.objects.create(user=alice, max_gpus=4, gpu_hours_per_month=10, max_concurrent_runs=3)
    holder = make_run(alice, "holder", gpus=4)
    run_transition(run=holder, to=S.SUBMITTING)
    waiting = make_run(alice, "waiting", gpus=1)
    assert admission_reason(run=waiting, cluster_free_gpus=8) == "you hold 4 of your 4 GPUs and this run needs 1"
    cpu = make_run(alice, "cpu", gpus=0)
    assert admission_reason(run=cpu, cluster_free_gpus=None) == ""
    run_transition(run=holder, to=S.FAILED)
    assert admission_reason(run=waiting, cluster_free_gpus=0) == "the cluster has 0 free GPUs and this run needs 1"
    # 11 GPU-hours used this month → over the 10 allowed: 3,960 GPUs for 10 s, so that the whole run
    # lies in this month at any hour of it (2 h 45 min on 4 GPUs did not in a month's first hours).
    now = datetime.now(dt_tz.utc)
    Run.objects.filter(pk=holder.pk).update(gpus=3960, started=now - timedelta(seconds=10), finished=now)
    assert admission_reason(run=waiting, cluster_free_gpus=8).startswith("you used 11.0 of your 10 GPU-hours")


def test_without_ray_a_gpu_run_waits_for_the_cluster(alice, make_run, settings):
    settings.RAY_ADDRESS = None
    GpuQuota.objects.create(user=alice, max_gpus=4, gpu_hours_per_month=10, max_concurrent_runs=3)
    run = make_run(alice, "gpu", gpus=1)
    assert run_admit(run=run, by=alice) is False
    assert Run.objects.get(pk=run.pk).queue_reason == "the cluster has 0 free GPUs and this run needs 1"


def test_per_user_fifo(alice, make_run):
    first, second = make_run(alice, "first"), make_run(alice, "second")
    assert run_admit(run=second, by=alice) is False
    assert "earlier queued run #%d" % first.pk in Run.objects.get(pk=second.pk).queue_reason
    assert run_admit(run=first, by=alice) is True


def test_stop_cancels_a_queued_run_and_refuses_finished_ones(alice, make_run, api):
    run = make_run(alice)
    run_stop(run=run, by=alice)
    assert Run.objects.get(pk=run.pk).status == S.STOPPED
    resp = api.post(f"/api/v1/runs/{run.pk}/stop/", {}, format="json")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "conflict"
    with pytest.raises(RunRefused, match="no checkpoint"):
        from rlstudio.runs.services import run_resume

        run_resume(run=Run.objects.get(pk=run.pk), by=alice)


def test_a_run_the_queue_admitted_first_is_launched_not_refused(alice, make_run):
    """The reconcile's queue (every second) may admit a run between its creation and the launch's
    own pass: the launch answers with the admitted run, not "is submitting, not queued"."""
    from rlstudio.runs.services import queue_admit_all, queue_admit_launched, run_launch_recorded

    def run_launch(*, run, by):  # what a launch does once its run's transaction committed (lineage)
        queue_admit_launched(Run, pk=run.pk)
        return run_launch_recorded(run=run, by=by)

    run = make_run(alice)
    stale = Run.objects.get(pk=run.pk)
    assert queue_admit_all() == [run.pk]
    launched = run_launch(run=stale, by=alice)
    assert launched.status == S.SUBMITTING and Run.objects.get(pk=run.pk).status == S.SUBMITTING
    assert AuditEvent.objects.filter(object_id=str(run.pk), action="run.launch").count() == 1
    # A run cancelled from the queue meanwhile is answered as it is: stopped, never submitted.
    cancelled = make_run(alice, "cancelled")
    stale = Run.objects.get(pk=cancelled.pk)
    run_stop(run=cancelled, by=alice)
    launched = run_launch(run=stale, by=alice)
    assert launched.status == S.STOPPED and not launched.ray_submission_id


@pytest.fixture
def reconcile_admits_on_create(monkeypatch):
    """The reconcile's queue pass runs right after each launch's transaction commits, before the
    launch's own pass (the worst moment; a pass never runs inside a transaction); returns the run ids
    it admitted."""
    from rlstudio.runs.services import lineage, queue_admit_all

    admitted: list[int] = []
    real_pass = lineage.queue_admit_launched

    def launch_pass(*args, **kwargs):
        admitted.extend(queue_admit_all())
        return real_pass(*args, **kwargs)

    monkeypatch.setattr(lineage, "queue_admit_launched", launch_pass)
    return admitted


def test_an_api_launch_the_queue_admitted_first_is_a_201(api, ready, alice, reconcile_admits_on_create):
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert reconcile_admits_on_create == [body["id"]]
    assert body["status"] == S.SUBMITTING and Run.objects.get(pk=body["id"]).status == S.SUBMITTING


def test_a_resume_button_the_queue_admitted_first_opens_the_new_run(alice, ready, settings, tmp_path,
                                                                     reconcile_admits_on_create):
    settings.RUNS_DIR = tmp_path
    api = APIClient()
    api.force_authenticate(alice)
    parent = Run.objects.get(pk=api.post("/api/v1/runs/", _body(ready), format="json").json()["id"])
    Run.objects.filter(pk=parent.pk).update(status=S.STOPPED)
    (tmp_path / str(parent.pk) / "global_step_1").mkdir(parents=True)
    (tmp_path / str(parent.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    reconcile_admits_on_create.clear()
    page = Client()
    page.force_login(alice)
    resp = page.post(f"/runs/{parent.pk}/resume/")
    child = Run.objects.get(parent=parent)
    assert reconcile_admits_on_create == [child.pk]
    assert resp.status_code == 302 and resp["Location"].rstrip("/").endswith(f"/{child.pk}"), resp["Location"]
    assert child.status == S.SUBMITTING and child.parent_kind == "resume"


def test_running_run_goes_stopping_with_the_time_recorded(alice, make_run):
    run = make_run(alice)
    for to in (S.SUBMITTING, S.RUNNING):
        run_transition(run=run, to=to)
    run_stop(run=run, by=alice)
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == S.STOPPING and stored.stop_requested is not None
    with pytest.raises(RunRefused, match="already stopping"):
        run_stop(run=stored, by=alice)


def test_clone_copies_the_config_with_overrides(alice, api, ready):
    src = api.post("/api/v1/runs/", _body(ready), format="json").json()
    resp = api.post(f"/api/v1/runs/{src['id']}/clone/", {"name": "c", "overrides": {"actor_rollout_ref.rollout.n": 3}},
                    format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["parent"] == src["id"] and body["parent_kind"] == "clone" and body["name"] == "c"
    assert body["config"]["actor_rollout_ref"]["rollout"]["n"] == 3
    # alice's default quota allows 2 concurrent runs: the source and the clone are both admitted.
    assert body["status"] == S.SUBMITTING


# the reviewer's CPU run (F2): every key within its own bound, the step as a whole far past the operator's
HUGE_STEP = {"data.train_batch_size": 4096, "actor_rollout_ref.actor.ppo_mini_batch_size": 4096,
             "actor_rollout_ref.rollout.n": 1024, "actor_rollout_ref.rollout.response_length": 32768,
             "data.max_response_length": 32768, "report.samples_per_step": -1, "trainer.save_freq": 1}


@pytest.mark.parametrize("overrides,field,says", [
    (HUGE_STEP, "data.train_batch_size", "4,194,304 trajectories per step"),
    ({"data.train_batch_size": 256, "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
      "actor_rollout_ref.rollout.n": 100, "actor_rollout_ref.rollout.response_length": 65536,
      "data.max_response_length": 65536}, "actor_rollout_ref.rollout.response_length", "tokens per step"),
    ({"data.train_batch_size": 256, "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
      "actor_rollout_ref.rollout.n": 8, "report.samples_per_step": -1}, "report.samples_per_step",
     "-1 (all) reports 2,048 samples per step"),
])
def test_a_step_past_the_operators_bounds_is_a_400_naming_the_key_and_nothing_is_made(
        api, ready, alice, overrides, field, says):
    resp = api.post("/api/v1/runs/", _body(ready, overrides=overrides), format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["field"] == field and says in err["message"], err
    assert Run.objects.count() == 0
    # the form's preview says the same before anything is sent
    from rlstudio.runs import preview

    checked = preview.check_all(preset="cpu_smoke", overrides=overrides, dataset=ready["dataset"],
                                model=ready["model"])
    assert [(e.field, says in e.message) for e in checked.errors] == [(field, True)]


def test_a_validation_past_the_operators_bounds_is_a_400_naming_the_key(api, ready, alice):
    """The whole validation set is one generation batch unless data.val_batch_size cuts it: 5,000 rows
    x val_kwargs.n = 8 is refused on data.val_batch_size (the key that fixes it), in batches of 64 it runs."""
    val = ready["dataset"]
    val.num_rows = 5000
    val.save(update_fields=["num_rows"])
    many = {"actor_rollout_ref.rollout.val_kwargs.n": 8}
    resp = api.post("/api/v1/runs/", _body(ready, val_dataset=val.pk, overrides=many), format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["field"] == "data.val_batch_size" and "5,000 x 8 = 40,000 trajectories" in err["message"], err
    assert Run.objects.count() == 0
    from rlstudio.runs import preview

    checked = preview.check_all(preset="cpu_smoke", overrides=many, dataset=val, val_dataset=val, model=ready["model"])
    assert [e.field for e in checked.errors] == ["data.val_batch_size"]
    resp = api.post("/api/v1/runs/", _body(ready, val_dataset=val.pk, overrides={**many, "data.val_batch_size": 64}),
                    format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["config"]["data"]["val_batch_size"] == 64


def test_a_clone_or_a_lower_bound_set_by_the_operator_is_checked_too(alice, api, ready, settings):
    src = api.post("/api/v1/runs/", _body(ready), format="json").json()
    resp = api.post(f"/api/v1/runs/{src['id']}/clone/", {"overrides": HUGE_STEP}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "data.train_batch_size", resp.content
    settings.RLSTUDIO_MAX_TRAJECTORIES_PER_STEP = 3  # cpu_smoke: 2 prompts x 2 samples
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "data.train_batch_size", resp.content
    assert Run.objects.count() == 1


def test_clone_and_config_save_report_every_error_at_once(alice, api, ready):
    src = api.post("/api/v1/runs/", _body(ready), format="json").json()
    bad = {"actor_rollout_ref.rollout.temperature": 99, "trainer.default_local_dir": "/etc", "trainer.save_freq": 0}
    resp = api.post(f"/api/v1/runs/{src['id']}/clone/", {"overrides": bad}, format="json")
    assert resp.status_code == 400
    fields = [e["field"] for e in resp.json()["errors"]]
    assert fields == ["actor_rollout_ref.rollout.temperature", "trainer.default_local_dir", "trainer.save_freq"]
    assert resp.json()["error"]["field"] == fields[0]
    config = {"trainer": {"save_freq": 0, "test_freq": 0}, "data": {"max_prompt_length": 0}}
    resp = api.post("/api/v1/configs/", {"name": "two", "config": config}, format="json")
    assert resp.status_code == 400
    assert [e["field"] for e in resp.json()["errors"]] == ["data.max_prompt_length", "trainer.save_freq"]


def test_other_users_get_404_on_every_control(bob, make_run, alice):
    run = make_run(alice)
    api = APIClient()
    api.force_authenticate(bob)
    for verb in ("stop", "resume", "clone"):
        assert api.post(f"/api/v1/runs/{run.pk}/{verb}/", {}, format="json").status_code == 404
    page = Client()
    page.force_login(bob)
    for verb in ("stop", "resume", "clone"):
        assert page.post(f"/runs/{run.pk}/{verb}/").status_code == 404
    assert Run.objects.get(pk=run.pk).status == S.QUEUED and Run.objects.count() == 1


def test_freeze_spec_sets_the_output_folder_and_jsonl(tmp_path, ready, alice, make_run):
    cfg = build_config(preset="cpu_smoke", dataset=ready["dataset"], model=ready["model"])
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(config=cfg, dataset=ready["dataset"], model=ready["model"])
    spec = freeze_spec(run=Run.objects.get(pk=run.pk), out_dir=tmp_path / "7")
    assert spec["trainer"]["default_local_dir"] == str(tmp_path / "7")
    assert "jsonl" in spec["trainer"]["logger"]
    # the critic (PPO with GAE) starts from the run's catalog model, written by the platform
    assert spec["critic"]["model"]["path"] == spec["actor_rollout_ref"]["model"]["path"] == str(ready["model"].path)
    gae = build_config(preset="cpu_smoke", dataset=ready["dataset"], model=ready["model"],
                       overrides=["algorithm.adv_estimator=gae", "critic.optim.lr=1e-4", "critic.ppo_epochs=2"])
    assert gae["critic"]["optim"]["lr"] == 1e-4 and gae["critic"]["model"]["path"] == str(ready["model"].path)
    with pytest.raises(ConfigInvalid) as info:  # a user cannot point the critic at a folder
        build_config(preset="cpu_smoke", dataset=ready["dataset"], model=ready["model"],
                     overrides=["critic.model.path=/srv/other-user/model"])
    assert info.value.key == "critic.model.path"
    assert submission_id_for(run) == submission_id_for(Run.objects.get(pk=run.pk))
    with pytest.raises(ConfigInvalid) as info:
        build_config(preset="cpu_smoke", overrides=["actor_rollout_ref.rollout.n=zero"])
    assert info.value.key == "actor_rollout_ref.rollout.n"


NOW = datetime(2026, 11, 29, 12, tzinfo=dt_tz.utc)


def _job(status, message=""):
    return ray_jobs.JobInfo(submission_id="x", status=status, message=message, driver_exit_code=None)


@pytest.mark.parametrize("status,job,view,expected", [
    (S.SUBMITTING, _job("PENDING"), TrainerView(), S.RUNNING),
    (S.RUNNING, _job("RUNNING"), TrainerView(last_time=NOW), None),
    (S.RUNNING, _job("SUCCEEDED"), TrainerView(state="succeeded"), S.SUCCEEDED),
    (S.STOPPING, _job("STOPPED"), TrainerView(state="stopped"), S.STOPPED),
    (S.STOPPING, _job("SUCCEEDED"), TrainerView(state="stopped"), S.STOPPED),
    (S.RUNNING, _job("FAILED", "exit -9"), TrainerView(), S.FAILED),
    # A forced stop kills the driver: Ray says FAILED, the run ends stopped, as asked.
    (S.STOPPING, _job("FAILED", "exit -9"), TrainerView(), S.STOPPED),
    (S.RUNNING, None, TrainerView(), S.LOST),
    (S.RUNNING, _job("RUNNING"), TrainerView(last_time=NOW - timedelta(seconds=121)), S.LOST),
])
def test_reconcile_decision_table(status, job, view, expected):
    d = decide(status=status, job=job, view=view, now=NOW, started=NOW - timedelta(minutes=5),
               stop_requested=None, heartbeat_timeout_s=120, grace_s=60, startup_timeout_s=600)
    assert d.to == expected
    assert d.need_logs == (expected == S.FAILED)


def test_stopping_past_the_grace_is_forced():
    d = decide(status=S.STOPPING, job=_job("RUNNING"), view=TrainerView(last_time=NOW), now=NOW,
               started=NOW, stop_requested=NOW - timedelta(seconds=80), heartbeat_timeout_s=120, grace_s=60,
               startup_timeout_s=600)
    assert d.force_stop and d.to is None


def _running(view, started_s_ago):
    return decide(status=S.RUNNING, job=_job("RUNNING"), view=view, now=NOW,
                  started=NOW - timedelta(seconds=started_s_ago), stop_requested=None,
                  heartbeat_timeout_s=120, grace_s=60, startup_timeout_s=600)


def test_start_up_gets_its_own_grace_not_the_heartbeat_timeout():
    """A trainer importing torch for 208 s under load is not lost (it was, after the heartbeat's 120 s)."""
    assert _running(TrainerView(), 208).to is None
    # it said "starting" and is loading the model: no heartbeat yet, still within the start-up grace
    starting = TrainerView(last_time=NOW - timedelta(seconds=300), state="starting")
    assert _running(starting, 310).to is None


def test_never_reported_past_the_start_up_grace_is_lost_and_says_so():
    d = _running(TrainerView(), 601)
    assert d.to == S.LOST and d.force_stop
    assert d.error.startswith("the trainer never reported within 600 s of being started")
    assert "heartbeat" not in d.error
    # past the grace, a trainer still "starting" and silent for over the heartbeat timeout is lost too
    d = _running(TrainerView(last_time=NOW - timedelta(seconds=500), state="starting"), 700)
    assert d.to == S.LOST and "did not finish starting within 600 s" in d.error
    # ... but one still starting that reported recently is not (the heartbeat timeout applies)
    assert _running(TrainerView(last_time=NOW - timedelta(seconds=30), state="starting"), 700).to is None


def test_a_trainer_that_reported_running_gets_the_heartbeat_timeout():
    d = _running(TrainerView(last_time=NOW - timedelta(seconds=121), state="running"), 200)
    assert d.to == S.LOST and d.error == "no heartbeat for 121 s"
    assert _running(TrainerView(last_time=NOW - timedelta(seconds=119), state="running"), 200).to is None


def test_trainer_view_reads_the_events_file(tmp_path):
    lines = [
        '{"seq":1,"type":"status","time":1764417600.0,"data":{"state":"running","step":0,"total_steps":5}}',
        '{"seq":2,"type":"metrics","time":1764417601.0,"data":{"step":1,"metrics":{}}}',
        '{"seq":3,"type":"checkpoint","time":1764417602.0,"data":{"step":1,"path":"/x/global_step_1"}}',
        '{"seq":4,"type":"heartbeat","time":1764417603.5,"data":{"step":1}}',
        '{"seq":5,"type":"heart',  # a line being written
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(lines))
    view = read_trainer_view(tmp_path)
    assert view.step == 1 and view.total_steps == 5 and view.state == "running"
    assert view.checkpoint == "/x/global_step_1"
    assert view.last_time == datetime.fromtimestamp(1764417603.5, tz=dt_tz.utc)


def test_run_pages_form_controls_and_quota(alice, ready, make_run):
    page = Client()
    page.force_login(alice)
    assert page.get("/runs/new/").status_code == 200
    resp = page.post("/runs/new/", {"name": "f", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                    "preset": "cpu_smoke", "gpus": 0, "samples_per_prompt": 0})
    assert resp.status_code == 400 and "actor_rollout_ref.rollout.n" in resp.content.decode()
    resp = page.post("/runs/new/", {"name": "f", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                    "preset": "cpu_smoke", "gpus": 0, "samples_per_prompt": 4,
                                    "overrides": "trainer.total_training_steps=3", "save_as": "mine"})
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    run = Run.objects.get(name="f")
    assert run.config["actor_rollout_ref"]["rollout"]["n"] == 4 and run.total_steps == 3
    assert alice.run_configs.filter(name="mine").exists()
    hostile = make_run(alice, "<script>alert(1)</script>")
    Run.objects.filter(pk=hostile.pk).update(queue_reason="<b>why</b>")
    html = page.get(f"/runs/{hostile.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in html
    from django.template.loader import render_to_string

    from rlstudio.runs.selectors import run_header_context

    hostile.refresh_from_db()
    controls = render_to_string("runs/_controls.html", run_header_context(run=hostile, user=alice))
    assert "&lt;b&gt;why&lt;/b&gt;" in controls and "position 1" in controls
    assert 'action="/runs/%d/stop/"' % hostile.pk in controls
    assert page.get("/runs/%d/stop/" % hostile.pk).status_code == 405
    resp = page.post("/runs/%d/stop/" % hostile.pk)
    assert resp.status_code == 302 and Run.objects.get(pk=hostile.pk).status == S.STOPPED
    quota = page.get("/runs/quota/").content.decode()
    assert "Your quota" in quota


def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_config_or_overrides_past_the_shape_bounds_is_a_400_naming_the_field(api, ready):
    """JSON cannot alias, but the API's config object and override values get the user-YAML parser's
    bounds too (user_yaml.shape_problem), on runs and saved configs; nothing is made."""
    from rlstudio.runs.models import RunConfig
    from rlstudio.runs.user_yaml import MAX_YAML_DEPTH, MAX_YAML_NODES

    deep = {"data": {"apply_chat_template_kwargs": _nested(MAX_YAML_DEPTH)}}
    wide = {"data": {"apply_chat_template_kwargs": {"k": list(range(MAX_YAML_NODES))}}}
    for body, field, words in (
        (_body(ready, config=deep), "config", "levels deep"),
        (_body(ready, config=wide), "config", f"more than {MAX_YAML_NODES}"),
        (_body(ready, overrides={"data.apply_chat_template_kwargs": _nested(MAX_YAML_DEPTH)}), "overrides",
         "levels deep"),
    ):
        resp = api.post("/api/v1/runs/", body, format="json")
        assert resp.status_code == 400, resp.content
        err = resp.json()["error"]
        assert err["field"] == field and words in err["message"], err
    resp = api.post("/api/v1/configs/", {"name": "deep", "config": deep}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "config"
    assert Run.objects.count() == 0 and RunConfig.objects.count() == 0
    ok = {"data": {"apply_chat_template_kwargs": {"enable_thinking": False}}}
    resp = api.post("/api/v1/runs/", _body(ready, config=ok), format="json")
    assert resp.status_code == 201, resp.content
