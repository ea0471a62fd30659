"""Limit/offset pagination answering `{"count": N, "results": [...]}` (docs/api.md, "Lists")."""
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

from .params import (DEFAULT_LIMIT, LIMIT_DESCRIPTION, LIMIT_SCHEMA, MAX_LIMIT, OFFSET_DESCRIPTION, OFFSET_SCHEMA,
                     int_param)


class CountResultsPagination(LimitOffsetPagination):
    """`?limit=&offset=`: `limit` 1 to 500 (default 50), `offset` 0 or more (default 0); any other value
    (not an integer, 0, over 500, negative) is a 400 naming the parameter, where DRF's own pager would
    fall back to the default or clamp without a word (params.int_param)."""

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT
    limit_query_description = LIMIT_DESCRIPTION
    offset_query_description = OFFSET_DESCRIPTION

    def get_limit(self, request):
        return int_param(request.query_params, self.limit_query_param, default=self.default_limit, minimum=1,
                         maximum=self.max_limit)

    def get_offset(self, request):
        return int_param(request.query_params, self.offset_query_param, default=0, minimum=0)

    def get_paginated_response(self, data):
        return Response({"count": self.count, "results": data})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["count", "results"],
            "properties": {"count": {"type": "integer", "example": 123}, "results": schema},
        }

    def get_schema_operation_parameters(self, view):
        """DRF's two, with the bounds the pager holds them to in their schema."""
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: LIMIT_SCHEMA, self.offset_query_param: OFFSET_SCHEMA}
        for parameter in parameters:
            if parameter["name"] in bounds:
                parameter["schema"] = dict(bounds[parameter["name"]])
        return parameters
