"""The projects app's domain errors (the API and the pages turn them into 400 / 403 answers)."""


class ProjectInputInvalid(Exception):
    """A project's input is wrong; `field` names the form / API field (name, description, users)."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class ProjectNotPermitted(Exception):
    """The user reads the project (it is shared with them) but may not change it: only its owner and
    staff rename, describe, share or delete a project (the API answers 403 with the message)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
