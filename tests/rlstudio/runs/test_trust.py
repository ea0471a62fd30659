"""The outside probes of the trust issue, each refused through every way in: create (overrides and a
whole config), clone, resume, the new-run form's YAML and overrides, saved configs; tokens and
checkpoint paths that outlive or escape their run.

Real PostgreSQL; no Ray or worker (with the non-transactional `db`, on-commit task sends never fire).
"""
import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.runs import launch, run_secrets
from rlstudio.runs.models import Run, RunConfig, RunStatus
from rlstudio.runs.services import run_record_progress, run_token_check, run_transition

pytestmark = pytest.mark.django_db
S = RunStatus
PASSWORD = "pw-for-tests-1"

# Each reproduction of the issue, as (override, the key the refusal names).
PROBES = [
    ({"custom_reward_function.path": "/tmp/evil.py"}, "custom_reward_function.path"),
    ({"data.val_files": "/srv/bob/data.jsonl"}, "data.val_files"),
    ({"data.train_files": "/srv/bob/data.jsonl"}, "data.train_files"),
    ({"trainer.default_local_dir": "/srv/state/runs/1"}, "trainer.default_local_dir"),
    ({"trainer.resume_from_path": "/srv/state/runs/1/global_step_2"}, "trainer.resume_from_path"),
    ({"actor_rollout_ref.model.trust_remote_code": True}, "actor_rollout_ref.model.trust_remote_code"),
    ({"actor_rollout_ref.model.tokenizer_path": "/srv/bob/tok"}, "actor_rollout_ref.model.tokenizer_path"),
    ({"tools.config_path": "/etc/passwd"}, "tools.config_path"),
    ({"actor_rollout_ref.rollout.multi_turn.tool_config_path": "/etc/passwd"}, "tools.config_path"),
    ({"trainer.logger": ["console", "wandb"]}, "trainer.logger"),
    ({"trainer.project_name": "../../etc"}, "trainer.project_name"),
    ({"trainer.experiment_name": "../x"}, "trainer.experiment_name"),
    ({"trainer.launcher": "ray", "trainer.n_gpus_per_node": 2}, "trainer."),
    ({"trainer.torch_threads": 4096}, "trainer.torch_threads"),
    ({"trainer.max_ckpt_to_keep_cap": 1000}, "trainer.max_ckpt_to_keep_cap"),
    ({"trainer.disk_budget_gb": 1e9}, "trainer.disk_budget_gb"),
    ({"trainer": '{"default_local_dir": "/tmp/x"}'}, "trainer.default_local_dir"),
]


def _body(ready, **extra):
    """A launch's body: the preset cpu_smoke unless `extra` gives the config another way (two: a 400)."""
    preset = {} if {"config", "config_id"} & set(extra) else {"preset": "cpu_smoke"}
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, **preset, **extra}


def _refused(resp, key):
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"].startswith(key), error
    return error


@pytest.mark.parametrize("override,key", PROBES)
def test_create_refuses_each_probe_as_overrides(api, ready, override, key):
    _refused(api.post("/api/v1/runs/", _body(ready, overrides=override), format="json"), key)
    assert Run.objects.count() == 0


@pytest.mark.parametrize("override,key", [p for p in PROBES if not isinstance(next(iter(p[0].values())), str)
                                          or "." in next(iter(p[0]))])
def test_create_refuses_each_probe_in_a_whole_config(api, ready, override, key):
    config: dict = {}
    for dotted, value in override.items():
        dotted = {"actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools.config_path"}.get(dotted, dotted)
        *head, last = dotted.split(".")
        node = config
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    _refused(api.post("/api/v1/runs/", _body(ready, config=config), format="json"), key)
    assert Run.objects.count() == 0


@pytest.mark.parametrize("override,key", PROBES)
def test_clone_refuses_each_probe(api, ready, alice, override, key):
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    source = Run.objects.get(pk=resp.json()["id"])
    run_transition(run=source, to=S.FAILED, error="for the test")
    _refused(api.post(f"/api/v1/runs/{source.pk}/clone/", {"overrides": override}, format="json"), key)
    assert Run.objects.count() == 1


@pytest.mark.parametrize("override,key", PROBES)
def test_the_form_refuses_each_probe_in_overrides_and_yaml(alice, ready, override, key):
    page = Client()
    page.force_login(alice)
    lines = "\n".join(f"{k}={v if not isinstance(v, list) else '[' + ','.join(v) + ']'}"
                      for k, v in override.items())
    form = {"name": "f1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "overrides": lines}
    resp = page.post("/runs/new/", form)
    assert resp.status_code == 400 and key in resp.content.decode()
    import json

    import yaml

    dotted, value = next(iter(override.items()))
    dotted = {"actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools.config_path"}.get(dotted, dotted)
    doc: dict = {}
    node = doc
    *head, last = dotted.split(".")
    for part in head:
        node = node.setdefault(part, {})
    node[last] = json.loads(value) if isinstance(value, str) and value.startswith("{") else value  # a section
    for extra_key, extra in list(override.items())[1:]:  # the launcher probe sets two keys
        *head, last = extra_key.split(".")
        node = doc
        for part in head:
            node = node.setdefault(part, {})
        node[last] = extra
    resp = page.post("/runs/new/", {**form, "overrides": "", "config_yaml": yaml.safe_dump(doc)})
    assert resp.status_code == 400 and key in resp.content.decode()
    assert Run.objects.count() == 0


@pytest.mark.parametrize("extra,field", [
    ({"overrides": {"actor_rollout_ref.actor.optim.lr": "nan"}}, "actor_rollout_ref.actor.optim.lr"),
    ({"overrides": {"actor_rollout_ref.rollout.temperature": "inf"}}, "actor_rollout_ref.rollout.temperature"),
    ({"overrides": {"trainer.project_name": "a\u0000b"}}, "trainer.project_name"),
    ({"overrides": {"reward.reward_kwargs": {"k": "a\u0000"}}}, "reward.reward_kwargs"),
    ({"overrides": [1, 2]}, "overrides[0]"),
    ({"overrides": ["tools.names=[1]"]}, "tools.names"),
])
def test_non_finite_nul_and_non_string_items_are_400s(api, ready, extra, field):
    _refused(api.post("/api/v1/runs/", _body(ready, **extra), format="json"), field)


def test_a_json_number_too_large_for_a_float_is_a_400(api, ready):
    """1e400 parses to inf: refused like nan, never stored."""
    import json

    body = json.dumps(_body(ready, config={"actor_rollout_ref": {"actor": {"optim": {"lr": 12345}}}}))
    resp = api.generic("POST", "/api/v1/runs/", body.replace("12345", "1e400"), content_type="application/json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] in ("config", "actor_rollout_ref.actor.optim.lr")
    assert Run.objects.count() == 0


def test_form_yaml_inf_is_a_400(alice, ready):
    page = Client()
    page.force_login(alice)
    resp = page.post("/runs/new/", {"name": "f1", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                    "preset": "cpu_smoke", "gpus": 0,
                                    "config_yaml": "actor_rollout_ref:\n  actor:\n    optim:\n      lr: .inf\n"})
    assert resp.status_code == 400 and "finite" in resp.content.decode()


def test_the_platform_sets_paths_and_resources_from_the_records(api, ready, settings):
    settings.RLSTUDIO_RUN_TORCH_THREADS = 2
    resp = api.post("/api/v1/runs/", _body(ready, gpus=0, overrides={"trainer.logger": ["tensorboard"]}),
                    format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    tr = run.config["trainer"]
    assert run.config["data"]["train_files"] == ready["dataset"].file_path
    assert run.config["actor_rollout_ref"]["model"]["path"] == ready["model"].path
    assert (tr["device"], tr["nnodes"], tr["n_gpus_per_node"], tr["launcher"], tr["torch_threads"]) == (
        "cpu", 1, 1, "auto", 2)
    spec = launch.freeze_spec(run=run, out_dir=launch.run_dir(run.pk))
    assert spec["trainer"]["default_local_dir"] == str(launch.run_dir(run.pk))
    assert spec["trainer"]["logger"][0] == "tensorboard" and {"jsonl", "http"} <= set(spec["trainer"]["logger"])
    assert spec["custom_reward_function"]["path"] is None and spec["tools"]["config_path"] is None


def test_a_stored_config_is_read_without_its_platform_keys(api, ready, alice):
    """A saved config written before the gate (or by hand in the admin) cannot carry a path into a run."""
    evil = {"custom_reward_function": {"path": "/tmp/evil.py"}, "data": {"train_files": "/srv/bob/x.jsonl"},
            "trainer": {"default_local_dir": "/srv/bob/runs/3", "torch_threads": 4096},
            "actor_rollout_ref": {"rollout": {"n": 2}}}
    saved = RunConfig.objects.create(owner=alice, name="old", config=evil)
    resp = api.post("/api/v1/runs/", _body(ready, config_id=saved.pk), format="json")
    assert resp.status_code == 201, resp.content
    cfg = Run.objects.get(pk=resp.json()["id"]).config
    assert cfg["custom_reward_function"]["path"] is None
    assert cfg["data"]["train_files"] == ready["dataset"].file_path
    assert cfg["trainer"]["default_local_dir"] == "outputs/run" and cfg["trainer"]["torch_threads"] != 4096
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 2


def test_saving_a_config_stores_no_platform_keys(api):
    resp = api.post("/api/v1/configs/", {"name": "mine", "config": {"actor_rollout_ref": {"rollout": {"n": 3}}}},
                    format="json")
    assert resp.status_code == 201, resp.content
    stored = RunConfig.objects.get(pk=resp.json()["id"]).config
    assert stored["trainer"]["device"] == "auto" and stored["data"]["train_files"] == ""
    _refused(api.post("/api/v1/configs/", {"name": "evil", "config": {"tools": {"config_path": "/etc/passwd"}}},
                      format="json"), "tools.config_path")


def test_resume_starts_only_from_the_runs_own_checkpoint(api, ready, alice, bob, settings, tmp_path):
    """The issue's probe: point the run's config at another user's run folder, stop it while queued,
    resume it. The stored config's folder is never read: only the run's own folder is."""
    settings.RUNS_DIR = tmp_path
    theirs = tmp_path / "999"
    (theirs / "global_step_5").mkdir(parents=True)
    (theirs / "latest_checkpointed_iteration.txt").write_text("5")
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    run = Run.objects.get(pk=resp.json()["id"])
    config = dict(run.config)
    config["trainer"] = {**config["trainer"], "default_local_dir": str(theirs)}
    Run.objects.filter(pk=run.pk).update(config=config, status=S.QUEUED,
                                         checkpoint_path=str(theirs / "global_step_5"))
    run.refresh_from_db()
    run_transition(run=run, to=S.STOPPED)
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 409 and "no checkpoint" in resp.json()["error"]["message"]
    # Its own checkpoint, recorded in its own folder, is the one a resume starts from.
    own = tmp_path / str(run.pk)
    (own / "global_step_1").mkdir(parents=True)
    (own / "latest_checkpointed_iteration.txt").write_text("1")
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 201, resp.content
    child = Run.objects.get(pk=resp.json()["id"])
    assert child.resume_from == str(own / "global_step_1") and child.parent_id == run.pk
    assert child.config["trainer"]["resume_from_path"] is None  # written only when frozen
    spec = launch.freeze_spec(run=child, out_dir=launch.run_dir(child.pk))
    assert spec["trainer"]["resume_mode"] == "resume_path"
    assert spec["trainer"]["resume_from_path"] == str(own / "global_step_1")
    # A recorded source outside the parent's folder is dropped when the spec is frozen.
    Run.objects.filter(pk=child.pk).update(resume_from=str(theirs / "global_step_5"))
    child.refresh_from_db()
    spec = launch.freeze_spec(run=child, out_dir=launch.run_dir(child.pk))
    assert spec["trainer"]["resume_from_path"] is None and spec["trainer"]["resume_mode"] == "auto"


def test_a_run_checkpointed_at_its_last_step_offers_no_resume(api, ready, alice, settings, tmp_path):
    """A run that succeeded with its last checkpoint at its last step has nothing left to train: its
    Resume made a run that succeeded at once without a step (a job, a model load, and on a cluster its
    GPUs, for nothing). The button is not offered and the API refuses it with the reason; a run stopped
    (or failed) there may still have its end to finish, and resumes."""
    from rlstudio.runs.selectors import run_header_context

    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    run = Run.objects.get(pk=resp.json()["id"])
    own = tmp_path / str(run.pk)
    (own / "global_step_2").mkdir(parents=True)
    (own / "latest_checkpointed_iteration.txt").write_text("2")
    Run.objects.filter(pk=run.pk).update(status=S.SUCCEEDED, step=2, total_steps=2,
                                         checkpoint_path=str(own / "global_step_2"))
    run.refresh_from_db()
    assert not run_header_context(run=run, user=alice)["can_resume"]
    page = Client()
    page.force_login(alice)
    assert f'action="/runs/{run.pk}/resume/"' not in page.get(f"/runs/{run.pk}/").content.decode()
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 409 and "no step left" in resp.json()["error"]["message"], resp.content
    assert Run.objects.count() == 1
    # Stopped there (its final validation and export not done): resumable, from that checkpoint.
    Run.objects.filter(pk=run.pk).update(status=S.STOPPED)
    run.refresh_from_db()
    assert run_header_context(run=run, user=alice)["can_resume"]
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 201 and Run.objects.get(pk=resp.json()["id"]).resume_from == str(own / "global_step_2")


def test_an_ingest_token_dies_with_its_run(make_run, alice, settings, tmp_path):
    from rlstudio.runs.services import run_issue_ingest_token

    settings.RUNS_DIR = tmp_path
    run = make_run(alice)
    token = run_issue_ingest_token(run=run)
    run_secrets.write_token(launch.run_dir(run.pk), token)
    assert run_token_check(run=run, token=token)
    run_transition(run=run, to=S.STOPPED)
    run.refresh_from_db()
    assert run.ingest_token_hash == "" and not run_token_check(run=run, token=token)
    assert not (launch.run_dir(run.pk) / run_secrets.TOKEN_FILE).exists()
    resp = APIClient().post(f"/api/v1/runs/{run.pk}/events/",
                            {"events": [{"seq": 1, "type": "heartbeat", "time": 1.0, "data": {"step": 99}}]},
                            format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 401
    assert Run.objects.get(pk=run.pk).step == 0


def test_a_checkpoint_path_outside_the_run_folder_is_not_recorded(make_run, alice, settings, tmp_path):
    settings.RUNS_DIR = tmp_path
    run = make_run(alice)
    run_record_progress(run=run, checkpoint_path="/srv/bob/runs/3/global_step_9")
    run_record_progress(run=run, checkpoint_path=str(tmp_path / str(run.pk) / ".." / "3" / "global_step_9"))
    assert Run.objects.get(pk=run.pk).checkpoint_path == ""
    inside = str(tmp_path / str(run.pk) / "global_step_2")
    run_record_progress(run=run, checkpoint_path=inside)
    assert Run.objects.get(pk=run.pk).checkpoint_path == inside


def test_the_job_environment_holds_no_token(tmp_path):
    path = run_secrets.write_token(tmp_path, "rit_secret")
    env = launch.job_env(run_id=3, token_file=path)
    assert "rit_secret" not in repr(env) and env["RLSTUDIO_INGEST_TOKEN_FILE"] == str(path)
    assert (path.stat().st_mode & 0o777) == 0o600 and run_secrets.read_token(tmp_path) == "rit_secret"


def test_a_submitted_runs_frozen_spec_clones_and_resumes_cleanly(api, ready, settings, tmp_path):
    """The frozen spec holds what the platform wrote (its folder, the http sink, resources): reading it
    back for a clone drops those, so the clone is not refused for keys its user never set."""
    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    run = Run.objects.get(pk=resp.json()["id"])
    spec = launch.freeze_spec(run=run, out_dir=launch.run_dir(run.pk))
    assert "http" in spec["trainer"]["logger"]
    Run.objects.filter(pk=run.pk).update(config=spec, ray_submission_id="rlstudio-run-x")
    run.refresh_from_db()
    run_transition(run=run, to=S.FAILED, error="for the test")
    resp = api.post(f"/api/v1/runs/{run.pk}/clone/", {"overrides": {"actor_rollout_ref.rollout.n": 2}},
                    format="json")
    assert resp.status_code == 201, resp.content
    clone = Run.objects.get(pk=resp.json()["id"])
    assert clone.config["trainer"]["default_local_dir"] == "outputs/run"
    assert "http" not in clone.config["trainer"]["logger"]
    assert clone.config["actor_rollout_ref"]["rollout"]["n"] == 2


def _registered_reward(tmp_path, settings, name="three_quarters"):
    """A ready registry entry for a file under the reward root (as a passed check leaves it)."""
    import hashlib

    from rlstudio.registry.models import RewardFunction

    root = tmp_path / "rewards"
    root.mkdir(exist_ok=True)
    path = root / f"{name}.py"
    path.write_text("def compute_score(*a, **k):\n    return 0.75\n", encoding="utf-8")
    settings.RLSTUDIO_REWARD_ROOTS = [str(root)]
    RewardFunction.objects.create(name=name, kind="file", path=str(path.resolve()), status="ready",
                                  checked_sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return path.resolve()


def test_the_form_offers_registered_rewards_and_the_platform_writes_their_file(alice, ready, settings, tmp_path):
    path = _registered_reward(tmp_path, settings)
    page = Client()
    page.force_login(alice)
    html = page.get("/runs/new/").content.decode()
    assert 'value="three_quarters"' in html and 'value="gsm8k"' in html
    resp = page.post("/runs/new/", {"name": "f1", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                    "preset": "cpu_smoke", "gpus": 0, "reward_name": "three_quarters"})
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    run = Run.objects.get(name="f1")
    assert run.config["reward"]["name"] == "three_quarters"
    assert run.config["custom_reward_function"] == {"path": str(path), "name": "compute_score"}
    # A name nobody registered is refused on the field.
    resp = page.post("/runs/new/", {"name": "f2", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                    "preset": "cpu_smoke", "gpus": 0, "overrides": "reward.name=nobody"})
    assert resp.status_code == 400 and "reward.name" in resp.content.decode()


def test_trust_remote_code_comes_from_the_model_entry(api, ready):
    from rlstudio.catalog.models import ModelAsset

    ModelAsset.objects.filter(pk=ready["model"].pk).update(trust_remote_code=True)
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    assert Run.objects.get(pk=resp.json()["id"]).config["actor_rollout_ref"]["model"]["trust_remote_code"] is True


def test_a_hidden_val_dataset_is_refused_on_its_own_field(api, ready, bob, make_dataset):
    theirs = make_dataset(bob, name="bobs-val", status="ready")
    _refused(api.post("/api/v1/runs/", _body(ready, val_dataset=theirs.pk), format="json"), "val_dataset")


def test_clone_and_resume_refuse_a_dataset_no_longer_shared(api, alice, staff, make_dataset, make_model,
                                                           settings, tmp_path):
    settings.RUNS_DIR = tmp_path
    shared = make_dataset(staff, name="shared", status="ready", visibility="everyone")
    model = make_model(alice)
    resp = api.post("/api/v1/runs/", {"name": "r", "dataset": shared.pk, "model": model.pk, "preset": "cpu_smoke"},
                    format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    run_transition(run=run, to=S.FAILED, error="for the test")
    (tmp_path / str(run.pk) / "global_step_1").mkdir(parents=True)
    (tmp_path / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    type(shared).objects.filter(pk=shared.pk).update(visibility="private")
    _refused(api.post(f"/api/v1/runs/{run.pk}/clone/", {}, format="json"), "dataset")
    _refused(api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json"), "dataset")
    assert Run.objects.count() == 1


def test_the_queued_runs_cap_refuses_a_new_run_clearly(api, ready, alice):
    from rlstudio.quotas.models import GpuQuota

    GpuQuota.objects.create(user=alice, max_concurrent_runs=0, max_queued_runs=1)  # runs wait in the queue
    first = api.post("/api/v1/runs/", _body(ready), format="json")
    assert first.status_code == 201 and first.json()["status"] == S.QUEUED
    second = api.post("/api/v1/runs/", _body(ready, name="r2"), format="json")
    assert second.status_code == 409, second.content
    assert "max_queued_runs" in second.json()["error"]["message"]
    assert Run.objects.count() == 1
