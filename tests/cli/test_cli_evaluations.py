"""`rlstudio evaluations list / start / show` against the real server (tests/cli/conftest.py): the
body `start` sends is the API's (an evaluation made with those checkpoints, k and sampling), a refused
field is named, `show` prints the figures per column as the API returns them (and the prompts matrix
with --prompts, filtered by --change), and another user's run is a 404 (exit 2). Nothing is evaluated:
the evaluation's submission goes to the recorded broker (conftest's _no_broker)."""
from __future__ import annotations

import json

import pytest

from rlstudio.catalog.models import Dataset
from rlstudio.evaluations import services
from rlstudio.evaluations.models import Evaluation, EvaluationStatus


@pytest.fixture
def data(finished_run):
    return Dataset.objects.get(pk=finished_run.dataset_id)  # alice's, ready


def _cell(mean, passed):
    return {"n": 4, "correct": 1, "mean_at_k": mean, "pass_at_k": passed, "maj_at_k": 0.0, "sample": "x"}


@pytest.fixture
def done(finished_run, data, alice):
    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.125, "pass_at_k": 0.25, "maj_at_k": 0.0,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0},
               {"key": "2", "step": 2, "base": False, "mean_at_k": 0.625, "pass_at_k": 0.875, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.5, "samples_per_s": 3.2}]
    prompts = [{"index": 0, "prompt": "1+1?", "ground_truth": "2",
                "cells": {"base": _cell(0.0, 0.0), "2": _cell(1.0, 1.0)}},
               {"index": 1, "prompt": "2+2?\x1b[31m", "ground_truth": "4",
                "cells": {"base": _cell(0.5, 1.0), "2": _cell(0.25, 0.5)}}]
    return Evaluation.objects.create(run=finished_run, owner=alice, dataset=data, checkpoints=[2], include_base=True,
                                     k=4, max_prompts=2, sampling=services.DEFAULT_SAMPLING,
                                     status=EvaluationStatus.SUCCEEDED,
                                     results={"checkpoints": figures, "prompts": prompts})


def test_start_sends_the_apis_body_and_a_refused_field_is_named(as_alice, finished_run, data, _no_broker):
    run = finished_run.pk
    bad = as_alice("evaluations", "start", run, "--steps", "7", "--dataset", data.pk, "--k", 4)
    assert bad.code == 2 and bad.out == "" and bad.err.startswith("error: checkpoints: "), bad
    assert "no checkpoint at step 7" in bad.err
    bad_k = as_alice("evaluations", "start", run, "--steps", "1", "--dataset", data.pk, "--k", 0)
    assert bad_k.code == 2 and bad_k.err.startswith("error: k: "), bad_k
    bad_sampling = as_alice("evaluations", "start", run, "--steps", "1", "--dataset", data.pk, "--k", 2,
                            "--temperature", 9)
    assert bad_sampling.code == 2 and bad_sampling.err.startswith("error: sampling.temperature: "), bad_sampling
    assert not Evaluation.objects.exists()

    r = as_alice("evaluations", "start", run, "--steps", "2,1", "--include-base", "--dataset", data.pk, "--k", 4,
                 "--max-prompts", 8, "--temperature", 0.7, "--seed", 3)
    assert r.code == 0, r
    ev = Evaluation.objects.get()
    assert r.out.startswith(f"evaluation {ev.pk} of run {run} (base,1,2, k=4): "), r.out
    assert ev.checkpoints == [1, 2] and ev.include_base and ev.k == 4 and ev.max_prompts == 8 and ev.gpus == 0
    assert ev.sampling == {**services.DEFAULT_SAMPLING, "temperature": 0.7, "seed": 3}

    listed = as_alice("evaluations", "list", run)
    assert listed.code == 0, listed
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "COLUMNS", "K", "PROMPTS", "GPUS", "DATASET", "REWARD", "OWNER",
                                "CREATED"]
    assert lines[1].split()[:7] == [str(ev.pk), ev.status, "base,1,2", "4", "8", "0", str(data.pk)]
    assert [e["id"] for e in json.loads(as_alice("evaluations", "list", run, "--json").out)] == [ev.pk]


def test_show_prints_the_figures_per_column_and_the_matrix(as_alice, finished_run, done):
    r = as_alice("evaluations", "show", finished_run.pk, done.pk)
    assert r.code == 0, r
    lines = r.out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("COLUMN"))
    assert lines[header].split() == ["COLUMN", "STEP", "MEAN@K", "PASS@K", "MAJ@K", "SAMPLES", "SECONDS", "SAMPLES/S"]
    assert [ln.split() for ln in lines[header + 1:header + 3]] == [["base", "0", "0.125", "0.25", "0", "8", "2", "4"],
                                                                  ["2", "2", "0.625", "0.875", "0.5", "8", "2.5", "3.2"]]
    assert "MEAN@K base" not in r.out  # the matrix only with --prompts

    matrix = as_alice("evaluations", "show", finished_run.pk, done.pk, "--prompts")
    lines = matrix.out.splitlines()
    top = next(i for i, ln in enumerate(lines) if ln.startswith("POS"))
    assert lines[top].split() == ["POS", "CHANGE", "PROMPT", "MEAN@K", "base", "MEAN@K", "2"]
    assert [ln.split() for ln in lines[top + 1:]] == [["0", "better", "1+1?", "0", "1"],
                                                      ["1", "worse", "2+2?", "0.5", "0.25"]]
    assert "\x1b" not in matrix.out  # the prompt's escape sequence is not printed
    worse = as_alice("evaluations", "show", finished_run.pk, done.pk, "--prompts", "--change", "worse")
    assert [ln.split()[:2] for ln in worse.out.splitlines()[-1:]] == [["1", "worse"]]
    assert "1+1?" not in worse.out

    body = json.loads(as_alice("evaluations", "show", finished_run.pk, done.pk, "--json").out)
    assert body["figures"][1]["pass_at_k"] == 0.875 and len(body["prompts"]) == 2


def test_another_users_run_and_evaluation_are_not_found(as_alice, bob, make_run, finished_run, done, data, server,
                                                        token_of, cli):
    theirs, _ = make_run(bob, "bobs")
    for argv in (("evaluations", "list", theirs.pk), ("evaluations", "show", theirs.pk, done.pk),
                 ("evaluations", "start", theirs.pk, "--steps", "1", "--dataset", data.pk, "--k", 2)):
        r = as_alice(*argv)
        assert r.code == 2 and r.out == "" and r.err.startswith("error: Not found. ("), (argv, r)
        assert f" /api/v1/runs/{theirs.pk}/" in r.err, (argv, r)
    as_bob = cli("--url", server, "--token", token_of(bob), "evaluations", "show", finished_run.pk, done.pk)
    assert as_bob.code == 2, as_bob
    assert as_bob.err.strip() == f"error: Not found. (GET /api/v1/runs/{finished_run.pk}/evaluations/{done.pk}/)"
    assert Evaluation.objects.count() == 1
