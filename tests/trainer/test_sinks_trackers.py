"""The wandb and mlflow sinks against stand-ins of the two packages (put in sys.modules: the real ones are
the `trackers` extra, not needed here): what a platform run's job environment gives them (the key read
from its file, the operator's server, entity and URI, the lineage id, the user's view of the config) and
what a run started by hand gives them (the config's own names), and the metrics they log by step."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from trainer.config import Config, apply_overrides
from trainer.sinks import Emitter, build_sinks

PLATFORM_VARIABLES = (
    "RLSTUDIO_WANDB_API_KEY_FILE",
    "RLSTUDIO_WANDB_BASE_URL",
    "RLSTUDIO_WANDB_ENTITY",
    "RLSTUDIO_TRACKER_RUN_ID",
    "RLSTUDIO_TRACKER_RUN_NAME",
    "RLSTUDIO_TRACKER_TAGS",
    "RLSTUDIO_TRACKER_CONFIG_FILE",
    "RLSTUDIO_TRACKER_FORK_OF",
    "RLSTUDIO_TRACKER_FORK_STEP",
    "RLSTUDIO_MLFLOW_TRACKING_URI",
    "RLSTUDIO_MLFLOW_TRACKING_USERNAME",
    "RLSTUDIO_MLFLOW_TRACKING_TOKEN_FILE",
    "RLSTUDIO_MLFLOW_TRACKING_PASSWORD_FILE",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """None of these set, and each restored after the test (setenv records the original, the
    MLflow sink sets MLFLOW_TRACKING_* in the process)."""
    for name in PLATFORM_VARIABLES:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


class FakeWandb(types.ModuleType):
    """Records wandb.Settings, wandb.init and the run's log / finish calls."""

    def __init__(self):
        super().__init__("wandb")
        self.settings, self.inits, self.logged, self.finished = [], [], [], 0
        self.login = lambda *a, **k: pytest.fail(
            "wandb.login writes the key to ~/.netrc: never called"
        )

    def Settings(self, **kwargs):  # noqa: N802 (wandb's name)
        self.settings.append(kwargs)
        return ("settings", kwargs)

    def init(self, **kwargs):
        self.inits.append(kwargs)
        fake = self

        class Run:
            def log(self, metrics, step):
                fake.logged.append((step, dict(metrics)))

            def finish(self):
                fake.finished += 1

        return Run()


class FakeMlflow(types.ModuleType):
    """Records mlflow's fluent calls; `existing` is what a search for the lineage tag finds."""

    def __init__(self, existing=()):
        super().__init__("mlflow")
        self.calls, self.metrics, self.env_at_start = [], [], {}
        fake = self

        class Client:
            def search_runs(self, **kwargs):
                fake.calls.append(("search_runs", kwargs))
                return [
                    types.SimpleNamespace(info=types.SimpleNamespace(run_id=r)) for r in existing
                ]

        self.tracking = types.SimpleNamespace(MlflowClient=Client)

    def set_tracking_uri(self, uri):
        self.calls.append(("set_tracking_uri", uri))

    def set_experiment(self, name):
        self.calls.append(("set_experiment", name))
        return types.SimpleNamespace(experiment_id="7")

    def start_run(self, **kwargs):
        self.calls.append(("start_run", kwargs))
        self.env_at_start = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
        return object()

    def log_dict(self, data, name):
        self.calls.append(("log_dict", name, data))

    def log_metrics(self, metrics, step):
        self.metrics.append((step, dict(metrics)))

    def end_run(self):
        self.calls.append(("end_run",))


def _config(**overrides):
    return apply_overrides(Config(), {"trainer.project_name": "gsm8k", **overrides})


def _platform_job(monkeypatch, tmp_path, view):
    """The environment a platform run's job gets (rlstudio.runs.run_secrets.write_tracker_files)."""
    key = tmp_path / "wandb_api_key"
    key.write_text("the-operators-key\n")
    view_file = tmp_path / "tracker_config.json"
    view_file.write_text(json.dumps(view))
    for name, value in {
        "RLSTUDIO_WANDB_API_KEY_FILE": str(key),
        "RLSTUDIO_WANDB_BASE_URL": "https://wb.example",
        "RLSTUDIO_WANDB_ENTITY": "lab",
        "RLSTUDIO_TRACKER_RUN_ID": "rlstudio-4-20261206",
        "RLSTUDIO_TRACKER_RUN_NAME": "my run",
        "RLSTUDIO_TRACKER_TAGS": '["math", "v2"]',
        "RLSTUDIO_TRACKER_CONFIG_FILE": str(view_file),
    }.items():
        monkeypatch.setenv(name, value)


def test_wandb_on_the_platform_gets_the_operators_key_server_and_the_users_view(
    monkeypatch, tmp_path
):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    view = {"trainer": {"project_name": "gsm8k", "logger": ["wandb"]}}
    _platform_job(monkeypatch, tmp_path, view)
    em = Emitter(build_sinks(["wandb"], out_dir=tmp_path / "out", config=_config()))
    em.metrics(1, {"critic/score/mean": 0.25})
    em.metrics(2, {"critic/score/mean": 0.5, "val-core/acc@4": 1})
    em.log("info", "not a metric")
    em.close()
    assert fake.settings == [{"api_key": "the-operators-key", "base_url": "https://wb.example"}]
    (init,) = fake.inits
    assert init["settings"] == ("settings", fake.settings[0])
    assert (init["project"], init["name"], init["entity"], init["tags"]) == (
        "gsm8k",
        "my run",
        "lab",
        ["math", "v2"],
    )
    assert (init["id"], init["resume"]) == ("rlstudio-4-20261206", "allow")
    assert init["config"] == view  # the user's view, not the whole config with the server's paths
    assert fake.logged == [
        (1, {"critic/score/mean": 0.25}),
        (2, {"critic/score/mean": 0.5, "val-core/acc@4": 1.0}),
    ]
    assert fake.finished == 1
    assert "the-operators-key" not in os.environ.values()


def test_wandb_keeps_a_users_experiment_name(monkeypatch, tmp_path):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    _platform_job(monkeypatch, tmp_path, {})
    build_sinks(
        ["wandb"],
        out_dir=tmp_path / "out",
        config=_config(**{"trainer.experiment_name": "lr-sweep-3"}),
    )
    assert fake.inits[0]["name"] == "lr-sweep-3"


def test_wandb_by_hand_uses_the_config_and_wandbs_own_login(monkeypatch, tmp_path):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = _config(**{"trainer.experiment_name": "local"})
    build_sinks(["wandb"], out_dir=tmp_path / "out", config=cfg)
    (init,) = fake.inits
    assert (
        fake.settings == [] and "settings" not in init and "id" not in init and "entity" not in init
    )
    assert (init["project"], init["name"], init["config"]) == ("gsm8k", "local", cfg.to_dict())


def test_an_unreadable_key_file_is_an_error_naming_its_variable(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", FakeWandb())
    monkeypatch.setenv("RLSTUDIO_WANDB_API_KEY_FILE", str(tmp_path / "gone"))
    with pytest.raises(RuntimeError, match="RLSTUDIO_WANDB_API_KEY_FILE"):
        build_sinks(["wandb"], out_dir=tmp_path / "out", config=_config())


def test_mlflow_on_the_platform_gets_the_uri_credentials_and_lineage_tag(monkeypatch, tmp_path):
    fake = FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    view = {"trainer": {"project_name": "gsm8k"}}
    _platform_job(monkeypatch, tmp_path, view)
    token = tmp_path / "mlflow_tracking_token"
    token.write_text("the-token")
    monkeypatch.setenv("RLSTUDIO_MLFLOW_TRACKING_URI", "https://mlflow.example")
    monkeypatch.setenv("RLSTUDIO_MLFLOW_TRACKING_USERNAME", "studio")
    monkeypatch.setenv("RLSTUDIO_MLFLOW_TRACKING_TOKEN_FILE", str(token))
    em = Emitter(build_sinks(["mlflow"], out_dir=tmp_path / "out", config=_config()))
    em.metrics(3, {"val-core/acc@4": 0.5})
    em.close()
    assert fake.env_at_start == {
        "MLFLOW_TRACKING_TOKEN": "the-token",
        "MLFLOW_TRACKING_USERNAME": "studio",
    }
    names = [c[0] for c in fake.calls]
    assert names == [
        "set_tracking_uri",
        "set_experiment",
        "search_runs",
        "start_run",
        "log_dict",
        "end_run",
    ]
    assert fake.calls[0][1] == "https://mlflow.example" and fake.calls[1][1] == "gsm8k"
    assert fake.calls[2][1]["filter_string"] == "tags.`rlstudio.lineage` = 'rlstudio-4-20261206'"
    assert fake.calls[3][1] == {
        "run_name": "my run",
        "tags": {"rlstudio.lineage": "rlstudio-4-20261206", "rlstudio.tags": "math,v2"},
    }
    assert fake.calls[4][1:] == ("config.json", view)
    assert fake.metrics == [(3, {"val-core/acc_at_4": 0.5})]


def test_mlflow_resume_continues_the_run_of_its_lineage(monkeypatch, tmp_path):
    fake = FakeMlflow(existing=["abc123"])
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _platform_job(monkeypatch, tmp_path, {})
    build_sinks(["mlflow"], out_dir=tmp_path / "out", config=_config())
    assert ("start_run", {"run_id": "abc123"}) in fake.calls
    assert "log_dict" not in [c[0] for c in fake.calls]


def test_a_forks_tracker_run_records_what_it_was_forked_from(monkeypatch, tmp_path):
    wandb, mlflow = FakeWandb(), FakeMlflow()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    _platform_job(monkeypatch, tmp_path, {})
    monkeypatch.setenv("RLSTUDIO_TRACKER_FORK_OF", "rlstudio-2-20261201")
    monkeypatch.setenv("RLSTUDIO_TRACKER_FORK_STEP", "40")
    build_sinks(["wandb", "mlflow"], out_dir=tmp_path / "out", config=_config())
    (init,) = wandb.inits
    assert init["notes"] == "fork of rlstudio-2-20261201 at step 40"
    assert init["id"] == "rlstudio-4-20261206"  # a tracker run of its own, not the parent's
    start = next(c[1] for c in mlflow.calls if c[0] == "start_run")
    assert start["tags"]["rlstudio.fork_of"] == "rlstudio-2-20261201" and start["tags"]["rlstudio.fork_step"] == "40"
    monkeypatch.setenv("RLSTUDIO_TRACKER_FORK_OF", "x'; drop")
    with pytest.raises(RuntimeError, match="RLSTUDIO_TRACKER_FORK_OF"):
        build_sinks(["wandb"], out_dir=tmp_path / "out2", config=_config())


def test_a_run_that_is_no_fork_has_no_fork_note(monkeypatch, tmp_path):
    wandb = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    _platform_job(monkeypatch, tmp_path, {})
    build_sinks(["wandb"], out_dir=tmp_path / "out", config=_config())
    assert "notes" not in wandb.inits[0]


# --- the real packages, where installed (the `trackers` extra; skipped otherwise) ---------------------
def test_real_wandb_offline_gets_the_lineage_id_and_writes_no_netrc(monkeypatch, tmp_path):
    wandb = pytest.importorskip("wandb", reason="wandb is the optional `trackers` extra, not installed here")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "home").mkdir()
    _platform_job(monkeypatch, tmp_path, {"trainer": {"project_name": "gsm8k"}})
    em = Emitter(build_sinks(["wandb"], out_dir=tmp_path / "out", config=_config()))
    em.metrics(1, {"critic/score/mean": 0.25})
    run = em.sinks[1].run
    assert (run.id, run.name, run.project) == ("rlstudio-4-20261206", "my run", "gsm8k")
    assert dict(run.config) == {"trainer": {"project_name": "gsm8k"}} and tuple(run.tags) == (
        "math",
        "v2",
    )
    assert run.settings.base_url == "https://wb.example"
    em.close()
    assert not (tmp_path / "home" / ".netrc").exists(), wandb.__version__
    assert list((tmp_path / "out" / "wandb").glob("offline-run-*-rlstudio-4-20261206"))


def test_real_mlflow_resume_continues_the_run_of_its_lineage(monkeypatch, tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="mlflow is the optional `trackers` extra, not installed here")
    monkeypatch.setenv(
        "MLFLOW_ALLOW_FILE_STORE", "true"
    )  # MLflow 3's local file store, for the test
    _platform_job(monkeypatch, tmp_path, {"trainer": {"project_name": "gsm8k"}})
    uri = f"file://{tmp_path}/mlruns"
    monkeypatch.setenv("RLSTUDIO_MLFLOW_TRACKING_URI", uri)
    for steps in ((1, 2), (3,)):  # the first run, then its resume
        em = Emitter(build_sinks(["mlflow"], out_dir=tmp_path / "out", config=_config()))
        for step in steps:
            em.metrics(step, {"val-core/acc@4": step / 10})
        em.close()
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gsm8k").experiment_id])
    assert (run.info.run_name, run.data.tags["rlstudio.lineage"]) == (
        "my run",
        "rlstudio-4-20261206",
    )
    history = client.get_metric_history(run.info.run_id, "val-core/acc_at_4")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["config.json"]
