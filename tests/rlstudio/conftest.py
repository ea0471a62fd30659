"""Shared fixtures of the web tests: users, a dataset, a model and a run factory (real PostgreSQL); and
`api_client`, a helper the test modules import."""
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.runs.services import run_create

PASSWORD = "pw-for-tests-1"


def api_client(user) -> APIClient:
    """An API client authenticated as `user`."""
    c = APIClient()
    c.force_authenticate(user)
    return c


@pytest.fixture
def make_user(db):
    def make(username: str, *, staff: bool = False):
        return get_user_model().objects.create_user(
            username=username, password=PASSWORD, is_staff=staff, is_superuser=staff
        )

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def bob(make_user):
    return make_user("bob")


@pytest.fixture
def staff(make_user):
    return make_user("root", staff=True)


@pytest.fixture
def make_dataset(db):
    def make(owner, name: str = "gsm8k-train", **fields):
        fields.setdefault("sha256", "ab" * 32)
        return Dataset.objects.create(owner=owner, name=name, file_path=f"/tmp/{name}.jsonl", **fields)

    return make


@pytest.fixture
def make_model(db):
    def make(owner, name: str = "tiny-qwen2", **fields):
        return ModelAsset.objects.create(owner=owner, name=name, path=f"/models/{name}", **fields)

    return make


@pytest.fixture
def make_run(make_dataset, make_model):
    """A queued run made through the service (returns the run; its token is discarded)."""

    def make(owner, name: str = "run-1", *, gpus: int = 0, config=None):
        run, _token = run_create(
            owner=owner,
            name=name,
            dataset=make_dataset(owner, name=f"{name}-data"),
            model=make_model(owner, name=f"{name}-model"),
            config=config or {"trainer": {"total_steps": 10}},
            gpus=gpus,
        )
        return run

    return make


@pytest.fixture
def published(monkeypatch):
    """The tasks that would have been sent to the broker, as (name, *args) (on commit: a test that
    looks runs its request inside django_capture_on_commit_callbacks)."""
    sent = []
    from rlstudio.config import celery
    from rlstudio.runs import dispatch

    def publish(name, *args):
        sent.append((name, *args))

    monkeypatch.setattr(celery, "publish", publish)
    monkeypatch.setattr(dispatch, "publish", publish)  # the runs' and evaluations' submissions
    return sent


@pytest.fixture
def run_with_ckpts(alice, make_run, settings, tmp_path):
    """alice's succeeded run with committed checkpoints at steps 1 and 2 in its folder (under a
    temporary RUNS_DIR), and an uncommitted one (global_step_3.tmp) beside them. Its config is a whole
    one (the default preset's), as a real run's is: an evaluation builds its config from it."""
    from rlstudio.runs import launch
    from rlstudio.runs.models import Run, RunStatus

    settings.RUNS_DIR = str(tmp_path / "runs")
    run = make_run(alice, "alice-run", config=launch.build_config(preset=launch.DEFAULT_PRESET))
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
    run.refresh_from_db()
    for step in (1, 2):
        (tmp_path / "runs" / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    (tmp_path / "runs" / str(run.pk) / "global_step_3.tmp" / "actor").mkdir(parents=True)  # uncommitted
    return run


@pytest.fixture
def lock_elsewhere(db):
    """A context manager factory: `with lock_elsewhere(space, key):` another database session (a worker
    at work) holds that `rlstudio.worklocks` lock; leaving the block closes the session, as a worker
    that dies, which drops the lock with it."""
    from contextlib import contextmanager

    import psycopg2
    from django.db import connection

    @contextmanager
    def hold(space: int, key: int):
        s = connection.settings_dict
        other = psycopg2.connect(host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"],
                                 password=s["PASSWORD"] or None, dbname=s["NAME"])
        try:
            with other.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, key])
                assert cur.fetchone()[0]
            yield
        finally:
            other.close()

    return hold
