"""What tells open run websockets that who may read a run changed, so that they check their user again.

Two causes, each a group message sent after the change commits:
  * a run's sharing changed (`runs.services.run_share`): `run.access_changed` to the run's group,
    through the runs app's `on_access_changed` hook, so that runs never imports telemetry;
  * a user's record was saved (the admin deactivates a user or takes staff away; any save but a
    login's `last_login`): `user.changed` to that user's own sockets group (`accounts.sockets`, which
    every websocket of the user joins, run, playground and notification sockets alike).
`RunConsumer.run_access_changed` / `user_changed` then run `RecheckedSocket.recheck`, the periodic
re-check's own code: read the user from the database and close with 4403 (after leaving its groups)
a socket whose user may no longer read the run. A failed send is logged: the change stays, and
that socket keeps streaming until its next periodic re-check (every RLSTUDIO_SOCKET_RECHECK_S:
`accounts.sockets.RecheckedSocket`, which also catches a change that sent no message at all).
"""
from .broadcast import run_access_changed_send


def connect() -> None:
    """Register the sharing cause (the telemetry app's ready; the user's saves are accounts.sockets')."""
    from rlstudio.runs.services import on_access_changed

    on_access_changed(run_access_changed_send)
