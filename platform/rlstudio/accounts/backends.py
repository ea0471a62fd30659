"""The authentication backend that refuses logins while the account or the address is locked out.

django-axes' standalone backend, first in AUTHENTICATION_BACKENDS: it authenticates nobody itself
(ModelBackend after it checks the password), it raises PermissionDenied for a locked-out
username or address, so that even the right password is refused (rlstudio.accounts.throttle).
"""
from axes.backends import AxesStandaloneBackend


class ThrottledLoginBackend(AxesStandaloneBackend):
    """AxesStandaloneBackend for web logins; `authenticate()` without a request passes through.

    Without a request there is no client address and no web login to throttle: `manage.py`
    commands, the shell and the test client's `login()` call `authenticate(username=, password=)`
    that way (axes would raise instead)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
