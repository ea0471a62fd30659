"""The runs app's domain errors (the API and the pages turn them into 409 / 400 / 403 answers): a
refused action, wrong input for a new run (a form field or a config key; `ConfigInvalid` is the config
builder's kind of it, naming the key), and an action on a run the user only reads (shared with them)."""


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
