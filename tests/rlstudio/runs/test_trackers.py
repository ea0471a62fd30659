"""The operator's trackers (W&B, MLflow) for platform runs: a user may list one in trainer.logger only where
the operator enabled it; its secret reaches the job in an owner-only file of the run folder, named in the
job's environment, and never in the job's environment itself, the run's stored config, its frozen spec
or the API's run detail; the file goes when the run ends.

Real PostgreSQL; Ray's submit is replaced by a recorder; the tracker packages are not needed
(`trackers.installed` is patched where a test needs them present).
"""

from __future__ import annotations

import json

import pytest

from rlstudio.runs import launch, ray_jobs, run_secrets, trackers
from rlstudio.runs.models import Run
from rlstudio.runs.models import RunStatus as S
from rlstudio.runs.services import run_submit, run_transition

pytestmark = pytest.mark.django_db
WANDB_KEY = "wandb-key-0123456789abcdef-never-shown"
MLFLOW_TOKEN = "mlflow-token-fedcba-never-shown"
MLFLOW_PASSWORD = "mlflow-password-never-shown"


@pytest.fixture
def wandb_on(settings, monkeypatch, runs_dir):
    settings.RLSTUDIO_WANDB_API_KEY = WANDB_KEY
    settings.RLSTUDIO_WANDB_BASE_URL = "https://wandb.example.org"
    settings.RLSTUDIO_WANDB_ENTITY = "lab"
    monkeypatch.setattr(trackers, "installed", lambda name: True)
    return settings


@pytest.fixture
def mlflow_on(settings, monkeypatch, runs_dir):
    settings.RLSTUDIO_MLFLOW_TRACKING_URI = "https://mlflow.example.org"
    settings.RLSTUDIO_MLFLOW_TRACKING_TOKEN = MLFLOW_TOKEN
    settings.RLSTUDIO_MLFLOW_TRACKING_USERNAME = "studio"
    settings.RLSTUDIO_MLFLOW_TRACKING_PASSWORD = MLFLOW_PASSWORD
    monkeypatch.setattr(trackers, "installed", lambda name: True)
    return settings


def _create(api, ready, loggers, **extra):
    body = {
        "name": "tracked",
        "dataset": ready["dataset"].pk,
        "model": ready["model"].pk,
        "preset": "cpu_smoke",
        "overrides": {"trainer.logger": loggers, **extra},
    }
    return api.post("/api/v1/runs/", body, format="json")


def _submitted(api, ready, monkeypatch, loggers, **extra):
    """A run listing `loggers`, created through the API and submitted; (run, what Ray's submit got)."""
    resp = _create(api, ready, loggers, **extra)
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    Run.objects.filter(pk=run.pk).update(status=S.SUBMITTING)
    given: dict = {}
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    monkeypatch.setattr(ray_jobs, "submit", lambda **kwargs: given.update(kwargs) or True)
    assert run_submit(run_id=run.pk) == "submitted"
    run.refresh_from_db()
    return run, given


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_a_tracker_the_operator_has_not_enabled_is_refused_naming_trainer_logger(
    api, ready, tracker
):
    resp = _create(api, ready, ["console", tracker])
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == "trainer.logger[1]" and "not enabled" in error["message"]
    assert trackers.ENABLED_BY[tracker] in error["message"]
    assert Run.objects.count() == 0


def test_an_enabled_tracker_whose_package_is_missing_is_refused(api, ready, settings, monkeypatch):
    settings.RLSTUDIO_WANDB_API_KEY = WANDB_KEY
    monkeypatch.setattr(trackers, "installed", lambda name: False)
    resp = _create(api, ready, ["wandb"])
    assert resp.status_code == 400 and resp.json()["error"]["field"].startswith("trainer.logger")
    assert "not installed" in resp.json()["error"]["message"]


def test_only_the_enabled_tracker_is_accepted(api, ready, wandb_on):
    assert _create(api, ready, ["console", "wandb"]).status_code == 201
    resp = _create(api, ready, ["mlflow"])
    assert resp.status_code == 400 and resp.json()["error"]["field"].startswith("trainer.logger")


def test_wandb_key_travels_in_an_owner_only_file_and_nowhere_else(
    api, ready, wandb_on, monkeypatch, alice
):
    run, given = _submitted(api, ready, monkeypatch, ["wandb"], **{"trainer.project_name": "gsm8k"})
    env = given["env_vars"]
    out_dir = launch.run_dir(run.pk)
    key_file = out_dir / "wandb_api_key"
    assert env["RLSTUDIO_WANDB_API_KEY_FILE"] == str(key_file)
    assert key_file.read_text() == WANDB_KEY and (key_file.stat().st_mode & 0o777) == 0o600
    # non-secret settings in the environment; the key in none of what Ray's API or the platform shows
    assert (
        env["RLSTUDIO_WANDB_BASE_URL"] == "https://wandb.example.org"
        and env["RLSTUDIO_WANDB_ENTITY"] == "lab"
    )
    assert env["RLSTUDIO_TRACKER_RUN_ID"] == trackers.lineage_id(run)
    assert WANDB_KEY not in json.dumps(given, default=str)
    assert WANDB_KEY not in json.dumps(run.config) and "wandb" in run.config["trainer"]["logger"]
    assert WANDB_KEY not in (out_dir / "spec.json").read_text()
    detail = api.get(f"/api/v1/runs/{run.pk}/")
    assert detail.status_code == 200 and WANDB_KEY not in detail.content.decode()
    # the config the tracker is given is the user's view: no server path
    view = json.loads((out_dir / trackers.CONFIG_FILE).read_text())
    assert env["RLSTUDIO_TRACKER_CONFIG_FILE"] == str(out_dir / trackers.CONFIG_FILE)
    assert view["trainer"]["project_name"] == "gsm8k" and "wandb" in view["trainer"]["logger"]
    assert "http" not in view["trainer"]["logger"]
    assert str(out_dir) not in json.dumps(view) and ready["dataset"].file_path not in json.dumps(
        view
    )
    assert WANDB_KEY not in json.dumps(view)
    # the run ends: the secret goes with the ingest token
    run_transition(run=run, to=S.FAILED, error="for the test")
    assert not key_file.exists() and not (out_dir / run_secrets.TOKEN_FILE).exists()


def test_mlflow_secrets_travel_in_files_and_the_uri_and_user_in_the_environment(
    api, ready, mlflow_on, monkeypatch
):
    run, given = _submitted(api, ready, monkeypatch, ["console", "mlflow"])
    env = given["env_vars"]
    out_dir = launch.run_dir(run.pk)
    assert env["RLSTUDIO_MLFLOW_TRACKING_URI"] == "https://mlflow.example.org"
    assert env["RLSTUDIO_MLFLOW_TRACKING_USERNAME"] == "studio"
    for variable, secret in (
        ("RLSTUDIO_MLFLOW_TRACKING_TOKEN_FILE", MLFLOW_TOKEN),
        ("RLSTUDIO_MLFLOW_TRACKING_PASSWORD_FILE", MLFLOW_PASSWORD),
    ):
        path = out_dir / env[variable].rsplit("/", 1)[1]
        assert env[variable] == str(path) and path.read_text() == secret
        assert (path.stat().st_mode & 0o777) == 0o600
        assert secret not in json.dumps(given, default=str) and secret not in json.dumps(run.config)
    assert "RLSTUDIO_WANDB_API_KEY_FILE" not in env  # only the trackers the run lists
    run_transition(run=run, to=S.RUNNING)
    run_transition(run=run, to=S.SUCCEEDED)
    assert not any((out_dir / name).exists() for name in trackers.SECRET_FILES)


def test_a_run_listing_no_tracker_gets_no_tracker_file_or_variable(
    api, ready, wandb_on, monkeypatch
):
    run, given = _submitted(api, ready, monkeypatch, ["console"])
    assert not [k for k in given["env_vars"] if "WANDB" in k or "TRACKER" in k]
    assert not (launch.run_dir(run.pk) / "wandb_api_key").exists()


def test_a_stored_config_listing_a_tracker_since_disabled_is_refused_at_clone_and_submit(
    api, ready, wandb_on, monkeypatch
):
    resp = _create(api, ready, ["wandb"])
    run = Run.objects.get(pk=resp.json()["id"])
    wandb_on.RLSTUDIO_WANDB_API_KEY = ""
    run_transition(run=run, to=S.FAILED, error="for the test")
    resp = api.post(f"/api/v1/runs/{run.pk}/clone/", {}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"].startswith("trainer.logger")
    with pytest.raises(launch.ConfigInvalid) as refused:
        launch.freeze_spec(run=run, out_dir=launch.run_dir(run.pk))
    assert refused.value.key == "trainer.logger[0]"


def test_a_resume_continues_the_tracker_run_of_its_chain(alice, ready):
    first = Run.objects.create(
        owner=alice, name="a", dataset=ready["dataset"], model=ready["model"], config={}
    )
    second = Run.objects.create(
        owner=alice,
        name="b",
        dataset=ready["dataset"],
        model=ready["model"],
        config={},
        parent=first,
        parent_kind="resume",
    )
    third = Run.objects.create(
        owner=alice,
        name="c",
        dataset=ready["dataset"],
        model=ready["model"],
        config={},
        parent=second,
        parent_kind="resume",
    )
    clone = Run.objects.create(
        owner=alice,
        name="d",
        dataset=ready["dataset"],
        model=ready["model"],
        config={},
        parent=third,
        parent_kind="clone",
    )
    assert trackers.lineage_id(third) == trackers.lineage_id(second) == trackers.lineage_id(first)
    assert trackers.lineage_id(clone) != trackers.lineage_id(first)
    assert trackers.lineage_id(first).startswith(f"rlstudio-{first.pk}-")
    assert "RLSTUDIO_TRACKER_FORK_OF" not in trackers.run_env(third, ["wandb"])
    # A fork is a tracker run of its own that names its parent's chain and the step; a resume of the
    # fork continues the fork's run and names the same.
    fork = Run.objects.create(owner=alice, name="f", dataset=ready["dataset"], model=ready["model"], config={},
                              parent=third, parent_kind="fork", resume_from="/srv/runs/3/global_step_40")
    again = Run.objects.create(owner=alice, name="g", dataset=ready["dataset"], model=ready["model"], config={},
                               parent=fork, parent_kind="resume")
    env = trackers.run_env(again, ["mlflow"])
    assert env["RLSTUDIO_TRACKER_RUN_ID"] == trackers.lineage_id(fork) != trackers.lineage_id(first)
    assert (env["RLSTUDIO_TRACKER_FORK_OF"], env["RLSTUDIO_TRACKER_FORK_STEP"]) == (trackers.lineage_id(first), "40")
    assert trackers.run_env(fork, []) == {}


def test_the_system_check_names_a_missing_package_and_credentials_in_a_uri(settings, monkeypatch):
    settings.RLSTUDIO_WANDB_API_KEY = WANDB_KEY
    settings.RLSTUDIO_MLFLOW_TRACKING_URI = "https://user:pw@mlflow.example.org"
    monkeypatch.setattr(trackers, "installed", lambda name: name != "wandb")
    found = {m.id: m.msg for m in trackers.check_trackers()}
    assert "RLSTUDIO_WANDB_API_KEY" in found["runs.E101"] and "wandb" in found["runs.E101"]
    assert "RLSTUDIO_MLFLOW_TRACKING_URI" in found["runs.E102"] and "pw" not in found["runs.E102"]
    settings.RLSTUDIO_MLFLOW_TRACKING_URI = "https://mlflow.example.org"
    monkeypatch.setattr(trackers, "installed", lambda name: True)
    assert trackers.check_trackers() == []
