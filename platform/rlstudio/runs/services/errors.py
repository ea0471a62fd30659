"""The runs services' domain errors (the API and the pages turn them into 409 / 400 answers)."""


class RunRefused(Exception):
    """A user action the run's state does not allow (the API answers 409 with the message)."""


class RunInputInvalid(Exception):
    """A new run's input is wrong; `field` names the form field or the config key."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field
