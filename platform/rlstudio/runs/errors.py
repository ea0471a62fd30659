"""The runs app's domain errors (the API and the pages turn them into 409 / 400 / 403 answers): a
refused action, wrong input for a new run (a form field or a config key; `ConfigInvalid` is the config
builder's kind of it, naming the key), an action on a run the user only reads (shared with them), and
a bulk delete that deleted nothing (`RunsNotDeleted`, one `DeleteRefusal` per run in the way)."""
from dataclasses import dataclass


class RunRefused(Exception):
    """A user action the run's state does not allow (the API answers 409 with the message)."""


class RunInputInvalid(Exception):
    """A new run's input is wrong; `field` names the form field or the config key."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class ConfigInvalid(RunInputInvalid):
    """A config a user gave does not pass the gate or the trainer's schema; `key` names the culprit
    (it is also the error's `field`), `message` says what is allowed."""

    def __init__(self, key: str, message: str):
        super().__init__(message, field=key)
        self.key, self.message = key, message


class RunNotPermitted(Exception):
    """The user reads the run (it is shared with them) but may not do this to it: only its owner and
    staff control a run (the API answers 403 with the message, the pages 403)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class DeleteRefusal:
    """Why one run of a bulk delete cannot be deleted: `code` is `not_found` (no such run, or one the
    user may not see: the two look the same), `permission_denied` (shared with the user read-only) or
    `conflict` (live, or still needed: `services.deletion.delete_refusal`'s sentence)."""

    run_id: int
    code: str
    message: str

    def as_dict(self) -> dict:
        return {"id": self.run_id, "code": self.code, "message": self.message}


class RunsNotDeleted(Exception):
    """A bulk delete that deleted nothing because some of its runs cannot be deleted: `refusals`, one
    `DeleteRefusal` per such run, in the order asked."""

    def __init__(self, refusals: list[DeleteRefusal], *, total: int):
        self.refusals, self.total = refusals, total
        first = refusals[0]
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        super().__init__(f"{len(refusals)} of the {total} runs cannot be deleted, so none was: "
                         f"run {first.run_id}: {first.message}{more}")
