"""The NUL guard: a request whose query string or form fields hold a NUL character (U+0000) is refused
with a 400 naming the parameter, before any view sees it.

PostgreSQL's text columns refuse a NUL (psycopg2 raises on it), so a NUL that reached a lookup or a
write would be a 500; Django's and DRF's form and serializer fields refuse one already, but views
that read `request.GET` / `request.POST` themselves (a filter, a search, a name) did not. Under /api/
the answer is the API's error shape (rlstudio.api.errors); elsewhere a plain 400 page (400.html).
Form fields are read only off the API: the API's bodies are parsed by DRF (whose fields refuse NUL),
and reading a form body here would read a dataset upload before its view checks its size.
"""
from __future__ import annotations

from django.core.exceptions import TooManyFieldsSent
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string

from rlstudio.api.errors import error_body, too_many_parameters
from rlstudio.text import without_nul


def nul_parameter(params) -> str | None:
    """The name of the first parameter of a QueryDict whose name or a value holds a NUL; None if none."""
    for key, values in params.lists():
        if "\x00" in key or any(isinstance(v, str) and "\x00" in v for v in values):
            return without_nul(key)
    return None


class NulParameterMiddleware:
    """Refuse (400, naming the parameter) a NUL in the query string, or in the form fields of a page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        api = request.path.startswith("/api/")
        try:
            name = nul_parameter(request.GET)
        except TooManyFieldsSent as exc:  # over DATA_UPLOAD_MAX_NUMBER_FIELDS: the API's shape, not the HTML page
            if not api:
                raise
            refusal = too_many_parameters(exc)
            return JsonResponse(error_body(code=refusal.error_code, message=str(refusal.detail), errors=[]),
                                status=400)
        if name is None and not api and request.method == "POST" and request.content_type in (
                "application/x-www-form-urlencoded", "multipart/form-data"):
            name = nul_parameter(request.POST)
        if name is None:
            return self.get_response(request)
        message = f"{name} must not contain the NUL character (U+0000)"
        if api:
            return JsonResponse(error_body(code="invalid", message=message, field=name,
                                           errors=[{"field": name, "message": message}]), status=400)
        return HttpResponse(render_to_string("400.html", {"message": message, "field": name}), status=400)
