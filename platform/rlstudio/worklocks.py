"""Locks a Celery task holds while it works on one record, so that others can tell a record whose
worker is at work from one whose worker died.

A PostgreSQL session-level advisory lock on (space, record id): `held` takes it for the work and
releases it after; a worker process that dies (killed, out of memory) closes its connection, which
releases the lock with it. A beat task finding a record `running` whose lock is free (`held` yields
True to it) knows no worker is at it any more: it re-sends the work or fails the record. Each app
names its own space (a 32-bit number), so that ids of different tables never meet.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def held(space: int, key: int) -> Iterator[bool]:
    """Take the lock on (space, key) for the block if no one holds it: yields True (then it is
    released after the block, whatever happens in it), or False at once when another session holds it."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, key])
        got = bool(cur.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [space, key])
