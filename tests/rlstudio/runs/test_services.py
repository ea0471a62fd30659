"""The run state machine and the run services (real PostgreSQL, row locks included)."""
import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import (
    ALLOWED_TRANSITIONS,
    IllegalTransition,
    run_create,
    run_token_check,
    run_transition,
)

pytestmark = pytest.mark.django_db
S = RunStatus

LEGAL = [
    (S.QUEUED, S.SUBMITTING), (S.QUEUED, S.STOPPED),
    (S.SUBMITTING, S.RUNNING), (S.SUBMITTING, S.FAILED), (S.SUBMITTING, S.QUEUED),
    (S.RUNNING, S.STOPPING), (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.FAILED), (S.RUNNING, S.LOST),
    (S.STOPPING, S.STOPPED), (S.STOPPING, S.FAILED), (S.STOPPING, S.LOST), (S.STOPPING, S.SUCCEEDED),
]
# The shortest legal path from queued to each state.
PATH_TO = {
    S.QUEUED: [],
    S.SUBMITTING: [S.SUBMITTING],
    S.RUNNING: [S.SUBMITTING, S.RUNNING],
    S.STOPPING: [S.SUBMITTING, S.RUNNING, S.STOPPING],
    S.STOPPED: [S.STOPPED],
    S.SUCCEEDED: [S.SUBMITTING, S.RUNNING, S.SUCCEEDED],
    S.FAILED: [S.SUBMITTING, S.FAILED],
    S.LOST: [S.SUBMITTING, S.RUNNING, S.LOST],
}


def _bring_to(run, state):
    for step in PATH_TO[state]:
        run_transition(run=run, to=step)
    assert run.status == state
    return run


def test_table_is_exactly_the_documented_one():
    pairs = {(a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets}
    assert pairs == set(LEGAL)
    assert set(ALLOWED_TRANSITIONS) == set(S.values)


@pytest.mark.parametrize("current,to", LEGAL, ids=[f"{a}->{b}" for a, b in LEGAL])
def test_every_legal_transition(make_run, alice, current, to):
    run = _bring_to(make_run(alice), current)
    run_transition(run=run, to=to, by=alice)
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == run.status == to
    event = AuditEvent.objects.filter(action="run.transition", object_id=str(run.pk)).first()
    assert event.data == {"from": current, "to": to} and event.actor == alice
    assert event.object_type == "runs.run"


ILLEGAL = [
    (S.QUEUED, S.RUNNING), (S.QUEUED, S.SUCCEEDED), (S.QUEUED, S.LOST), (S.SUBMITTING, S.STOPPED),
    (S.RUNNING, S.QUEUED), (S.RUNNING, S.SUBMITTING), (S.STOPPING, S.RUNNING),
    (S.STOPPED, S.QUEUED), (S.SUCCEEDED, S.RUNNING), (S.FAILED, S.QUEUED), (S.LOST, S.RUNNING),
    (S.LOST, S.FAILED), (S.RUNNING, S.RUNNING),
]


@pytest.mark.parametrize("current,to", ILLEGAL, ids=[f"{a}->{b}" for a, b in ILLEGAL])
def test_illegal_transitions_raise_and_change_nothing(make_run, alice, current, to):
    run = _bring_to(make_run(alice), current)
    audits = AuditEvent.objects.count()
    with pytest.raises(IllegalTransition) as info:
        run_transition(run=run, to=to)
    message = str(info.value)
    assert f"{current} → {to}" in message
    for allowed in ALLOWED_TRANSITIONS[current]:
        assert allowed in message
    assert Run.objects.get(pk=run.pk).status == current
    assert AuditEvent.objects.count() == audits


def test_lost_is_followed_by_nothing(make_run, alice):
    run = _bring_to(make_run(alice), S.LOST)
    for to in S.values:
        with pytest.raises(IllegalTransition, match="terminal"):
            run_transition(run=run, to=to)


def test_unknown_target_is_a_value_error(make_run, alice):
    with pytest.raises(ValueError, match="unknown run status"):
        run_transition(run=make_run(alice), to="paused")


def test_timestamps_error_and_queue_reason(make_run, alice):
    run = make_run(alice)
    assert run.started is None and run.finished is None
    run_transition(run=run, to=S.SUBMITTING)
    run_transition(run=run, to=S.QUEUED, reason="you hold 4 of your 4 GPUs")
    assert Run.objects.get(pk=run.pk).queue_reason == "you hold 4 of your 4 GPUs"
    run_transition(run=run, to=S.SUBMITTING)
    assert Run.objects.get(pk=run.pk).queue_reason == ""
    run_transition(run=run, to=S.RUNNING)
    started = Run.objects.get(pk=run.pk).started
    assert started is not None and run.finished is None
    run_transition(run=run, to=S.FAILED, error="CUDA out of memory")
    stored = Run.objects.get(pk=run.pk)
    assert stored.started == started
    assert stored.finished is not None and stored.finished >= started
    assert stored.error == "CUDA out of memory"


def test_transition_checks_the_stored_state_not_a_stale_copy(make_run, alice):
    run = make_run(alice)
    stale = Run.objects.get(pk=run.pk)
    run_transition(run=run, to=S.STOPPED)  # cancelled elsewhere
    with pytest.raises(IllegalTransition, match="stopped → submitting"):
        run_transition(run=stale, to=S.SUBMITTING)


def test_run_create_stores_only_the_token_hash(make_dataset, make_model, alice):
    run, token = run_create(
        owner=alice, name="r", dataset=make_dataset(alice), model=make_model(alice),
        config={"a": 1}, gpus=2,
    )
    assert run.status == S.QUEUED and run.gpus == 2 and run.config == {"a": 1}
    assert token and token not in run.ingest_token_hash and len(run.ingest_token_hash) == 64
    assert run_token_check(run=run, token=token)
    assert not run_token_check(run=run, token=token + "x")
    assert not run_token_check(run=run, token="")
    other, other_token = run_create(
        owner=alice, name="r2", dataset=run.dataset, model=run.model, config={}, gpus=0
    )
    assert other_token != token
    assert not run_token_check(run=other, token=token)
    assert AuditEvent.objects.filter(action="run.create", object_id=str(run.pk)).exists()


def test_run_create_refuses_negative_gpus(make_dataset, make_model, alice):
    with pytest.raises(ValueError, match="gpus"):
        run_create(owner=alice, name="r", dataset=make_dataset(alice), model=make_model(alice), config={}, gpus=-1)
