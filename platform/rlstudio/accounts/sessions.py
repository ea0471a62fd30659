"""The session engine (SESSION_ENGINE): Django's database sessions, reading only a key Django makes.

A session key comes from the browser's cookie, and Django's own check (`_validate_session_key`) wants
only 8 characters or more: a cookie such as `sessionid="abcdefgh\\000"` (a quoted cookie's octal
escape is a NUL) reached PostgreSQL, which refuses a NUL, and every page, API call and websocket of
that request was a 500 before anyone logged in. Here a key is valid only in the shape Django makes
them (`VALID_KEY_CHARS`: lower-case ASCII letters and digits, 8 to 40 characters, the column's
length); anything else reads as no session. The upload gate and the websockets read sessions through
this engine too (settings.SESSION_ENGINE).
"""
from __future__ import annotations

from django.contrib.sessions.backends.base import VALID_KEY_CHARS
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore

MAX_KEY_LENGTH = 40  # django_session.session_key


class SessionStore(DatabaseSessionStore):
    """Django's database SessionStore whose keys are only those it could have made."""

    def _validate_session_key(self, key) -> bool:
        return (isinstance(key, str) and 8 <= len(key) <= MAX_KEY_LENGTH
                and all(c in VALID_KEY_CHARS for c in key))
