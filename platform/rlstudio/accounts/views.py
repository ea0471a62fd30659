"""Pages of the accounts app: the profile page with personal API tokens and the user's teams, and the
user's own password change."""
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST

from .selectors import api_token_get_for, api_token_list_for
from .services import ApiTokenRefused, api_token_create, api_token_revoke, audit_record
from .throttle import lockout_message, password_check_allowed, password_failure_record
from .teams import teams_of


@login_required
def profile(request):
    """The user's profile: their API tokens (a token just created is shown once, from the session) and
    their teams with each team's members."""
    new_key = request.session.pop("new_api_token_key", None)
    return render(
        request,
        "accounts/profile.html",
        {"tokens": api_token_list_for(user=request.user), "new_key": new_key, "teams": teams_of(user=request.user)},
    )


@login_required
@require_POST
def token_create(request):
    """Create a token and show its key once on the profile page (post/redirect/get); past the cap, the
    profile page again with the reason on the `name` field (400)."""
    try:
        created = api_token_create(user=request.user, name=request.POST.get("name", ""))
    except ApiTokenRefused as exc:
        return render(request, "accounts/profile.html",
                      {"tokens": api_token_list_for(user=request.user), "new_key": None,
                       "teams": teams_of(user=request.user),
                       "token_error": {"field": exc.field, "message": exc.message}}, status=400)
    # The key passes through the session for one page view only (popped by `profile`).
    request.session["new_api_token_key"] = created.key
    return redirect("accounts:profile")


@login_required
@require_POST
def token_revoke(request, token_id: int):
    """Revoke one of the user's tokens (another user's answers 404)."""
    token = api_token_get_for(user=request.user, token_id=token_id)
    api_token_revoke(token=token, by=request.user)
    messages.success(request, f"Token {token.key_prefix}… revoked.")
    return redirect("accounts:profile")


class PasswordChange(auth_views.PasswordChangeView):
    """The user changes their own password (the old one, then the new one twice, checked by the
    site's AUTH_PASSWORD_VALIDATORS): back to the profile with a message, the change audited as
    `account.password_change`. Django keeps this session signed in and signs out the user's other
    sessions (their session hash no longer matches); API tokens are not touched. A refused form
    answers 400 with the reason under its field. A wrong old password counts as a failed login of the
    account (`accounts.throttle`): once locked out, 429 with the reason on the old password's field."""

    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("accounts:profile")

    def form_valid(self, form):
        response = super().form_valid(form)
        audit_record(actor=self.request.user, action="account.password_change", obj=self.request.user)
        messages.success(self.request, "Password changed. Your other sessions are signed out; your API tokens "
                                       "still work (revoke them below if they may have leaked).")
        return response

    def post(self, request, *args, **kwargs):
        if not password_check_allowed(request=request, user=request.user):
            return self._locked_out(self.get_form_class()(user=request.user))  # no password is checked
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        if form.has_error("old_password", "password_incorrect") and password_failure_record(
                request=self.request, user=self.request.user):
            return self._locked_out(form)
        response = super().form_invalid(form)
        response.status_code = 400
        return response

    def _locked_out(self, form):
        """429: the account or this address is locked out (wrong old passwords count as failed logins,
        `accounts.throttle`), with the message on the old password's field."""
        message = lockout_message(self.request, what="wrong passwords")
        response = self.render_to_response(self.get_context_data(form=form, locked_out=message))
        response.status_code = 429
        return response
