"""The catalog's domain errors; the API (catalog/api.py `api_error`) and the pages turn them into answers.

    CatalogRefused   bad input for a catalog write, naming the field        400
    CatalogTooLarge  a file over a size limit                              413
    CatalogConflict  the object's state does not allow it (not ready yet)   409
    CatalogInUse     used by runs: cannot be deleted                       409
    NotPermitted     the user may see the object but not do this to it     403
"""


class CatalogRefused(Exception):
    """Bad input for a catalog write; `field` names the field that is wrong (the API answers 400)."""

    def __init__(self, message: str, *, field: str | None = None, code: str = "invalid"):
        super().__init__(message)
        self.message, self.field, self.code = message, field, code


class CatalogTooLarge(CatalogRefused):
    """A file over a size limit (the API answers 413)."""


class CatalogConflict(CatalogRefused):
    """The object's state does not allow this now (the API answers 409)."""


class CatalogInUse(CatalogConflict):
    """The object is used by runs and cannot be deleted (the API answers 409)."""


class NotPermitted(Exception):
    """The user may see the object but not do this to it (the API answers 403 with the message)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field
