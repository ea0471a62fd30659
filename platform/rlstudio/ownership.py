"""The one ownership rule: a user sees their own objects, staff see everyone's.

Another user's object must look absent (404), never forbidden (403), so selectors filter with
`owned_by_or_staff` before looking anything up.
"""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model, QuerySet
from django.http import Http404


def owned_by_or_staff(queryset: QuerySet, *, user: AbstractBaseUser, field: str = "owner") -> QuerySet:
    """`queryset` narrowed to what `user` may see (`field` names the owner foreign key)."""
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if user.is_staff:
        return queryset
    return queryset.filter(**{field: user})


def get_visible_or_404(queryset: QuerySet, *, user: AbstractBaseUser, pk, field: str = "owner") -> Model:
    """The object `pk` if `user` may see it, else Http404 (also for malformed ids)."""
    try:
        obj = owned_by_or_staff(queryset, user=user, field=field).filter(pk=pk).first()
    except (TypeError, ValueError):
        obj = None
    if obj is None:
        raise Http404("Not found")
    return obj
