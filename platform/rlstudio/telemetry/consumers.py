"""`RunConsumer`: the websocket `/ws/runs/<id>/` that streams a run's events to its viewers.

Only the run's owner or staff get the stream: anonymous connections are closed with 4401, everyone
else (including for a run that does not exist) with 4403. The socket is accepted before closing so
the browser receives the code (a close before accept becomes a bare HTTP 403).
"""
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from rlstudio.runs.models import Run

from .broadcast import run_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


@database_sync_to_async
def _may_watch(user, run_id: int) -> bool:
    if user.is_staff:
        return Run.objects.filter(pk=run_id).exists()
    return Run.objects.filter(pk=run_id, owner_id=user.pk).exists()


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins group `run.<id>` and forwards its `run.event` messages as JSON text."""

    group: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await _may_watch(user, run_id):
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Join before accepting: a client that sees the accept must not miss an event sent next.
        self.group = run_group(run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message):
        await self.send_json(message["event"])
