"""`rlstudio runs show` (the last step's headline metrics by default, every one with --all-metrics),
`runs launch --config-id` without --dataset or --model (a saved config holds neither: the refusal
says so), and `runs delete` of several runs (POST /api/v1/runs/bulk-delete/: all or none), against
the real server (tests/cli/conftest.py)."""
from __future__ import annotations

import io
import json

from rlstudio.runs.models import Run, RunConfig, RunStatus
from rlstudio_cli.output import fmt_number

from .conftest import T0

# The last step's metrics as verl reports them: headline names, held-out ones and many others.
LAST = {"critic/score/mean": 0.75, "response_length/mean": 41.5, "actor/pg_loss": -0.25, "actor/kl_loss": 0.002,
        "actor/entropy": 0.5, "perf/throughput": 1234.5, "timing_s/step": 2.5, "val-core/arith/reward/mean@1": 0.875,
        "actor/ppo_kl": 0.001, "actor/pg_clipfrac": 0.01, "perf/mfu/actor": 0.3, "timing_s/gen": 1.25,
        "critic/advantages/mean": 0.0, "response_length/max": 64, "perf/max_memory_allocated_gb": 1.5}
HEADLINE = ["critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy",
            "perf/throughput", "timing_s/step", "val-core/arith/reward/mean@1"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _metric_lines(out: str) -> list[list[str]]:
    lines = out.splitlines()
    top = next(i for i, ln in enumerate(lines) if ln.startswith("latest metrics"))
    return [ln.split() for ln in lines[top + 1:]]


def test_show_prints_the_headline_metrics_and_all_metrics_prints_every_one(as_alice, alice, make_run, report):
    run, token = make_run(alice, "metrics")
    report(run, token, [{"seq": 1, "type": "metrics", "time": T0, "data": {"step": 1, "metrics": {"actor/lr": 1.0}}},
                        {"seq": 2, "type": "metrics", "time": T0 + 1, "data": {"step": 2, "metrics": LAST}}])
    shown = as_alice("runs", "show", run.pk)
    assert shown.code == 0, shown
    assert f"latest metrics ({len(HEADLINE)} of {len(LAST)}; --all-metrics for every one):" in shown.out
    assert _metric_lines(shown.out) == [[n, fmt_number(LAST[n])] for n in HEADLINE]  # verl's order, reward first
    assert "actor/ppo_kl" not in shown.out and "perf/mfu/actor" not in shown.out

    every = as_alice("runs", "show", run.pk, "--all-metrics")
    assert every.code == 0 and "latest metrics:" in every.out, every
    assert [row[0] for row in _metric_lines(every.out)] == sorted(LAST)
    assert json.loads(as_alice("runs", "show", run.pk, "--json").out)["latest_metrics"] == LAST


def test_show_of_a_step_without_verl_names_prints_its_first_metrics(as_alice, alice, make_run, report):
    run, token = make_run(alice, "custom")
    metrics = {f"mine/m{i:02d}": i for i in range(20)}
    report(run, token, [{"seq": 1, "type": "metrics", "time": T0, "data": {"step": 1, "metrics": metrics}}])
    shown = as_alice("runs", "show", run.pk)
    assert "latest metrics (12 of 20; --all-metrics for every one):" in shown.out, shown
    assert [row[0] for row in _metric_lines(shown.out)] == sorted(metrics)[:12]


def test_launch_from_a_saved_config_needs_the_dataset_and_model_named(as_alice, alice, make_assets):
    dataset, model = make_assets(alice)
    saved = RunConfig.objects.create(owner=alice, name="n3", config={"actor_rollout_ref": {"rollout": {"n": 3}}})
    no_dataset = as_alice("runs", "launch", "--name", "x", "--config-id", saved.pk, "--model", model.pk)
    assert no_dataset.code == 2 and no_dataset.out == "", no_dataset
    assert no_dataset.err.startswith("error: --dataset: a run needs a dataset: give --dataset ID"), no_dataset
    assert "a saved config, --config-id, holds the trainer's settings only, not its dataset or model" in no_dataset.err
    no_model = as_alice("runs", "launch", "--name", "x", "--config-id", saved.pk, "--dataset", dataset.pk)
    assert no_model.code == 2 and no_model.err.startswith("error: --model: a run needs a model: give --model ID")
    bare = as_alice("runs", "launch", "--name", "x", "--model", model.pk)  # no saved config: no word of one
    assert bare.code == 2 and bare.err.strip() == ("error: --dataset: a run needs a dataset: give --dataset ID "
                                                   "(`rlstudio datasets list`)"), bare
    assert not Run.objects.exists()

    ok = as_alice("runs", "launch", "--name", "x", "--config-id", saved.pk, "--dataset", dataset.pk,
                  "--model", model.pk, "--json")
    assert ok.code == 0, ok
    run = Run.objects.get(pk=json.loads(ok.out)["id"])
    assert run.dataset == dataset and run.model == model and run.config["actor_rollout_ref"]["rollout"]["n"] == 3


def test_delete_several_runs_is_all_or_none(as_alice, alice, bob, make_run, monkeypatch):
    runs = [make_run(alice, f"old-{i}")[0] for i in range(3)]
    Run.objects.filter(pk__in=[r.pk for r in runs[:2]]).update(status=RunStatus.STOPPED)
    ids = [r.pk for r in runs]
    live = as_alice("runs", "delete", *ids, "--yes")  # the third is queued: the API's 409, none deleted
    assert live.code == 2 and live.out == "", live
    assert live.err.startswith("error: ids: 1 of the 3 runs cannot be deleted, so none was"), live
    assert f"run {runs[2].pk}" in live.err and Run.objects.count() == 3

    theirs, _ = make_run(bob, "bobs")
    Run.objects.filter(pk=theirs.pk).update(status=RunStatus.STOPPED)
    Run.objects.filter(pk=runs[2].pk).update(status=RunStatus.FAILED)
    not_mine = as_alice("runs", "delete", *ids, theirs.pk, "-y")
    assert not_mine.code == 2 and f"run {theirs.pk}: " in not_mine.err, not_mine
    assert Run.objects.count() == 4

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal: refused, never read
    refused = as_alice("runs", "delete", *ids)
    assert refused.code == 2 and refused.err.startswith("error: --yes: deleting runs cannot be undone"), refused
    monkeypatch.setattr("sys.stdin", _Terminal("no\n"))
    declined = as_alice("runs", "delete", *ids)
    assert declined.code == 1 and declined.err.startswith(f"delete 3 runs, run {ids[0]} old-0 (stopped), "), declined
    assert f"runs {', '.join(map(str, ids))} not deleted" in declined.err and Run.objects.count() == 4

    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    done = as_alice("runs", "delete", *ids, ids[0])  # a repeated id is that run once
    assert done.code == 0 and done.out.strip() == f"runs {', '.join(map(str, ids))} deleted", done
    assert list(Run.objects.values_list("pk", flat=True)) == [theirs.pk]
