"""What tells open run websockets that who may read a run changed, so that they check their user again.

Two causes, each a `run.access_changed` group message sent after the change commits:
  * a run's sharing changed (`runs.services.run_share`): to the run's group, through the runs app's
    `on_access_changed` hook, so that runs never imports telemetry;
  * a user's record was saved (the admin deactivates a user or takes staff away; any save but a
    login's `last_login`): to that user's own viewer group, which each of their run sockets joins.
`RunConsumer.run_access_changed` then reads the user from the database and closes with 4403 a socket
whose user may no longer read the run. A failed send is logged: the change stays, and that socket keeps
streaming until it reconnects (when the usual admission check refuses it).
"""
import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_save

from .broadcast import run_access_changed_send, user_access_changed_send

log = logging.getLogger(__name__)


def _send_for_user(user_id: int) -> None:
    try:
        user_access_changed_send(user_id)
    except Exception as exc:  # Redis down or hung (or no layer yet, e.g. a bootstrap command): see above
        log.warning("user %s: access-changed message not sent: %r", user_id, exc)


def _user_saved(sender, instance, created=False, update_fields=None, **kwargs) -> None:
    """post_save of the user model: after the commit, tell the user's run sockets to check again."""
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    user_id = instance.pk
    transaction.on_commit(lambda: _send_for_user(user_id))


def connect() -> None:
    """Register both causes (the telemetry app's ready)."""
    from rlstudio.runs.services import on_access_changed

    on_access_changed(run_access_changed_send)
    post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="telemetry.access.user_saved")
