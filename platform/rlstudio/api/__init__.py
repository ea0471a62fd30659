"""The API's shared parts under /api/v1/: pagination, the error format, the router and schema."""
