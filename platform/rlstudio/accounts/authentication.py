"""DRF authentication by personal API token: `Authorization: Token <key>`.

Failed keys are throttled per address and per token prefix (rlstudio.accounts.throttle): while
locked out every key, a valid one too, answers 429 with Retry-After.
"""
from rest_framework import authentication, exceptions

from .throttle import api_token_throttled, cooloff_minutes, lockout_message


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
            key = parts[1].decode("latin-1")  # never a valid key, but counted as a failure
        django_request = request._request
        token, locked = api_token_throttled(request=django_request, key=key)
        if locked:  # answered here, as JSON (axes' middleware would answer with the login page)
            raise self._locked_out(django_request)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return token.user, token

    @staticmethod
    def _locked_out(django_request) -> exceptions.Throttled:
        return exceptions.Throttled(wait=cooloff_minutes(django_request) * 60,
                                    detail=lockout_message(django_request, what="failed API tokens"))

    def authenticate_header(self, request) -> str:
        return self.keyword
