"""OpenAPI description of the API token authentication (loaded by AccountsConfig.ready)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "rlstudio.accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A personal API token: `Authorization: Token <key>` (profile page or "
            "`python manage.py api_token <username>`).",
        }
