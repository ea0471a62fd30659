"""Fixtures of the command-line client's tests: the real client (`rlstudio_cli.main.main`, in this
process) against Django's real server (pytest-django's `live_server`, a thread of this process serving
the test database, committed: `transactional_db`), with real personal API tokens."""
from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from rlstudio.accounts.services import api_token_create
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.runs.services import run_create
from rlstudio_cli.main import main

T0 = 1_764_440_000.0


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path, monkeypatch):
    """The client's config file under this test's tmp_path; no URL or token from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RLSTUDIO_URL", raising=False)
    monkeypatch.delenv("RLSTUDIO_TOKEN", raising=False)
    return tmp_path / "xdg" / "rlstudio" / "config.json"


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    """Tasks a request would send to Celery (a dataset's validation, a run's submission) are recorded,
    not sent: no worker runs here and nothing trains."""
    from rlstudio.config import celery
    from rlstudio.runs import dispatch

    sent = []
    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append((name, *args)))
    monkeypatch.setattr(dispatch, "publish", lambda name, *args: sent.append((name, *args)))
    return sent


@pytest.fixture
def server(live_server, transactional_db, settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"
    settings.RUNS_DIR = str(tmp_path / "runs")
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")
    return live_server.url


@pytest.fixture
def cli(capsys):
    """cli(*argv) -> Result(code, out, err): the client's main() as the `rlstudio` script runs it."""

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def make_user(transactional_db):
    def make(username: str):
        return get_user_model().objects.create_user(username=username, password="pw-for-tests-1")

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def bob(make_user):
    return make_user("bob")


@pytest.fixture
def token_of():
    """token_of(user) -> a new personal API token's key (as the profile page makes it)."""
    return lambda user: api_token_create(user=user, name="cli").key


@pytest.fixture
def as_alice(server, alice, token_of, cli):
    """cli as alice: her URL and token passed as flags."""
    key = token_of(alice)
    return lambda *argv: cli("--url", server, "--token", key, *argv)


@pytest.fixture
def make_assets(transactional_db):
    def make(owner, name: str = "cli"):
        dataset = Dataset.objects.create(owner=owner, name=f"{name}-data", file_path=f"/tmp/{name}.jsonl",
                                         sha256="ab" * 32, status="ready")
        model = ModelAsset.objects.create(owner=owner, name=f"{name}-model", path=f"/models/{name}")
        return dataset, model

    return make


@pytest.fixture
def make_run(make_assets):
    """make_run(owner, name) -> (run, ingest token): a queued run made through the runs' service."""

    def make(owner, name: str = "run-1"):
        dataset, model = make_assets(owner, name)
        return run_create(owner=owner, name=name, dataset=dataset, model=model,
                          config={"trainer": {"total_steps": 10}}, gpus=0)

    return make


@pytest.fixture
def finished_run(alice, make_assets, server, settings):
    """alice's succeeded run with a whole config (the default preset's, as a real run's is) and kept
    checkpoints at steps 1 and 2 in its folder."""
    from pathlib import Path

    from rlstudio.runs import launch
    from rlstudio.runs.models import Run, RunStatus

    dataset, model = make_assets(alice, "done")
    run, _ = run_create(owner=alice, name="done", dataset=dataset, model=model,
                        config=launch.build_config(preset=launch.DEFAULT_PRESET), gpus=0)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
    for step in (1, 2):
        (Path(settings.RUNS_DIR) / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    run.refresh_from_db()
    return run


@pytest.fixture
def report(server):
    """report(run, token, events): the trainer's ingest over HTTP (POST /api/v1/runs/{id}/events/ with
    the run's ingest token), as the trainer's HTTP sink sends them; the answer's body."""

    def send(run, token: str, events: list[dict]) -> dict:
        req = urllib.request.Request(f"{server}/api/v1/runs/{run.pk}/events/",
                                     data=json.dumps({"events": events}).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    return send


def metric_events(steps, *, first_seq: int = 1) -> list[dict]:
    return [{"seq": first_seq + i, "type": "metrics", "time": T0 + i,
             "data": {"step": s, "metrics": {"critic/score/mean": s / 10, "actor/entropy": 1.0 + s}}}
            for i, s in enumerate(steps)]
