"""The owner lock (quotas.services.lock_owner) serializes one user's admissions without blocking the
writes that reference the user row: an admission holding it must not deadlock a stop that holds the
run's row and writes its audit event (PostgreSQL's FOR KEY SHARE on the referenced user row)."""
import threading

import pytest
from django.db import connection, connections, transaction

from rlstudio.accounts.services import audit_record
from rlstudio.quotas.services import lock_owner

pytestmark = pytest.mark.django_db(transaction=True)


def _in_other_connection(fn, *, hold: threading.Event, done: threading.Event):
    """Run fn() in a transaction on a thread's own connection, keep it open until `done` is set."""
    errors: list[BaseException] = []

    def body():
        try:
            with transaction.atomic():
                fn()
                hold.set()
                done.wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
            hold.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


def test_a_held_owner_lock_lets_rows_that_reference_the_user_be_written(django_user_model):
    alice = django_user_model.objects.create_user("alice", password="x")
    hold, done = threading.Event(), threading.Event()
    thread, errors = _in_other_connection(lambda: lock_owner(user=alice), hold=hold, done=done)
    try:
        assert hold.wait(30) and not errors
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '3s'")
            audit_record(actor=alice, action="run.stop", data={})  # FOR KEY SHARE on alice's row
    finally:
        done.set()
        thread.join(30)
    assert not errors


def test_the_owner_lock_still_excludes_a_second_admission(django_user_model):
    from django.db.utils import OperationalError

    alice = django_user_model.objects.create_user("alice", password="x")
    hold, done = threading.Event(), threading.Event()
    thread, errors = _in_other_connection(lambda: lock_owner(user=alice), hold=hold, done=done)
    try:
        assert hold.wait(30) and not errors
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
            lock_owner(user=alice)
    finally:
        done.set()
        thread.join(30)
    assert not errors
