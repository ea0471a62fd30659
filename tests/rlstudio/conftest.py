"""Shared fixtures of the web tests: users, a dataset, a model and a run factory (real PostgreSQL)."""
import pytest
from django.contrib.auth import get_user_model

from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.runs.services import run_create

PASSWORD = "pw-for-tests-1"


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
