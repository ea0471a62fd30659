"""Logging filters named by the settings' LOGGING."""
from __future__ import annotations

import logging


class WithoutTraceback(logging.Filter):
    """Keeps the record's message and drops its traceback: for expected refusals logged at ERROR by
    Django (a disallowed Host header), whose stack says nothing the message does not."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True
