"""The test suite's flush retry (tests/conftest.py): a transactional test's closing flush (a lock of every
table, as TRUNCATE takes, then DELETEs) that loses a real PostgreSQL deadlock to another session is
tried again instead of leaving its rows behind."""
from __future__ import annotations

import re
import threading

import psycopg2
import pytest
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection
from django.test import TransactionTestCase


def _truncated_tables() -> list[str]:
    statement = sql_flush(no_style(), connection)[0]
    return re.findall(r'"([^"]+)"', statement)


@pytest.mark.django_db(transaction=True)
def test_a_flush_that_loses_a_deadlock_is_tried_again(make_user, capsys):
    make_user("left-behind")
    tables = _truncated_tables()
    first, last = tables[0], tables[-1]
    s = connection.settings_dict
    other = psycopg2.connect(dbname=s["NAME"], user=s.get("USER") or "postgres",
                             host=s.get("HOST") or "127.0.0.1", port=s.get("PORT") or "5432",
                             password=s.get("PASSWORD") or None)
    holding = threading.Event()
    errors: list[BaseException] = []

    def other_session():
        # Hold the last table the TRUNCATE needs; once it holds the first and waits on the last, ask
        # for the first: a lock cycle, which PostgreSQL breaks by aborting the TRUNCATE (it has waited
        # longer, so its deadlock check runs first).
        try:
            with other.cursor() as cur:
                cur.execute(f'SELECT 1 FROM "{last}" LIMIT 1')
                holding.set()
                cur.execute("SELECT pg_sleep(0.5)")
                cur.execute(f'SELECT 1 FROM "{first}" LIMIT 1')
            other.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
            other.rollback()

    worker = threading.Thread(target=other_session)
    worker.start()
    assert holding.wait(10)
    try:
        # Built here, not at module level, so that pytest does not collect it as a test of its own.
        flusher = type("Flusher", (TransactionTestCase,), {"runTest": lambda self: None})()
        flusher._fixture_teardown()
    finally:
        worker.join(30)
        other.close()

    assert not errors, errors
    assert "40P01 deadlock detected on try 1; trying again" in capsys.readouterr().err
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username="left-behind").exists()


@pytest.mark.django_db(transaction=True)
def test_any_other_flush_failure_is_raised_at_once_with_the_database_s_own_error(capsys):
    from django.core.management.base import CommandError

    # A table Django does not know, its (immediate) foreign key on a user the flush deletes: PostgreSQL
    # refuses the DELETE (as it refused Django's TRUNCATE of a referenced table).
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="referenced", password="pw-for-tests-1")
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE flush_probe_ref (user_id integer REFERENCES auth_user (id))")
        cur.execute("INSERT INTO flush_probe_ref VALUES (%s)", [user.pk])
    try:
        flusher = type("Flusher", (TransactionTestCase,), {"runTest": lambda self: None})()
        with pytest.raises(CommandError) as raised:
            flusher._fixture_teardown()
    finally:
        with connection.cursor() as cur:
            cur.execute("DROP TABLE flush_probe_ref")
    message = str(raised.value)
    assert "couldn't be flushed" in message and "violates foreign key constraint" in message
    assert "flush_probe_ref" in message
    assert message.endswith("try 1)") and "trying again" not in capsys.readouterr().err
