"""Reads of the operator registries: staff see every entry, other users the ready ones (what they
may choose); an entry a user may not see looks absent (Http404)."""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from .models import RegistryStatus, RewardFunction, ToolSet


def _visible(queryset: QuerySet, *, user: AbstractBaseUser) -> QuerySet:
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    return queryset if user.is_staff else queryset.filter(status=RegistryStatus.READY)


def _get(queryset: QuerySet, *, user: AbstractBaseUser, name):
    item = _visible(queryset, user=user).filter(name=str(name)).first()
    if item is None:
        raise Http404("Not found")
    return item


def reward_function_list_for(*, user: AbstractBaseUser) -> QuerySet[RewardFunction]:
    """Reward functions the user may see, by name (staff: all, with their status)."""
    return _visible(RewardFunction.objects.select_related("created_by"), user=user).order_by("name")


def reward_function_get_for(*, user: AbstractBaseUser, name) -> RewardFunction:
    return _get(RewardFunction.objects.select_related("created_by"), user=user, name=name)


def tool_set_list_for(*, user: AbstractBaseUser) -> QuerySet[ToolSet]:
    """Tool sets the user may see, by name (staff: all, with their status)."""
    return _visible(ToolSet.objects.select_related("created_by"), user=user).order_by("name")


def tool_set_get_for(*, user: AbstractBaseUser, name) -> ToolSet:
    return _get(ToolSet.objects.select_related("created_by"), user=user, name=name)


def reward_function_ready(*, name: str) -> RewardFunction | None:
    """The ready reward function `name`, or None (the dataset page's reward check)."""
    return RewardFunction.objects.filter(name=name, status=RegistryStatus.READY).first()
