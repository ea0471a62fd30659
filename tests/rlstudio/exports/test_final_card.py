"""A succeeded run's final export (the trainer's `huggingface/`, registered by runs.register_export) gets
its model card too: the transition to succeeded sends exports.final_card once, which writes README.md
from the run (into `lora_adapter/` as well when the run trained LoRA); a run without an export, or one
that did not succeed, gets none."""
import pytest
import yaml

from rlstudio.exports.tasks import final_card
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_transition
from tests.fixtures import families

pytestmark = pytest.mark.django_db
S = RunStatus


@pytest.fixture
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    return settings.RUNS_DIR


def _finish(run, to=S.SUCCEEDED):
    for step in (S.SUBMITTING, S.RUNNING, to):
        run_transition(run=run, to=step)


def test_the_final_export_gets_its_card(alice, make_run, runs_dir, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("rlstudio.config.celery.publish", lambda name, *args: sent.append((name, args)))
    run = make_run(alice, "finished")
    Run.objects.filter(pk=run.pk).update(step=40, config={"actor_rollout_ref": {"model": {"path": "/srv/m"}}})
    folder = runs_dir / str(run.pk)
    families.build("qwen2.5", folder / "huggingface")
    (folder / "lora_adapter").mkdir()
    (folder / "lora_adapter" / "adapter_config.json").write_text("{}")
    with django_capture_on_commit_callbacks(execute=True):
        _finish(run)
    assert sent.count(("exports.final_card", (run.pk,))) == 1  # once: only the move to succeeded
    assert final_card(run.pk) is True
    for sub in ("huggingface", "lora_adapter"):
        card = (folder / sub / "README.md").read_text()
        header = yaml.safe_load(card.split("---\n")[1])
        assert header["base_model"] == run.model.name and "lora" in header["tags"]
        assert "policy at step 40" in card and "/srv" not in card


def test_no_card_without_an_export_or_a_success(alice, make_run, runs_dir):
    plain = make_run(alice, "plain")
    _finish(plain)
    assert final_card(plain.pk) is False
    failed = make_run(alice, "failed")
    families.build("qwen2.5", runs_dir / str(failed.pk) / "huggingface")
    _finish(failed, S.FAILED)
    assert final_card(failed.pk) is False
    assert not (runs_dir / str(failed.pk) / "huggingface" / "README.md").exists()
