"""URLs of the accounts app: login, logout, profile, tokens and the user's password change."""
from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("profile/", views.profile, name="profile"),
    path("profile/tokens/", views.token_create, name="token_create"),
    path("profile/tokens/<int:token_id>/revoke/", views.token_revoke, name="token_revoke"),
    path("profile/password/", views.PasswordChange.as_view(), name="password_change"),
]

# Outside the namespace so that settings.LOGIN_URL = "login" resolves.
auth_urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
