"""DRF authentication by personal API token: `Authorization: Token <key>`.

Failed keys are throttled per address and per token prefix (rlstudio.accounts.throttle): while
locked out every key, a valid one too, answers 429 with Retry-After.
"""
from rest_framework import authentication, exceptions

from .services import api_token_authenticate
from .throttle import cooloff_minutes, lockout_message, token_attempt_allowed, token_failure_record


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
        if not token_attempt_allowed(request=django_request, key=key):
            raise self._locked_out(django_request)
        token = api_token_authenticate(key=key)
        if token is None:
            token_failure_record(request=django_request, key=key)
            if getattr(django_request, "axes_locked_out", False):
                # This failure was the one over the limit: answer it here, as JSON (axes' middleware
                # would turn a flagged request into the login page's lockout).
                django_request.axes_locked_out = False
                raise self._locked_out(django_request)
            raise exceptions.AuthenticationFailed("Invalid token.")
        return token.user, token

    @staticmethod
    def _locked_out(django_request) -> exceptions.Throttled:
        return exceptions.Throttled(wait=cooloff_minutes(django_request) * 60,
                                    detail=lockout_message(django_request, what="failed API tokens"))

    def authenticate_header(self, request) -> str:
        return self.keyword
