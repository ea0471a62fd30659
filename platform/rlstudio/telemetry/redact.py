"""A run's events as a reader sees them: without the platform's server paths.

A reader (a user the run is shared with who cannot manage it: not its owner, not staff;
`runs.selectors.can_manage`) gets every event, but a checkpoint's `data.path` is blank (the owner and
staff see the path, as they see the run's `checkpoint`), a failed status's `message` is its reason
(the last line of the trainer's traceback, as the run's `error`), and every status and log message has
its absolute paths replaced (`runs.failure.scrub_paths`). `event_for_viewer` is the one rule: the run
websocket applies it to each event it sends to a socket (live and replayed: group messages go to every
socket watching the run, so it is applied per socket, when sending) and the trainer messages' API and
page apply it to each log event.
"""
from __future__ import annotations

import re
from typing import Any

from rlstudio.runs.failure import scrub_paths, trainer_failure

REDACTED_TYPES = ("checkpoint", "status", "log")
# An event of one of those types in a JSON frame (any spacing; JSON escapes the quotes inside a string).
_FRAME_MARK = re.compile(r'"type"\s*:\s*"(?:%s)"' % "|".join(REDACTED_TYPES))


def event_for_viewer(event: Any, *, manager: bool) -> Any:
    """`event` as a viewer sees it: as it is for the run's owner and staff (`manager`); for a reader a
    copy with the checkpoint path blank and the status and log messages without server paths (see the
    module docstring). An event of any other type or shape is returned as it is."""
    if manager or not isinstance(event, dict) or event.get("type") not in REDACTED_TYPES:
        return event
    data = event.get("data")
    if not isinstance(data, dict):
        return event
    data = dict(data)
    if event["type"] == "checkpoint":
        if "path" in data:
            data["path"] = ""
    elif isinstance(data.get("message"), str):
        message = data["message"]
        if event["type"] == "status" and data.get("state") == "failed":
            message = trainer_failure(message)[0]
        data["message"] = scrub_paths(message)
    return {**event, "data": data}


def frame_may_hold_redacted(frame: str) -> bool:
    """Whether an encoded batch frame may hold an event `event_for_viewer` changes for a reader (False:
    it can go to a reader as it is)."""
    return _FRAME_MARK.search(frame) is not None
