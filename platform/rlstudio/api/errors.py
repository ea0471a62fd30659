"""The API's one error format: `{"error": {"code", "message", "field", "line"}}` with a 4xx.

Every DRF exception, Django's Http404 / PermissionDenied / ValidationError and `ApiError` (raised
by services with a code, and optionally the field and line that are wrong) become that shape. A 400
also carries `"errors": [{"field", "message"}, ...]`: every error found at once (all the serializer's
fields; every key of a run's config, `ApiError(errors=...)`), the first being the one in `error`.
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """A refusal with a stable code, for services and views to raise (default 400)."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, message: str, *, code: str = "invalid", field: str | None = None,
                 line: int | None = None, status_code: int | None = None,
                 errors: list[dict[str, Any]] | None = None):
        super().__init__(detail=message, code=code)
        self.error_code, self.field, self.line = code, field, line
        self.errors = errors  # every error found, [{"field", "message"}]; None: this one only
        if status_code is not None:
            self.status_code = status_code


def error_body(*, code: str, message: str, field: str | None = None, line: int | None = None,
               errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": {"code": code, "message": message, "field": field, "line": line}}
    if errors is not None:
        body["errors"] = [{"field": e.get("field"), "message": str(e.get("message", ""))} for e in errors]
    return body


def _first_error(detail: Any, path: str | None = None) -> tuple[str | None, Any]:
    """The first (field path, ErrorDetail) of a nested ValidationError detail."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            sub = key if path is None else f"{path}.{key}"
            return _first_error(value, None if key == "non_field_errors" else sub)
    if isinstance(detail, list) and detail:
        return _first_error(detail[0], path)
    return path, detail


def _all_errors(detail: Any, path: str | None = None) -> list[dict[str, Any]]:
    """Every (field path, message) of a nested ValidationError detail, in order."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            out += _all_errors(value, None if key == "non_field_errors" else (key if path is None else f"{path}.{key}"))
        return out
    if isinstance(detail, list):
        out = []
        for item in detail:
            out += _all_errors(item, path)  # the same field path as `_first_error` gives
        return out
    return [{"field": path, "message": str(detail)}]


# PostgreSQL's unique_violation and foreign_key_violation: what a concurrent create or delete can break.
CONCURRENT_SQLSTATES = ("23505", "23503")
CONCURRENT_CHANGE = ("another request changed the same records at the same time (something this one refers "
                     "to was deleted, or the same thing was created, meanwhile): reload and try again")


def _sqlstate(error) -> str | None:
    """The SQLSTATE of a database driver's error (psycopg2's `pgcode`, psycopg 3's `sqlstate`)."""
    return getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)


def too_many_parameters(exc: TooManyFieldsSent | TooManyFilesSent) -> ApiError:
    """The refusal of a request with more query / form parameters (or files) than Django parses
    (DATA_UPLOAD_MAX_NUMBER_FIELDS / _FILES): Django's SuspiciousOperation, in the API's shape."""
    what, limit = (("fields", settings.DATA_UPLOAD_MAX_NUMBER_FIELDS) if isinstance(exc, TooManyFieldsSent)
                   else ("files", settings.DATA_UPLOAD_MAX_NUMBER_FILES))
    return ApiError(f"the request has more than {limit} form {what} (query or form-body parameters); send "
                    f"long lists in a JSON body", code=f"too_many_{what}")


def api_exception_handler(exc, context) -> Response | None:
    """DRF's EXCEPTION_HANDLER: the error shape for everything DRF knows, 400 for Django's
    ValidationError; None (a real 500) only for genuine server bugs.

    A database IntegrityError that reaches here from a unique or foreign-key constraint (one a
    concurrent request broke, which the services' locks should have turned into a refusal naming the
    field) is a 409 `conflict`, logged with its traceback, rather than a 500. Any other one (NOT NULL,
    CHECK: a bug, which no reload mends) stays a 500. A model's DoesNotExist (the row was deleted after
    the view had read it, before a service locked it) is a 404."""
    if isinstance(exc, IntegrityError) and _sqlstate(exc.__cause__) in CONCURRENT_SQLSTATES:
        log.error("an IntegrityError reached the API edge (a 409 conflict): %s", exc, exc_info=exc)
        exc = ApiError(CONCURRENT_CHANGE, code="conflict", status_code=status.HTTP_409_CONFLICT)
    if isinstance(exc, ObjectDoesNotExist):
        # A row the request had found was deleted by another request before a service locked it (a
        # sharing change or a stop racing the run's deletion): it is gone, as a 404 says, not a 500.
        # With its traceback: one that is a bug, not a race, would otherwise be a 404 nobody can place.
        log.warning("a record was deleted while a request used it (a 404): %s", exc, exc_info=exc)
        exc = Http404()
    if isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):  # Django's own 400 would be its HTML page
        exc = too_many_parameters(exc)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ApiError):
        errors = exc.errors
        if errors is None and response.status_code == 400:
            errors = [{"field": exc.field, "message": str(exc.detail)}]
        body = error_body(code=exc.error_code, message=str(exc.detail), field=exc.field, line=exc.line,
                          errors=errors)
    elif isinstance(exc, exceptions.ValidationError):
        field, first = _first_error(exc.detail)
        code = getattr(first, "code", None) or "invalid"
        body = error_body(code=code, message=str(first), field=field, errors=_all_errors(exc.detail))
    elif isinstance(exc, (Http404, exceptions.NotFound)):
        body = error_body(code="not_found", message="Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        body = error_body(code="permission_denied", message=str(exc) or "Permission denied.")
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        body = error_body(code=code, message=str(exc.detail))
    else:
        body = error_body(code="error", message=str(exc))
    response.data = body
    return response


def api_not_found(request, exception=None) -> JsonResponse:
    """A JSON 404 for unknown paths under /api/ (Django's handler404 delegates here)."""
    return JsonResponse(error_body(code="not_found", message=f"No endpoint at {request.path}"), status=404)
