"""Reads of the accounts app."""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from .models import ApiToken


def api_token_list_for(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    """The user's own tokens, newest first (staff too see only their own here)."""
    return ApiToken.objects.filter(user=user).order_by("-created")


def api_token_get_for(*, user: AbstractBaseUser, token_id: int) -> ApiToken:
    """One of the user's own tokens, or 404."""
    token = api_token_list_for(user=user).filter(pk=token_id).first()
    if token is None:
        raise Http404("No such token")
    return token
