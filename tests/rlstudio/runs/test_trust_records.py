"""The trust issue's probes where no user types them: planted in a stored run config (a run made before
the gate, or edited in the admin) and then resumed or cloned; another user's dataset path under every
string key; an ingest token after each final state; the environment a submitted job gets from Ray.

Real PostgreSQL; no Ray or worker (Ray's submit is replaced by a recorder here; the real Jobs API is
asked in tests/e2e/test_run_lifecycle.py).
"""
import json

import pytest
from rest_framework.test import APIClient

from rlstudio.runs import launch, run_secrets
from rlstudio.runs.gate.flat import flatten
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_issue_ingest_token, run_token_check, run_transition
from trainer.config import Config, apply_overrides, describe_config

pytestmark = pytest.mark.django_db
S = RunStatus

# The issue's reproductions, as values planted in a stored config (dotted key -> value).
PLANTED = [
    {"custom_reward_function.path": "/tmp/evil.py", "custom_reward_function.name": "run_me"},
    {"data.val_files": "/srv/bob/val.jsonl"},
    {"data.train_files": "/srv/bob/data.jsonl"},
    {"trainer.default_local_dir": "/srv/state/runs/999"},
    {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": "/srv/state/runs/999/global_step_5"},
    {"actor_rollout_ref.model.trust_remote_code": True},
    {"actor_rollout_ref.model.tokenizer_path": "/srv/bob/tok"},
    {"tools.config_path": "/etc/passwd"},
    {"trainer.logger": ["console", "wandb"]},
    {"trainer.launcher": "ray", "trainer.n_gpus_per_node": 2, "trainer.nnodes": 2},
    {"trainer.torch_threads": 4096},
    {"trainer.max_ckpt_to_keep_cap": 1000, "trainer.disk_budget_gb": 1e9},
]
# User keys planted out of their bounds: refused (400 naming the key), never run as stored.
PLANTED_OUT_OF_BOUNDS = [
    {"trainer.project_name": "../../etc"},
    {"trainer.experiment_name": "../x"},
    {"actor_rollout_ref.rollout.n": 100000},
]


def _body(ready, **extra):
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            **extra}


def _finished_run_with_a_checkpoint(api, ready, tmp_path, planted):
    """alice's failed run with a checkpoint in its own folder, its stored config carrying `planted`."""
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    stored = apply_overrides(Config.from_dict(run.config), planted).to_dict()  # the schema, not the gate
    Run.objects.filter(pk=run.pk).update(config=stored)
    run.refresh_from_db()
    run_transition(run=run, to=S.FAILED, error="for the test")
    (tmp_path / str(run.pk) / "global_step_1").mkdir(parents=True)
    (tmp_path / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    return run


def _platform_values_of(run):
    return launch.platform_values(
        dataset=run.dataset, val_dataset=run.val_dataset, model=run.model, gpus=run.gpus,
        reward_name=run.config["reward"]["name"], out_dir=launch.run_dir(run.pk),
        resume_from=launch.resume_source(run))


@pytest.mark.parametrize("action", ["resume", "clone"])
@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: next(iter(p)))
def test_a_planted_platform_key_never_reaches_a_resumed_or_cloned_run(api, ready, settings, tmp_path, action,
                                                                      planted):
    """The new run's config and the spec frozen for its trainer hold the platform's values, written
    from the new run's record: none of what was planted."""
    settings.RUNS_DIR = tmp_path
    run = _finished_run_with_a_checkpoint(api, ready, tmp_path, planted)
    resp = api.post(f"/api/v1/runs/{run.pk}/{action}/", {}, format="json")
    if "trainer.logger" in planted:  # a tracker the operator has not enabled is refused by name, not run
        assert resp.status_code == 400, resp.content
        assert resp.json()["error"]["field"] == "trainer.logger[1]"
        assert "not enabled on this platform" in resp.json()["error"]["message"]
        assert not Run.objects.filter(parent=run).exists()
        return
    assert resp.status_code == 201, resp.content
    child = Run.objects.select_related("dataset", "model", "parent").get(pk=resp.json()["id"])
    spec = flatten(launch.freeze_spec(run=child, out_dir=launch.run_dir(child.pk)))
    stored = flatten(child.config)
    expected = _platform_values_of(child)
    for key, value in planted.items():
        if key == "trainer.resume_mode" and action == "resume":
            assert spec[key] == "resume_path"  # the platform's own: from the run's recorded checkpoint
        else:
            assert stored[key] != value and spec[key] != value, key
        assert spec[key] == expected[key], key
    if action == "resume":
        assert spec["trainer.resume_from_path"] == str(tmp_path / str(run.pk) / "global_step_1")
    else:
        assert spec["trainer.resume_from_path"] is None and spec["trainer.resume_mode"] == "auto"


@pytest.mark.parametrize("action", ["resume", "clone"])
@pytest.mark.parametrize("planted", PLANTED_OUT_OF_BOUNDS, ids=lambda p: next(iter(p)))
def test_a_planted_user_key_out_of_bounds_is_refused_on_resume_and_clone(api, ready, settings, tmp_path,
                                                                        action, planted):
    settings.RUNS_DIR = tmp_path
    run = _finished_run_with_a_checkpoint(api, ready, tmp_path, planted)
    resp = api.post(f"/api/v1/runs/{run.pk}/{action}/", {}, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == next(iter(planted))
    assert Run.objects.count() == 1


def test_the_spec_is_checked_again_when_it_is_frozen(api, ready, settings, tmp_path):
    """A queued run whose stored config was changed after it was checked fails at submit, naming the key."""
    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    run = Run.objects.get(pk=resp.json()["id"])
    stored = apply_overrides(Config.from_dict(run.config), {"trainer.experiment_name": "../../x"}).to_dict()
    Run.objects.filter(pk=run.pk).update(config=stored)
    run.refresh_from_db()
    with pytest.raises(launch.ConfigInvalid) as exc:
        launch.freeze_spec(run=run, out_dir=launch.run_dir(run.pk))
    assert exc.value.key == "trainer.experiment_name"


# Every string-valued key of the schema, free text or list (choices are refused by the schema itself).
STRING_KEYS = [key for key, tp, *_ in describe_config() if "str" in tp and not tp.startswith("dict")]


@pytest.mark.parametrize("key", STRING_KEYS)
def test_another_users_dataset_is_reachable_by_no_key(api, ready, bob, make_dataset, key):
    """Bob's dataset file, named under any key on create or on clone, is refused naming the key."""
    theirs = make_dataset(bob, name="bobs-secret", status="ready").file_path
    value = [theirs] if key in ("tools.names", "trainer.logger") else theirs
    resp = api.post("/api/v1/runs/", _body(ready, overrides={key: value}), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"].startswith(key)
    source = Run.objects.get(pk=api.post("/api/v1/runs/", _body(ready), format="json").json()["id"])
    run_transition(run=source, to=S.FAILED, error="for the test")
    resp = api.post(f"/api/v1/runs/{source.pk}/clone/", {"overrides": {key: value}}, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"].startswith(key)
    assert not any(theirs in json.dumps(run.config) for run in Run.objects.all())


@pytest.mark.parametrize("path", [
    [S.SUBMITTING, S.RUNNING, S.SUCCEEDED],
    [S.SUBMITTING, S.RUNNING, S.FAILED],
    [S.SUBMITTING, S.FAILED],
    [S.SUBMITTING, S.RUNNING, S.LOST],
    [S.SUBMITTING, S.RUNNING, S.STOPPING, S.STOPPED],
    [S.STOPPED],
], ids=lambda p: "-".join(p))
def test_an_ingest_token_is_refused_after_every_final_state(make_run, alice, settings, tmp_path, path):
    """The probe: keep writing to a finished run with its token (step, checkpoint path)."""
    settings.RUNS_DIR = tmp_path
    run = make_run(alice)
    token = run_issue_ingest_token(run=run)
    for state in path:
        run_transition(run=run, to=state)
        run.refresh_from_db()
    assert run.status in (S.SUCCEEDED, S.FAILED, S.LOST, S.STOPPED)
    assert not run_token_check(run=run, token=token)
    before = (run.step, run.checkpoint_path)
    inside = str(tmp_path / str(run.pk) / "global_step_99")
    resp = APIClient().post(f"/api/v1/runs/{run.pk}/events/", {"events": [
        {"seq": 1, "type": "heartbeat", "time": 1.0, "data": {"step": 99}},
        {"seq": 2, "type": "checkpoint", "time": 2.0, "data": {"step": 99, "path": inside}},
    ]}, format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 401
    run.refresh_from_db()
    assert (run.step, run.checkpoint_path) == before


def test_the_submitted_job_gets_its_token_as_a_file_never_in_rays_job_api(api, ready, settings, tmp_path,
                                                                          monkeypatch):
    """run_submit as the Celery task calls it: what Ray is given (runtime_env.env_vars, entrypoint,
    metadata, all readable through its Jobs API) holds no token; the job finds it in a 0600 file."""
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.services import run_submit

    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", _body(ready), format="json")
    run = Run.objects.get(pk=resp.json()["id"])
    assert run.status == S.SUBMITTING
    given = {}
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    monkeypatch.setattr(ray_jobs, "submit", lambda **kwargs: given.update(kwargs) or True)
    assert run_submit(run_id=run.pk) == "submitted"
    token_file = launch.run_dir(run.pk) / run_secrets.TOKEN_FILE
    token = token_file.read_text(encoding="utf-8")
    assert token and (token_file.stat().st_mode & 0o777) == 0o600
    assert run_token_check(run=Run.objects.get(pk=run.pk), token=token)
    assert token not in json.dumps(given, default=str)
    assert given["env_vars"]["RLSTUDIO_INGEST_TOKEN_FILE"] == str(token_file)
    assert not any("TOKEN" in name and name != "RLSTUDIO_INGEST_TOKEN_FILE" for name in given["env_vars"])


def test_a_tool_set_is_chosen_by_name_and_written_by_the_platform(api, alice, ready, settings, tmp_path,
                                                                 monkeypatch):
    """Listed in the form; an unknown name is refused on its field; at submit the registered YAML is
    written into the run's own folder and the spec's tools.config_path names that copy."""
    from django.test import Client

    from rlstudio.registry.models import ToolSet
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.services import run_submit

    settings.RUNS_DIR = tmp_path
    text = "tools:\n  - class_name: calculator\n"
    ToolSet.objects.create(name="calc", config_yaml=text, status="ready")
    ToolSet.objects.create(name="broken-set", config_yaml="tools: []\n", status="broken")
    page = Client()
    page.force_login(alice)
    form = page.get("/runs/new/").content.decode()
    assert 'value="calc"' in form and 'value="broken-set"' not in form
    multi = {"actor_rollout_ref.rollout.multi_turn.enable": True}
    for name in ("broken-set", "/etc/passwd", "../calc"):
        resp = api.post("/api/v1/runs/", _body(ready, tool_set=name, overrides=multi), format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == "tool_set", resp.content
    resp = api.post("/api/v1/runs/", _body(ready, tool_set="calc", overrides=multi), format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    monkeypatch.setattr(ray_jobs, "submit", lambda **kwargs: True)
    assert run_submit(run_id=run.pk) == "submitted"
    spec = Run.objects.get(pk=run.pk).config
    written = launch.run_dir(run.pk) / "tool_config.yaml"
    assert spec["tools"]["config_path"] == str(written) and written.read_text() == text
