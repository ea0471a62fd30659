"""docs/api.md against the OpenAPI schema drf-spectacular generates from the code: they cannot drift.

- every operation of the schema (method + path) has its own heading in docs/api.md, and every
  `METHOD /path` the page names exists (in the schema, or, for the few routes outside it, in Django's
  URL map);
- every query parameter and every writable request field of an operation is named in its section;
- the WebSocket routes and the error envelope's keys are on the page.

Path parameters are compared by position only (`{id}` on the page, `{run_id}` in the schema).
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")
ENDPOINT = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s?]*)")
# Served under /api/v1/ but not operations of the API: the schema itself and its rendered page.
OUTSIDE_SCHEMA = {("GET", "/api/v1/schema/"), ("GET", "/api/v1/docs/")}


def norm(path: str) -> str:
    return re.sub(r"\{[^}/]+\}", "{}", path)


def doc_sections(text: str) -> dict[tuple[str, str], str]:
    """{(METHOD, normalised path): the section's text} for each heading naming an endpoint."""
    sections: dict[tuple[str, str], str] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            current = [(m, norm(p)) for m, p in ENDPOINT.findall(line)]
            for key in current:
                sections.setdefault(key, "")
            continue
        for key in current:
            sections[key] += line + "\n"
    return sections


def doc_mentions(text: str) -> set[tuple[str, str]]:
    """Every `METHOD /path` the page names, headings or prose."""
    return {(m, norm(p)) for m, p in ENDPOINT.findall(text)}


def _component(schema: dict, ref: str) -> dict:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def request_fields(schema: dict, operation: dict) -> set[str]:
    """Names of the writable fields of an operation's request body (any content type)."""
    names: set[str] = set()
    for content in operation.get("requestBody", {}).get("content", {}).values():
        body = content.get("schema", {})
        if "$ref" in body:
            body = _component(schema, body["$ref"])
        for name, prop in body.get("properties", {}).items():
            if "$ref" in prop:
                prop = {**_component(schema, prop["$ref"]), **prop}
            if not prop.get("readOnly"):
                names.add(name)
    return names


@pytest.fixture(scope="module")
def schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator(patterns=None).get_schema(request=None, public=True)


@pytest.fixture(scope="module")
def operations(schema) -> dict[tuple[str, str], dict]:
    return {(method.upper(), norm(path)): op
            for path, item in schema["paths"].items() for method, op in item.items() if method in METHODS}


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_page_parser_sees_headings_and_mentions():
    text = ("## Runs\n### `GET /api/v1/runs/{id}/`\nOne run, `limit`.\n"
            "### `PUT /api/v1/runs/{run_id}/retention/`\nBody `mode`; see `POST /api/v1/runs/{x}/stop/`.\n")
    sections = doc_sections(text)
    assert set(sections) == {("GET", "/api/v1/runs/{}/"), ("PUT", "/api/v1/runs/{}/retention/")}
    assert "`limit`" in sections[("GET", "/api/v1/runs/{}/")]
    assert "`mode`" not in sections[("GET", "/api/v1/runs/{}/")]
    assert ("POST", "/api/v1/runs/{}/stop/") in doc_mentions(text)


def test_the_schema_lists_the_api(operations):
    assert len(operations) >= 40  # the real API, not an empty document
    assert ("POST", "/api/v1/runs/{}/events/") in operations


def test_every_operation_of_the_schema_has_its_section(operations, doc):
    sections = doc_sections(doc)
    missing = sorted(f"{m} {p}" for m, p in operations if (m, p) not in sections)
    assert not missing, "operations in the OpenAPI schema without a heading in docs/api.md:\n" + "\n".join(missing)


def test_every_endpoint_the_page_names_exists(operations, doc):
    from django.urls import Resolver404, resolve

    unknown = []
    for method, path in sorted(doc_mentions(doc)):
        if (method, path) in operations or (method, path) in OUTSIDE_SCHEMA:
            continue
        if not path.startswith("/api/"):
            try:  # outside the API (/healthz): it must at least be a route
                resolve(path.replace("{}", "1"))
                continue
            except Resolver404:
                pass
        unknown.append(f"{method} {path}")
    assert not unknown, "docs/api.md names endpoints the schema does not have:\n" + "\n".join(unknown)
    for method, path in OUTSIDE_SCHEMA:
        resolve(path)  # raises if the route is gone


def test_every_parameter_and_request_field_is_named_in_its_section(schema, operations, doc):
    sections = doc_sections(doc)
    missing = []
    for (method, path), op in sorted(operations.items()):
        text = sections.get((method, path))
        if text is None:
            continue  # reported by the test above
        names = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"} | request_fields(schema, op)
        missing += [f"{method} {path}: `{name}`" for name in sorted(names) if f"`{name}`" not in text]
    assert not missing, ("query parameters / request fields of the schema not named in their docs/api.md "
                         "section:\n" + "\n".join(missing))


def test_websocket_routes_and_error_envelope_are_documented(doc):
    from rlstudio.api.errors import error_body
    from rlstudio.telemetry.routing import websocket_urlpatterns

    for route in websocket_urlpatterns:
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(route.pattern))
        assert norm(path) in {norm(p) for p in re.findall(r"`(/ws/[^`\s?]*)`", doc)}, f"{path} not in docs/api.md"
    # The envelope with everything it can carry (the optional keys error_body takes, given).
    optional = {"errors": [{"field": "f", "message": "m"}]}
    params = inspect.signature(error_body).parameters
    body = error_body(code="invalid", message="m", **{k: v for k, v in optional.items() if k in params})
    assert "error" in body and '{"error": {' in doc
    for key in [*body, *body["error"]]:
        assert f"`{key}`" in doc, f"error envelope key {key!r} not explained in docs/api.md"
    for key in body["error"]:
        assert f'"{key}"' in doc, f"error key {key!r} not in docs/api.md's example"


def test_every_operation_says_what_it_does(operations):
    """The schema, and /api/v1/docs/ rendered from it, describe every operation (a view method's
    docstring, else its view's): 27 of 96 had an empty summary there."""
    bare = sorted(f"{m} {p}" for (m, p), op in operations.items() if not (op.get("summary") or op.get("description")))
    assert bare == []
