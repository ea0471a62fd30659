"""DRF authentication by personal API token: `Authorization: Token <key>`."""
from rest_framework import authentication, exceptions

from .services import api_token_authenticate


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Authenticates `Authorization: Token <key>`; answers 401 with `WWW-Authenticate: Token`."""

    keyword = "Token"

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None  # not ours: let session authentication try
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Token <key>'.")
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token = api_token_authenticate(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword
