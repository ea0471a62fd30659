"""Forks from a checkpoint, the platform side: the service's refusals (unchangeable key, unknown step,
live run, no checkpoint, a reader), the changed keys, the frozen spec of a fork (resume_fork, the
checkpoint path), the deletion guard, and the run page's Fork control and lineage.

Real PostgreSQL; no Ray or worker (with the non-transactional `db`, on-commit task sends never fire).
"""
import html

import pytest
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs import launch
from rlstudio.runs.checkpoints import checkpoint_steps
from rlstudio.runs.config_diff import config_changes
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import (
    RunInputInvalid,
    RunNotPermitted,
    RunRefused,
    delete_refusal,
    run_clone,
    run_fork,
    run_resume,
    run_share,
)

pytestmark = pytest.mark.django_db
S = RunStatus
LR = "actor_rollout_ref.actor.optim.lr"
TOTAL = "trainer.total_training_steps"


@pytest.fixture
def parent(alice, make_run, runs_dir):
    """alice's succeeded cpu_smoke run (2 steps) with committed checkpoints at steps 1 and 2 in its
    folder, an uncommitted one beside them."""
    run = make_run(alice, "parent", config=launch.build_config(preset="cpu_smoke"))
    Run.objects.filter(pk=run.pk).update(status=S.SUCCEEDED, step=2, total_steps=2)
    run.refresh_from_db()
    for step in (1, 2):
        (runs_dir / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    (runs_dir / str(run.pk) / "global_step_3.tmp" / "actor").mkdir(parents=True)
    return run


def _page(user) -> Client:
    page = Client()
    page.force_login(user)
    return page


def test_checkpoint_steps_are_the_runs_committed_step_folders(parent, runs_dir):
    assert list(checkpoint_steps(parent)) == [1, 2]
    assert checkpoint_steps(parent)[1] == runs_dir / str(parent.pk) / "global_step_1"


def test_a_fork_starts_from_the_chosen_checkpoint_with_its_changes(parent, alice, runs_dir):
    before = parent.config["actor_rollout_ref"]["actor"]["optim"]["lr"]
    fork = run_fork(run=parent, by=alice, step=1, overrides={LR: before * 3, TOTAL: 5})
    assert fork.parent_id == parent.pk and fork.parent_kind == "fork" and fork.owner == alice
    assert fork.resume_from == str(runs_dir / str(parent.pk) / "global_step_1")
    assert fork.name == "parent (fork @ 1)" and fork.total_steps == 5
    assert fork.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == before * 3
    assert fork.config["trainer"]["resume_fork"] is False  # written only when frozen
    ev = AuditEvent.objects.get(action="run.fork", object_id=str(fork.pk))
    assert ev.actor == alice and ev.data == {"parent": parent.pk, "step": 1, "changed": [LR, TOTAL]}
    changes = config_changes(before=parent.config, after=fork.config)
    assert [(c.key, c.old, c.new) for c in changes] == [(LR, before, before * 3), (TOTAL, 2, 5)]
    # Its frozen spec starts from that checkpoint, in fork mode.
    spec = launch.freeze_spec(run=fork, out_dir=launch.run_dir(fork.pk))
    assert spec["trainer"]["resume_mode"] == "resume_path" and spec["trainer"]["resume_fork"] is True
    assert spec["trainer"]["resume_from_path"] == str(runs_dir / str(parent.pk) / "global_step_1")
    assert launch.resume_source(fork) == fork.resume_from


def test_the_newest_checkpoint_by_default_and_a_total_it_must_pass(parent, alice):
    with pytest.raises(RunInputInvalid) as exc:
        run_fork(run=parent, by=alice)  # step 2 of a 2-step run: nothing left
    assert exc.value.field == TOTAL and "nothing would be left" in str(exc.value)
    assert Run.objects.count() == 1
    fork = run_fork(run=parent, by=alice, overrides=[f"{TOTAL}=4"], name="longer")
    assert fork.resume_from.endswith("global_step_2") and fork.name == "longer"
    # The same config from an earlier step: a fork that changes nothing, from step 1.
    same = run_fork(run=parent, by=alice, step="1")
    assert same.resume_from.endswith("global_step_1")
    assert AuditEvent.objects.get(action="run.fork", object_id=str(same.pk)).data["changed"] == []


@pytest.mark.parametrize("overrides,field,says", [
    ({"actor_rollout_ref.rollout.n": 4}, "actor_rollout_ref.rollout.n", "clone"),
    ({"actor_rollout_ref.model.lora_rank": 8}, "actor_rollout_ref.model.lora_rank", "clone"),
    ({"data.train_batch_size": 4}, "data.train_batch_size", "clone"),
    ({"trainer.resume_fork": True}, "trainer.resume_fork", "platform"),
    ({"trainer.resume_from_path": "/srv/state/runs/1/global_step_2"}, "trainer.resume_from_path", "platform"),
    ({LR: "fast"}, LR, ""),
    ({"no.such.key": 1}, "no.such.key", ""),
])
def test_a_change_a_fork_cannot_make_is_refused_on_its_key_and_nothing_is_made(parent, alice, overrides,
                                                                              field, says):
    with pytest.raises(RunInputInvalid) as exc:
        run_fork(run=parent, by=alice, step=1, overrides={LR: 1e-3, **overrides})
    assert exc.value.field == field and says in str(exc.value), str(exc.value)
    assert Run.objects.count() == 1 and not AuditEvent.objects.filter(action="run.fork").exists()


@pytest.mark.parametrize("step", [3, 7, 0, -1, "x", "²", 1.5, True])
def test_a_step_it_did_not_keep_is_refused_on_step_naming_the_kept_ones(parent, alice, step):
    with pytest.raises(RunInputInvalid) as exc:
        run_fork(run=parent, by=alice, step=step)
    assert exc.value.field == "step"
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        assert "keeps steps 1, 2" in str(exc.value)
    assert Run.objects.count() == 1


@pytest.mark.parametrize("status", [S.QUEUED, S.RUNNING, S.STOPPING, S.SUBMITTING])
def test_a_live_run_is_refused(parent, alice, status):
    Run.objects.filter(pk=parent.pk).update(status=status)
    parent.refresh_from_db()
    with pytest.raises(RunRefused, match="only a finished run can be forked"):
        run_fork(run=parent, by=alice, step=1)
    assert Run.objects.count() == 1


def test_a_run_without_a_kept_checkpoint_is_refused(alice, make_run, runs_dir):
    run = make_run(alice, config=launch.build_config(preset="cpu_smoke"))
    Run.objects.filter(pk=run.pk).update(status=S.FAILED)
    run.refresh_from_db()
    (runs_dir / str(run.pk) / "global_step_1.tmp" / "actor").mkdir(parents=True)  # never committed
    with pytest.raises(RunRefused, match="no checkpoint"):
        run_fork(run=run, by=alice)
    assert Run.objects.count() == 1


def test_only_its_owner_or_staff_fork_it(parent, alice, bob, staff):
    run_share(run=parent, by=alice, add=["bob"])
    with pytest.raises(RunNotPermitted):
        run_fork(run=parent, by=bob, step=1)
    assert Run.objects.count() == 1
    fork = run_fork(run=parent, by=staff, step=1)
    assert fork.owner == alice and fork.parent_kind == "fork"  # staff act for the owner


def test_a_resume_and_a_plain_run_are_frozen_without_fork_mode(parent, alice, runs_dir):
    Run.objects.filter(pk=parent.pk).update(status=S.STOPPED, checkpoint_path=str(runs_dir / str(parent.pk) / "global_step_1"))
    (runs_dir / str(parent.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    parent.refresh_from_db()
    resumed = run_resume(run=parent, by=alice)
    spec = launch.freeze_spec(run=resumed, out_dir=launch.run_dir(resumed.pk))
    assert spec["trainer"]["resume_mode"] == "resume_path" and spec["trainer"]["resume_fork"] is False
    spec = launch.freeze_spec(run=parent, out_dir=launch.run_dir(parent.pk))
    assert spec["trainer"]["resume_mode"] == "auto" and spec["trainer"]["resume_fork"] is False


def test_a_fork_recorded_outside_its_parents_folder_starts_from_nothing(parent, alice, bob, make_run, runs_dir):
    fork = run_fork(run=parent, by=alice, step=1)
    theirs = make_run(bob, "theirs")
    Run.objects.filter(pk=fork.pk).update(resume_from=str(runs_dir / str(theirs.pk) / "global_step_1"))
    fork.refresh_from_db()
    assert launch.resume_source(fork) == ""
    spec = launch.freeze_spec(run=fork, out_dir=launch.run_dir(fork.pk))
    assert spec["trainer"]["resume_from_path"] is None and spec["trainer"]["resume_fork"] is False
    # Nor from a parent of another owner's, even inside its folder.
    Run.objects.filter(pk=fork.pk).update(parent=theirs, resume_from=str(runs_dir / str(theirs.pk) / "global_step_1"))
    fork.refresh_from_db()
    assert launch.resume_source(fork) == ""


def test_an_unfinished_fork_keeps_its_parent_from_deletion(parent, alice):
    fork = run_fork(run=parent, by=alice, step=1, name="the-fork")
    why = delete_refusal(parent)
    assert "the-fork" in why and f"#{fork.pk}" in why and "forked from" in why
    Run.objects.filter(pk=fork.pk).update(status=S.SUCCEEDED)
    assert delete_refusal(parent) == ""


# ---------------------------------------------------------------------------------------- run page
def test_the_fork_control_is_the_owners_on_a_finished_run_with_checkpoints(parent, alice, bob):
    body = _page(alice).get(f"/runs/{parent.pk}/").content.decode()
    assert f'action="/runs/{parent.pk}/fork/"' in body and 'id="run-fork"' in body
    assert body.index('<option value="2">2</option>') < body.index('<option value="1">1</option>')  # newest first
    assert 'name="lr"' in body and 'name="temperature"' in body
    assert 'name="total_training_steps"' in body and 'name="overrides"' in body
    # the KL coefficient that applies: the KL loss's (use_kl_loss on), not the KL-in-reward one's (off)
    assert 'name="kl_loss_coef"' in body and 'name="kl_coef"' not in body
    run_share(run=parent, by=alice, add=["bob"])
    assert "/fork/" not in _page(bob).get(f"/runs/{parent.pk}/").content.decode()
    Run.objects.filter(pk=parent.pk).update(status=S.RUNNING)
    assert "/fork/" not in _page(alice).get(f"/runs/{parent.pk}/").content.decode()


def test_the_fork_form_offers_the_kl_coefficient_of_the_kl_the_run_uses(parent, alice):
    config = dict(parent.config)
    config["algorithm"] = {**config["algorithm"], "use_kl_in_reward": True}
    config["actor_rollout_ref"] = {**config["actor_rollout_ref"],
                                   "actor": {**config["actor_rollout_ref"]["actor"], "use_kl_loss": False}}
    Run.objects.filter(pk=parent.pk).update(config=config)
    body = _page(alice).get(f"/runs/{parent.pk}/").content.decode()
    assert 'name="kl_coef"' in body and "KL-in-reward coefficient" in body and 'name="kl_loss_coef"' not in body


def test_the_fork_form_makes_the_fork_and_opens_its_page(parent, alice):
    resp = _page(alice).post(f"/runs/{parent.pk}/fork/", {
        "step": "1", "name": "", "lr": "3e-4", "kl_coef": "", "temperature": "0.7", "total_training_steps": "4",
        "overrides": "# a comment\n\nactor_rollout_ref.actor.entropy_coeff=0.01\n"})
    fork = Run.objects.get(parent=parent)
    assert resp.status_code == 302 and resp["Location"] == f"/runs/{fork.pk}/"
    assert fork.parent_kind == "fork" and fork.resume_from.endswith("global_step_1") and fork.total_steps == 4
    changed = AuditEvent.objects.get(action="run.fork").data["changed"]
    assert set(changed) == {LR, "actor_rollout_ref.rollout.temperature", TOTAL,
                            "actor_rollout_ref.actor.entropy_coeff"}


@pytest.mark.parametrize("post,names", [
    ({"step": "1", "overrides": "actor_rollout_ref.rollout.n=4"}, "actor_rollout_ref.rollout.n"),
    ({"step": "1", "overrides": "not a pair"}, "overrides"),
    ({"step": "9"}, "step"),
    ({"step": "1", "lr": "fast"}, LR),
])
def test_a_refused_fork_form_says_the_key_and_makes_nothing(parent, alice, post, names):
    page = _page(alice)
    resp = page.post(f"/runs/{parent.pk}/fork/", post, follow=True)
    assert resp.redirect_chain[-1][0] == f"/runs/{parent.pk}/"
    messages = [str(m) for m in resp.context["messages"]]
    assert any(m.startswith("Not forked: ") and names in m for m in messages), messages
    assert Run.objects.count() == 1


def test_a_refused_fork_names_its_key_once(parent, alice):
    """A message that names its key is not prefixed with it again ("Not forked: <key>: a fork cannot
    change <key>: ..." read the key twice); one that does not name it is ("overrides: not a pair")."""
    n = "actor_rollout_ref.rollout.n"
    for post, key in (({"step": "1", "overrides": f"{n}=4"}, n),
                      ({"step": "1", "total_training_steps": "1"}, TOTAL)):
        resp = _page(alice).post(f"/runs/{parent.pk}/fork/", post, follow=True)
        [message] = [str(m) for m in resp.context["messages"]]
        assert message.startswith("Not forked: ") and message.count(key) == 1, message
    resp = _page(alice).post(f"/runs/{parent.pk}/fork/", {"step": "1", "overrides": "not a pair"}, follow=True)
    assert [str(m) for m in resp.context["messages"]][0].startswith("Not forked: overrides: ")
    assert Run.objects.count() == 1


def test_a_reader_gets_403_and_an_outsider_404_on_the_fork_form(parent, alice, bob, make_user):
    run_share(run=parent, by=alice, add=["bob"])
    assert _page(bob).post(f"/runs/{parent.pk}/fork/", {"step": "1"}).status_code == 403
    assert _page(make_user("carol")).post(f"/runs/{parent.pk}/fork/", {"step": "1"}).status_code == 404
    assert _page(alice).get(f"/runs/{parent.pk}/fork/").status_code == 405
    assert Run.objects.count() == 1


def test_a_forks_page_says_where_it_started_and_what_it_changed_escaped(parent, alice, bob):
    evil = '<script>alert("x")</script>'
    Run.objects.filter(pk=parent.pk).update(name=evil)
    parent.refresh_from_db()
    lr = parent.config["actor_rollout_ref"]["actor"]["optim"]["lr"]
    fork = run_fork(run=parent, by=alice, step=1, overrides={LR: lr * 3, "reward.reward_kwargs": {"k": evil}})
    assert fork.name == f"{evil} (fork @ 1)"
    body = _page(alice).get(f"/runs/{fork.pk}/").content.decode()
    assert "<script>alert" not in body and html.escape(evil) in body
    assert f'fork of <a href="/runs/{parent.pk}/">#{parent.pk}</a> at step 1' in body
    changes = body[body.index('id="fork-changes"'):]
    changes = changes[:changes.index("</div>")]
    assert f"<code>{LR}</code>" in changes and f'<span class="old">{lr}</span>' in changes
    assert f'<span class="new">{lr * 3}</span>' in changes and "reward.reward_kwargs" in changes
    # A reader of the fork who does not read its parent sees what it changed to, not the old values.
    run_share(run=fork, by=alice, add=["bob"])
    body = _page(bob).get(f"/runs/{fork.pk}/").content.decode()
    assert f"<code>{LR}</code>" in body and 'class="old"' not in body and "<script>alert" not in body
    assert "/fork/" not in body


def test_a_fork_keeps_what_it_changed_after_its_parent_was_deleted(parent, alice, bob):
    fork = run_fork(run=parent, by=alice, step=2, overrides={TOTAL: 3})
    assert fork.fork_changes == [{"key": TOTAL, "old": 2, "new": 3}]
    Run.objects.filter(pk=fork.pk).update(status=S.SUCCEEDED)
    Run.objects.filter(pk=parent.pk).delete()
    body = _page(alice).get(f"/runs/{fork.pk}/").content.decode()
    assert '<span class="muted" id="run-lineage">fork of a deleted run at step 2</span>' in body
    changes = body[body.index('id="fork-changes"'):]
    changes = changes[:changes.index("</div>")]
    assert f"<code>{TOTAL}</code>" in changes and '<span class="old">2</span>' in changes
    assert '<span class="new">3</span>' in changes
    # A reader of the fork alone sees the new values only.
    run_share(run=fork, by=alice, add=["bob"])
    body = _page(bob).get(f"/runs/{fork.pk}/").content.decode()
    assert f"<code>{TOTAL}</code>" in body and 'class="old"' not in body


def test_a_fork_made_before_its_changes_were_kept_reads_them_from_the_parent_while_it_exists(parent, alice):
    fork = run_fork(run=parent, by=alice, step=2, overrides={TOTAL: 3})
    Run.objects.filter(pk=fork.pk).update(status=S.SUCCEEDED, fork_changes=None)
    body = _page(alice).get(f"/runs/{fork.pk}/").content.decode()
    assert f"<code>{TOTAL}</code>" in body and '<span class="old">2</span>' in body
    Run.objects.filter(pk=parent.pk).delete()
    body = _page(alice).get(f"/runs/{fork.pk}/").content.decode()
    assert "fork of a deleted run at step 2" in body and 'id="fork-changes"' not in body


def test_the_runs_list_says_what_each_run_was_made_from(parent, alice):
    fork = run_fork(run=parent, by=alice, step=1)
    body = _page(alice).get("/runs/").content.decode()
    row = body[body.index(f'<tr data-run-id="{fork.pk}">'):]
    row = row[:row.index("</tr>")]
    assert f'fork of <a href="/runs/{parent.pk}/">#{parent.pk}</a>' in row
    parent_row = body[body.index(f'<tr data-run-id="{parent.pk}">'):]
    assert "run-lineage" not in parent_row[:parent_row.index("</tr>")]
    Run.objects.filter(pk=fork.pk).update(status=S.STOPPED)
    Run.objects.filter(pk=parent.pk).delete()
    assert "fork of a deleted run" in _page(alice).get("/runs/").content.decode()


def test_a_resume_and_a_fork_start_at_their_checkpoints_step(parent, alice, runs_dir):
    """While it waits and starts, a resumed or forked run reads "step 1 / N" (it goes on from its
    checkpoint's step), not "0 / N" as a run from scratch; a clone starts at 0."""
    fork = run_fork(run=parent, by=alice, step=1)
    assert fork.step == 1 and Run.objects.get(pk=fork.pk).step == 1
    Run.objects.filter(pk=parent.pk).update(status=S.STOPPED, checkpoint_path=str(runs_dir / str(parent.pk) / "global_step_1"))
    (runs_dir / str(parent.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    parent.refresh_from_db()
    assert run_resume(run=parent, by=alice).step == 1
    assert run_clone(run=parent, by=alice).step == 0
    assert '<span id="live-step">1</span>' in _page(alice).get(f"/runs/{fork.pk}/").content.decode()
