"""Fixtures of the runs tests: alice's API client, a ready dataset and model of hers, and the runs'
folder under the test's tmp_path; and `finished`, a helper the test modules import."""
import pytest

from rlstudio.runs.models import Run, RunStatus
from tests.rlstudio.conftest import api_client


def finished(run, status=RunStatus.SUCCEEDED, **fields):
    """`run` ended with `status` at step 2 (and `fields`) in the database; `run`, refreshed from it."""
    Run.objects.filter(pk=run.pk).update(status=status, step=2, **fields)
    run.refresh_from_db()
    return run


@pytest.fixture
def api(alice):
    return api_client(alice)


@pytest.fixture
def ready(alice, make_dataset, make_model):
    return {"dataset": make_dataset(alice, status="ready"), "model": make_model(alice)}


@pytest.fixture
def runs_dir(settings, tmp_path):
    """settings.RUNS_DIR pointed at a folder `runs` under the test's tmp_path; that folder's path."""
    settings.RUNS_DIR = str(tmp_path / "runs")
    return tmp_path / "runs"
