"""`rlstudio runs clone`, `runs fork` and `runs delete` against the real server (tests/cli/conftest.py):
the new run made as the API makes it, a refused key or step named, another user's run a 404 (exit 2),
and a delete that needs --yes (or a `y` typed on a terminal)."""
from __future__ import annotations

import io
import json

from rlstudio.runs.models import Run, RunStatus


class _Terminal(io.StringIO):
    """stdin as a terminal where the user types `text`."""

    def isatty(self) -> bool:
        return True


def test_clone_makes_a_run_with_the_overrides_and_a_bad_key_is_named(as_alice, finished_run):
    bad = as_alice("runs", "clone", finished_run.pk, "--set", "actor_rollout_ref.rollout.nn=4")
    assert bad.code == 2 and bad.out == "", bad
    assert bad.err.startswith("error: actor_rollout_ref.rollout.nn: "), bad.err
    not_kv = as_alice("runs", "clone", finished_run.pk, "--set", "n")
    assert not_kv.code == 2 and not_kv.err.startswith("error: --set: expected key=value"), not_kv
    assert Run.objects.count() == 1

    r = as_alice("runs", "clone", finished_run.pk, "--name", "copy", "--set", "actor_rollout_ref.rollout.n=4")
    assert r.code == 0, r
    new = Run.objects.exclude(pk=finished_run.pk).get()
    assert r.out.startswith(f"run {new.pk} copy clones run {finished_run.pk}: "), r.out
    assert new.parent_id == finished_run.pk and new.parent_kind == "clone" and new.name == "copy"
    assert new.config["actor_rollout_ref"]["rollout"]["n"] == 4


def test_fork_from_a_kept_step_and_a_step_it_does_not_keep_is_named(as_alice, finished_run):
    bad = as_alice("runs", "fork", finished_run.pk, "--step", 7)
    assert bad.code == 2 and bad.err.startswith("error: step: "), bad
    assert Run.objects.count() == 1

    r = as_alice("runs", "fork", finished_run.pk, "--step", 1, "--set", "actor_rollout_ref.actor.optim.lr=1e-6",
                 "--json")
    assert r.code == 0, r
    new = Run.objects.exclude(pk=finished_run.pk).get()
    assert new.parent_id == finished_run.pk and new.parent_kind == "fork"
    assert new.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-6


def test_another_users_run_is_not_found(as_alice, bob, make_run):
    theirs, _ = make_run(bob, "bobs")
    Run.objects.filter(pk=theirs.pk).update(status=RunStatus.STOPPED)
    for argv in (("runs", "clone", theirs.pk), ("runs", "fork", theirs.pk), ("runs", "delete", theirs.pk, "--yes")):
        r = as_alice(*argv)
        assert r.code == 2 and r.out == "" and r.err.startswith("error: Not found. ("), (argv, r)
        assert f" /api/v1/runs/{theirs.pk}/" in r.err, (argv, r)
    assert Run.objects.filter(pk=theirs.pk).count() == 1 and Run.objects.count() == 1


def test_delete_needs_yes_or_a_yes_typed_on_a_terminal(as_alice, alice, make_run, monkeypatch):
    run, _ = make_run(alice, "old")
    live = as_alice("runs", "delete", run.pk, "--yes")  # queued: the API's 409, nothing deleted
    assert live.code == 2 and live.err.startswith("error: ") and "stop" in live.err.lower(), live
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STOPPED)

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal: never asked, never read
    refused = as_alice("runs", "delete", run.pk)
    assert refused.code == 2 and refused.err.startswith("error: --yes: "), refused
    assert "pass --yes" in refused.err and Run.objects.filter(pk=run.pk).exists()

    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    declined = as_alice("runs", "delete", run.pk)
    assert declined.code == 1 and f"delete run {run.pk} old (stopped)" in declined.err, declined
    assert f"run {run.pk} not deleted" in declined.err and Run.objects.filter(pk=run.pk).exists()

    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    done = as_alice("runs", "delete", run.pk)
    assert done.code == 0 and done.out.strip() == f"run {run.pk} deleted", done
    assert not Run.objects.filter(pk=run.pk).exists()

    other, _ = make_run(alice, "other")
    Run.objects.filter(pk=other.pk).update(status=RunStatus.FAILED)
    assert as_alice("runs", "delete", other.pk, "-y").code == 0
    assert not Run.objects.exists()


def test_share_shows_and_changes_who_reads_a_run(as_alice, alice, bob, make_run, server, token_of, cli):
    from rlstudio.accounts.models import Team

    team = Team.objects.create(name="nlp")
    team.user_set.add(alice)
    run, _token = make_run(alice, "shared-one")
    shown = as_alice("runs", "share", run.pk)
    assert shown.code == 0, shown
    assert shown.out.strip() == f"run {run.pk} is shared with visibility: private; users: none; teams: none"
    as_bob = cli("--url", server, "--token", token_of(bob), "runs", "show", run.pk)
    assert as_bob.code == 2, as_bob  # not shared yet: a 404

    added = as_alice("runs", "share", run.pk, "--add-user", "bob", "--add-team", "nlp", "--visibility", "everyone")
    assert added.code == 0, added
    assert added.out.strip() == f"run {run.pk} is shared with visibility: everyone; users: bob; teams: nlp"
    assert cli("--url", server, "--token", token_of(bob), "runs", "show", run.pk).code == 0
    refused = cli("--url", server, "--token", token_of(bob), "runs", "share", run.pk, "--add-user", "alice")
    assert refused.code == 2, refused  # a reader reads; only the owner and staff share

    typo = as_alice("runs", "share", run.pk, "--remove-user", "bobb")
    assert typo.code == 2 and typo.err.strip() == \
        "error: --remove-user: the run is not shared with bobb (it is with: bob)", typo
    owner = as_alice("runs", "share", run.pk, "--add-user", "alice")
    assert owner.code == 2 and owner.err.strip() == "error: --add-user: alice owns the run already", owner
    back = as_alice("runs", "share", run.pk, "--remove-user", "bob", "--remove-team", "nlp", "--visibility",
                    "private", "--json")
    assert back.code == 0 and json.loads(back.out) == {"visibility": "private", "users": [], "teams": []}, back
    assert Run.objects.get(pk=run.pk).visibility == "private"
