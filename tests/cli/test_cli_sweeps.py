"""`rlstudio sweeps list | show | launch | stop` against the real server (tests/cli/conftest.py): a grid
and a random search launched from `--axis` flags and checked in the database (a random sweep's runs
lie in their ranges, the same seed draws the same runs), a bad axis refused naming its field, the
best run marked, a stop that needs --yes, and another user's sweep a 404."""
from __future__ import annotations

import io
import json
import re

import pytest

from django.utils import timezone

from rlstudio.runs.models import Run, RunStatus
from rlstudio.sweeps.models import Sweep
from rlstudio.telemetry.models import MetricRow
from rlstudio_cli.client import ClientError
from rlstudio_cli.sweeps import parse_axis

LR = "actor_rollout_ref.actor.optim.lr"
N = "actor_rollout_ref.rollout.n"


def _launch(as_alice, dataset, model, *argv):
    return as_alice("sweeps", "launch", "--dataset", dataset.pk, "--model", model.pk, "--preset", "cpu_smoke",
                    *argv)


def _lr(run: Run) -> float:
    return run.config["actor_rollout_ref"]["actor"]["optim"]["lr"]


def test_axis_flags_read_values_as_the_web_form_and_ranges_with_their_words():
    assert parse_axis(f"{LR}=1e-6, 3e-6") == {"key": LR, "values": [1e-6, 3e-6]}
    assert parse_axis('k=2,cpu_smoke,"a,b",true,null') == {"key": "k", "values": [2, "cpu_smoke", "a,b", True, None]}
    assert parse_axis(f"{LR}=1e-7..1e-5:log") == {"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log",
                                                   "type": "float"}
    assert parse_axis(f"{N}=1..64 log int") == {"key": N, "min": 1, "max": 64, "scale": "log", "type": "int"}
    # One text value with ".." in it: quoted it is a value; bare it is a range whose error says how to quote it.
    assert parse_axis('k="a..b"') == {"key": "k", "values": ["a..b"]}
    with pytest.raises(ClientError) as refused:
        parse_axis("k=a..b")
    assert "'a' is not a number" in str(refused.value) and "KEY='\"a..b\"'" in str(refused.value)


def test_random_search_draws_n_runs_in_the_ranges_and_the_seed_repeats_them(as_alice, alice, make_assets):
    dataset, model = make_assets(alice, "rs")
    r = _launch(as_alice, dataset, model, "--name", "lr-search", "--random", "--runs", 4, "--seed", 7,
                "--axis", f"{LR}=1e-7..1e-5:log", "--axis", f"{N}=2..8:int")
    assert r.code == 0, r
    sweep = Sweep.objects.get()
    assert sweep.mode == "random" and sweep.seed == 7 and sweep.owner == alice
    assert sweep.axes[0] == {"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"}
    links = list(sweep.sweep_runs.select_related("run").order_by("index"))
    assert len(links) == 4 and Run.objects.count() == 4
    assert r.out.startswith(f"sweep {sweep.pk} lr-search: random, 4 runs, seed 7\n"), r.out
    points = []
    for link in links:
        lr, n = link.params[LR], link.params[N]
        assert 1e-7 <= lr <= 1e-5 and isinstance(n, int) and 2 <= n <= 8, link.params
        assert _lr(link.run) == lr and link.run.config["actor_rollout_ref"]["rollout"]["n"] == n
        row = next(line for line in r.out.splitlines() if line.startswith(f"{link.run.pk} "))
        assert row.split()[1:] == [f"{lr:.4g}", str(n), link.run.status, link.run.name], r.out
        points.append((lr, n))
    assert len(set(points)) == 4  # distinct

    Run.objects.update(status=RunStatus.STOPPED)  # room under the queued-runs cap (5) for 4 more

    again = _launch(as_alice, dataset, model, "--name", "again", "--random", "--runs", 4, "--seed", 7,
                    "--axis", f"{LR}=1e-7..1e-5:log", "--axis", f"{N}=2..8:int", "--json")
    assert again.code == 0, again
    body = json.loads(again.out)
    assert body["seed"] == 7 and [(row["params"][LR], row["params"][N]) for row in body["runs"]] == points


def test_a_grid_launches_every_combination_and_show_marks_the_best(as_alice, alice, make_assets):
    dataset, model = make_assets(alice, "grid")
    r = _launch(as_alice, dataset, model, "--name", "lr-by-n", "--axis", f"{LR}=1e-6,3e-6", "--axis", f"{N}=2,4",
                "--set", "trainer.total_epochs=1")
    assert r.code == 0, r
    sweep = Sweep.objects.get()
    assert sweep.mode == "grid" and sweep.seed is None
    assert sweep.axes == [{"key": LR, "values": [1e-6, 3e-6]}, {"key": N, "values": [2, 4]}]
    runs = [link.run for link in sweep.sweep_runs.select_related("run").order_by("index")]
    assert [(_lr(x), x.config["actor_rollout_ref"]["rollout"]["n"]) for x in runs] == \
        [(1e-6, 2), (1e-6, 4), (3e-6, 2), (3e-6, 4)]
    assert r.out.splitlines()[0] == f"sweep {sweep.pk} lr-by-n: grid, 4 runs"

    MetricRow.objects.create(run=runs[2], step=3, time=timezone.now(), metrics={"critic/score/mean": 0.75})
    MetricRow.objects.create(run=runs[0], step=3, time=timezone.now(), metrics={"critic/score/mean": 0.25})
    Run.objects.filter(pk__in=[runs[0].pk, runs[2].pk]).update(step=3)
    show = as_alice("sweeps", "show", sweep.pk)
    assert show.code == 0, show
    assert "mode:" in show.out and "grid" in show.out and f"{LR}  1e-06, 3e-06" in show.out, show.out
    lines = show.out.splitlines()
    header = next(line for line in lines if line.startswith("RUN"))
    assert header.split() == ["RUN", "lr", "n", "STATUS", "STEP", "REWARD", "BEST", "NAME"]
    best = [line for line in lines if "  *  " in line]
    assert len(best) == 1 and best[0].startswith(f"{runs[2].pk} ") and "0.75" in best[0], show.out
    assert "3e-06" in best[0] and re.search(r"^best by: +reward$", show.out, re.M), show.out

    listed = as_alice("sweeps", "list")
    assert listed.code == 0 and re.search(rf"^{sweep.pk} +lr-by-n +grid +4 ", listed.out, re.M), listed
    assert LR in listed.out, listed
    as_json = json.loads(as_alice("sweeps", "show", sweep.pk, "--json").out)
    assert [row["best"] for row in as_json["runs"]] == [False, False, True, False]


def test_a_bad_axis_is_refused_naming_its_field_and_nothing_is_made(as_alice, alice, make_assets):
    dataset, model = make_assets(alice, "bad")
    r = _launch(as_alice, dataset, model, "--name", "x", "--random", "--runs", 3, "--axis", f"{LR}=1e-5..1e-7:log")
    assert r.code == 2 and r.out == "" and r.err.startswith("error: axes[0].min: "), r
    r = _launch(as_alice, dataset, model, "--name", "x", "--random", "--runs", 3, "--axis", f"{LR}=1e-6,2e-6",
                "--axis", "trainer.nnodes=1,2")
    assert r.code == 2 and r.err.startswith("error: axes[1].key: "), r
    r = _launch(as_alice, dataset, model, "--name", "x", "--axis", f"{LR}=1e-7..1e-5:log")  # a range in a grid
    assert r.code == 2 and r.err.startswith("error: axes[0]"), r
    r = _launch(as_alice, dataset, model, "--name", "x", "--random", "--runs", 0, "--axis", f"{LR}=1e-6,2e-6")
    assert r.code == 2 and r.err.startswith("error: runs: "), r
    r = _launch(as_alice, dataset, model, "--name", "x", "--axis", f"{LR}=1e-7..1e-5:lg")  # read here
    assert r.code == 2 and r.err.startswith("error: --axis: ") and "'lg'" in r.err, r
    r = _launch(as_alice, dataset, model, "--name", "x")
    assert r.code == 2 and r.err.startswith("error: --axis: "), r
    assert Sweep.objects.count() == 0 and Run.objects.count() == 0


class _Terminal(io.StringIO):
    """stdin as a terminal where the user types `text`."""

    def isatty(self) -> bool:
        return True


def test_stop_needs_yes_and_stops_every_run(as_alice, alice, make_assets, monkeypatch):
    dataset, model = make_assets(alice, "stop")
    assert _launch(as_alice, dataset, model, "--name", "s", "--axis", f"{N}=2,4").code == 0
    sweep = Sweep.objects.get()
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal: never asked
    refused = as_alice("sweeps", "stop", sweep.pk)
    assert refused.code == 2 and refused.err.startswith("error: --yes: "), refused
    assert not Run.objects.filter(status=RunStatus.STOPPED).exists()
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    declined = as_alice("sweeps", "stop", sweep.pk)
    assert declined.code == 1 and f"stop sweep {sweep.pk} s: its 2 runs that have not ended (" in declined.err
    assert f"sweep {sweep.pk} not stopped" in declined.err and "cannot be undone" not in declined.err, declined
    assert not Run.objects.filter(status=RunStatus.STOPPED).exists()

    ids = sorted(sweep.sweep_runs.values_list("run_id", flat=True))
    Run.objects.filter(pk=ids[0]).update(status=RunStatus.SUBMITTING)  # being handed to Ray: not now
    Run.objects.filter(pk=ids[1]).update(status=RunStatus.QUEUED)
    partly = as_alice("sweeps", "stop", sweep.pk, "--yes")
    assert partly.code == 1 and partly.out.strip() == f"sweep {sweep.pk}: stopped runs {ids[1]}", partly
    assert partly.err.startswith(f"run {ids[0]} not stopped: "), partly
    assert Run.objects.get(pk=ids[1]).status == RunStatus.STOPPED

    Run.objects.filter(pk__in=ids).update(status=RunStatus.QUEUED)
    done = as_alice("sweeps", "stop", sweep.pk, "--yes")
    assert done.code == 0, done
    assert done.out.strip() == f"sweep {sweep.pk}: stopped runs {', '.join(map(str, ids))}", done.out
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.STOPPED}


def test_another_users_sweep_is_not_found(as_alice, bob, make_assets, token_of, server, cli):
    dataset, model = make_assets(bob, "bobs")
    key = token_of(bob)
    made = cli("--url", server, "--token", key, "sweeps", "launch", "--name", "b", "--dataset", dataset.pk,
               "--model", model.pk, "--axis", f"{N}=2,4")
    assert made.code == 0, made
    theirs = Sweep.objects.get()
    for argv in (("sweeps", "show", theirs.pk), ("sweeps", "stop", theirs.pk, "--yes")):
        r = as_alice(*argv)
        assert r.code == 2 and r.out == "" and r.err.startswith("error: Not found. ("), (argv, r)
        assert f"/api/v1/sweeps/{theirs.pk}/" in r.err
    assert as_alice("sweeps", "list", "--json").out.count('"id"') == 0
    assert not Run.objects.filter(status=RunStatus.STOPPED).exists()
