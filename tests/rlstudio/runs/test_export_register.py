"""A run that succeeds gets its exported policy registered in the catalog for its owner (source
run_export, linked to the run), checked like any model but inside the run's own folder; a run without
an export, or one that did not succeed, registers nothing."""
import pytest

from rlstudio.catalog.models import ModelAsset
from rlstudio.runs.models import RunStatus
from rlstudio.runs.services import run_register_export, run_transition
from tests.fixtures import families

pytestmark = pytest.mark.django_db
S = RunStatus


@pytest.fixture
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.RLSTUDIO_MODEL_ROOTS = [str(tmp_path / "models")]  # the run's folder is not under them
    return settings.RUNS_DIR


def _finish(run, to=S.SUCCEEDED):
    for step in (S.SUBMITTING, S.RUNNING, to):
        run_transition(run=run, to=step)


def test_a_succeeded_runs_export_is_registered_for_its_owner(alice, make_run, runs_dir):
    run = make_run(alice, "exported")
    families.build("qwen2.5", runs_dir / str(run.pk) / "huggingface")
    _finish(run)
    model = run_register_export(run_id=run.pk)
    assert model is not None and model.owner == alice and model.source == ModelAsset.Source.RUN_EXPORT
    assert model.source_run_id == run.pk and model.chat_family == "qwen2.5" and model.num_parameters > 0
    assert model.name == f"exported (run {run.pk})"
    assert run_register_export(run_id=run.pk).pk == model.pk  # again: the same model, updated


def test_nothing_is_registered_without_an_export_or_a_success(alice, make_run, runs_dir):
    no_export = make_run(alice, "plain")
    _finish(no_export)
    assert run_register_export(run_id=no_export.pk) is None
    failed = make_run(alice, "failed")
    families.build("qwen2.5", runs_dir / str(failed.pk) / "huggingface")
    _finish(failed, S.FAILED)
    assert run_register_export(run_id=failed.pk) is None
    assert not ModelAsset.objects.filter(source=ModelAsset.Source.RUN_EXPORT).exists()


def test_the_transition_to_succeeded_sends_the_registration(alice, make_run, runs_dir, monkeypatch,
                                                            django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("rlstudio.config.celery.publish", lambda name, *args: sent.append((name, args)))
    run = make_run(alice, "hooked")
    with django_capture_on_commit_callbacks(execute=True):
        _finish(run)
    assert sent.count(("runs.register_export", (run.pk,))) == 1  # once: only the move to succeeded
