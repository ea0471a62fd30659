"""A failed run's two texts: its `error` (the reason, which whoever reads the run sees) and its
`error_log` (the job log's last lines or the trainer's traceback: its owner's and staff's only).

Pure functions. The reason never holds a server path: `scrub_paths` replaces every absolute path in
it with PATH_MARK (`runs.services.run_transition` applies it to every error it stores, and keeps the
text as it was in `error_log`); the detail may hold any (dataset files, model folders, the run's
folder, the platform's own code in a traceback's frames).
"""
from __future__ import annotations

import re

PATH_MARK = "[path]"

# An absolute POSIX path (or one under "~/"): a "/" that does not continue a word, a number, a URL or another path
# ("critic/score/mean", "3/10", "http://host/x" are left alone), then everything up to a space, a
# quote or a bracket.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~\\-])~?/[\w.~+@%=-][^\s'\"`,;:()\[\]{}<>|]*")

# Ray's message for a failed entrypoint: its first line, then the job log's last lines.
_RAY_LOGS_CLAUSE = re.compile(r",?\s*last available logs \(truncated to [\d,]+ chars\):\s*$")

_TRACEBACK_FRAME = re.compile(r'^\s*File "[^"]*", line \d+', re.MULTILINE)


def scrub_paths(text: str) -> str:
    """`text` with every absolute path replaced by PATH_MARK."""
    return _ABSOLUTE_PATH.sub(PATH_MARK, text or "")


def ray_failure(message: str) -> tuple[str, str]:
    """Ray's message for a failed job split into (its reason: the first line, without Ray's "last
    available logs" clause; the rest: the log lines Ray appended)."""
    first, _, rest = (message or "").strip().partition("\n")
    return _RAY_LOGS_CLAUSE.sub("", first.rstrip()), rest.strip("\n")


def trainer_failure(message: str) -> tuple[str, str]:
    """The trainer's failed status message split into (its reason, the detail): a traceback's reason is
    its last non-empty line (the exception), its detail the whole traceback; any other message is
    the reason itself, with no detail."""
    text = (message or "").strip("\n")
    if not _TRACEBACK_FRAME.search(text):
        return text, ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip(), text


def stored_error(error: str, error_log: str = "") -> tuple[str, str]:
    """What a run stores for (error, error_log): the reason with its paths scrubbed, and the detail,
    preceded by the reason as it was when scrubbing changed it and the detail does not hold it."""
    reason = scrub_paths(error)
    if reason != error and error not in error_log:
        error_log = "\n".join(x for x in (error, error_log) if x)
    return reason, error_log
