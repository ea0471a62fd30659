"""/api/v1/docs/: the OpenAPI schema rendered server-side as a plain page.

Redoc and Swagger UI load their JavaScript from a CDN, which deployments of RL Studio often cannot
reach; this page needs nothing but the schema that drf-spectacular generates from the code.
"""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from drf_spectacular.generators import SchemaGenerator

HTTP_METHODS = ("get", "post", "put", "patch", "delete")


@login_required
def api_docs(request):
    schema = SchemaGenerator(patterns=None).get_schema(request=None, public=True)
    operations = []
    for route, item in schema.get("paths", {}).items():
        for method in HTTP_METHODS:
            op = item.get(method)
            if op is None:
                continue
            operations.append(
                {
                    "method": method.upper(),
                    "path": route,
                    "summary": op.get("summary") or op.get("description", ""),
                    "parameters": [
                        {"name": p["name"], "in": p["in"], "description": p.get("description", "")}
                        for p in op.get("parameters", [])
                    ],
                    "responses": sorted(op.get("responses", {})),
                }
            )
    return render(request, "api/docs.html", {"info": schema.get("info", {}), "operations": operations})
