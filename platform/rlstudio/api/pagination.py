"""Limit/offset pagination answering `{"count": N, "results": [...]}` (docs/api.md, "Lists")."""
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response


class CountResultsPagination(LimitOffsetPagination):
    """`?limit=&offset=` (default limit 50, at most 500); bad values fall back to the defaults."""

    default_limit = 50
    max_limit = 500

    def get_paginated_response(self, data):
        return Response({"count": self.count, "results": data})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["count", "results"],
            "properties": {"count": {"type": "integer", "example": 123}, "results": schema},
        }
