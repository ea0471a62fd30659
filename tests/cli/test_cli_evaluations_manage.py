"""`rlstudio evaluations stop / delete` of a run's evaluation, and a catalog model's own evaluations
(`--model MODEL_ID` in place of RUN_ID: list, start, show, stop, delete) against the real server
(tests/cli/conftest.py): each is the API's request (the evaluation's state changed, or gone, in the
database), a finished evaluation cannot be stopped nor a live one deleted (the API's 409, exit 2),
a deletion needs --yes (or a `y` on a terminal), and another user's evaluation of a model is a 404.
Nothing is evaluated: a submission goes to the recorded broker (conftest's _no_broker)."""
from __future__ import annotations

import io
import json

import pytest

from rlstudio.catalog.models import Dataset
from rlstudio.evaluations import services
from rlstudio.evaluations.models import Evaluation, EvaluationStatus


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def data(finished_run):
    return Dataset.objects.get(pk=finished_run.dataset_id)  # alice's, ready


def _evaluation(owner, data, *, run=None, model=None, status=EvaluationStatus.SUCCEEDED) -> Evaluation:
    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.5, "pass_at_k": 0.75, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0}]
    return Evaluation.objects.create(run=run, model=model, owner=owner, dataset=data, checkpoints=[] if model else [2],
                                     include_base=model is not None, k=4, max_prompts=2,
                                     sampling=services.DEFAULT_SAMPLING, status=status,
                                     reward="default" if model else "", results={"checkpoints": figures,
                                                                                 "prompts": []})


def test_stop_and_delete_a_runs_evaluation(as_alice, alice, finished_run, data, monkeypatch):
    run = finished_run.pk
    queued = _evaluation(alice, data, run=finished_run, status=EvaluationStatus.QUEUED)
    live = as_alice("evaluations", "delete", run, queued.pk, "--yes")  # queued: the API's 409
    assert live.code == 2 and live.err.startswith("error: ") and f"evaluation {queued.pk} is queued: stop it before deleting it" in live.err, live
    stopped = as_alice("evaluations", "stop", run, queued.pk)
    assert stopped.code == 0 and stopped.out.strip() == f"evaluation {queued.pk} of run {run}: stopped", stopped
    queued.refresh_from_db()
    assert queued.status == EvaluationStatus.STOPPED
    again = as_alice("evaluations", "stop", run, queued.pk, "--json")  # it has ended: the API's 409
    assert again.code == 2 and again.out == "" and again.err.startswith("error: "), again

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    refused = as_alice("evaluations", "delete", run, queued.pk)
    assert refused.code == 2 and refused.err.startswith("error: --yes: deleting an evaluation cannot be undone")
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    declined = as_alice("evaluations", "delete", run, queued.pk)
    assert declined.code == 1 and f"delete evaluation {queued.pk} of run {run} (stopped, 2)" in declined.err
    assert Evaluation.objects.filter(pk=queued.pk).exists()
    monkeypatch.setattr("sys.stdin", _Terminal("yes\n"))
    done = as_alice("evaluations", "delete", run, queued.pk)
    assert done.code == 0 and done.out.strip() == f"evaluation {queued.pk} of run {run} deleted", done
    assert not Evaluation.objects.exists()

    wrong = as_alice("evaluations", "stop", run)  # one id where two are needed
    assert wrong.code == 2 and wrong.err.strip() == "error: EVAL_ID: expected RUN_ID EVAL_ID, got 1 id", wrong


def test_a_models_evaluations_list_show_stop_and_delete(as_alice, alice, finished_run, data, _no_broker):
    model = finished_run.model
    done = _evaluation(alice, data, model=model)
    listed = as_alice("evaluations", "list", "--model", model.pk)
    assert listed.code == 0, listed
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "COLUMNS", "K", "PROMPTS", "GPUS", "DATASET", "REWARD", "OWNER",
                                "CREATED"]
    assert [ln.split()[:9] for ln in lines[1:]] == [[str(done.pk), "succeeded", "base", "4", "2", "0", str(data.pk),
                                                     "default", "alice"]]
    assert [e["model"] for e in json.loads(as_alice("evaluations", "list", "--model", model.pk, "--json").out)] == [
        model.pk]
    assert as_alice("evaluations", "list", finished_run.pk).out.splitlines()[1:] == []  # the run has none

    shown = as_alice("evaluations", "show", "--model", model.pk, done.pk)
    assert shown.code == 0 and f"\nmodel:       {model.pk}\n" in shown.out and "\nreward:      default\n" in shown.out
    assert [ln.split() for ln in shown.out.splitlines() if ln.startswith("base")] == [
        ["base", "0", "0.5", "0.75", "0.5", "8", "2", "4"]]

    bad = as_alice("evaluations", "start", "--model", model.pk, "--dataset", data.pk, "--k", 2, "--reward", "nope!")
    assert bad.code == 2 and bad.err.startswith("error: reward: "), bad
    both = as_alice("evaluations", "start", finished_run.pk, "--model", model.pk, "--dataset", data.pk, "--k", 2)
    assert both.code == 2 and both.err.startswith("error: --model: give a RUN_ID or --model, not both"), both
    neither = as_alice("evaluations", "list")
    assert neither.code == 2 and neither.err.startswith("error: RUN_ID: give the RUN_ID"), neither
    assert Evaluation.objects.count() == 1

    started = as_alice("evaluations", "start", "--model", model.pk, "--dataset", data.pk, "--k", 2, "--max-prompts", 4)
    assert started.code == 0, started
    new = Evaluation.objects.exclude(pk=done.pk).get()
    assert started.out.startswith(f"evaluation {new.pk} of model {model.pk} (base, k=2): "), started
    assert new.model_id == model.pk and new.run_id is None and new.k == 2 and new.max_prompts == 4

    Evaluation.objects.filter(pk=new.pk).update(status=EvaluationStatus.QUEUED)
    stopped = as_alice("evaluations", "stop", "--model", model.pk, new.pk)
    assert stopped.code == 0 and stopped.out.strip() == f"evaluation {new.pk} of model {model.pk}: stopped", stopped
    for ev in (new, done):
        gone = as_alice("evaluations", "delete", "--model", model.pk, ev.pk, "--yes")
        assert gone.code == 0 and gone.out.strip() == f"evaluation {ev.pk} of model {model.pk} deleted", gone
    assert not Evaluation.objects.exists()


def test_another_users_evaluation_of_a_model_is_not_found(as_alice, bob, finished_run, data, server, token_of, cli):
    model = finished_run.model  # alice's, private
    mine = _evaluation(finished_run.owner, data, model=model)
    as_bob = lambda *argv: cli("--url", server, "--token", token_of(bob), *argv)  # noqa: E731
    for argv, where in ((("evaluations", "list", "--model", model.pk), f"GET /api/v1/models/{model.pk}/evaluations/"),
                        (("evaluations", "stop", "--model", model.pk, mine.pk),
                         f"POST /api/v1/models/{model.pk}/evaluations/{mine.pk}/stop/"),
                        (("evaluations", "delete", "--model", model.pk, mine.pk, "--yes"),
                         f"DELETE /api/v1/models/{model.pk}/evaluations/{mine.pk}/")):
        r = as_bob(*argv)
        assert r.code == 2 and r.out == "" and r.err.strip() == f"error: Not found. ({where})", (argv, r)
    assert Evaluation.objects.filter(pk=mine.pk, status=EvaluationStatus.SUCCEEDED).exists()
