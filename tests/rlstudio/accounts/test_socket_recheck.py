"""accounts.sockets.RecheckedSocket on its own (no socket, no database): `recheck` asks the consumer's
`still_allowed` and, when the access is gone, leaves the groups and closes with 4403, the same for a
group message (`user_changed`) and the periodic re-check; the periodic re-check runs every
RLSTUDIO_SOCKET_RECHECK_S, keeps going through a check that fails (logged), ends when the socket is
closed, and never outlives the consumer. The consumers' use of it (4403 on a bulk update or a sharing
change without a message) is tested with their sockets: telemetry/test_consumers.py,
alerts/test_consumer.py, playground/test_playground_stream.py."""
import asyncio
import logging

from rlstudio.accounts.sockets import RecheckedSocket


class _Consumer:
    """Stands for Channels' consumer: `__call__` runs until the client's message arrives."""

    async def __call__(self, scope, receive, send):
        await receive()


class _Socket(RecheckedSocket, _Consumer):
    """A consumer whose access answers come from `answers` (an exception is raised), recording the
    groups it leaves and the codes it closes with."""

    def __init__(self, answers=None, *, held: bool = False):
        self.answers = list(answers or [])
        self.asked, self.left, self.closed = 0, 0, []
        # `held`: each check says it has begun (`asking`) and answers only once `release` is set
        self.asking = asyncio.Event() if held else None
        self.release = asyncio.Event() if held else None

    async def still_allowed(self) -> bool:
        self.asked += 1
        if self.asking is not None:
            self.asking.set()
            await self.release.wait()
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def leave_socket_groups(self) -> None:
        self.left += 1

    async def still_signed_in(self) -> bool:  # no scope here: signed in throughout
        return True

    async def close(self, code=None):
        self.closed.append(code)


def _rechecks() -> int:
    return sum(t.get_coro().__qualname__ == "_recheck_every" for t in asyncio.all_tasks())


def test_a_failing_check_is_logged_and_tried_again_until_the_socket_closes(settings, caplog):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.05

    async def scenario():
        socket = _Socket([RuntimeError("database down"), True, False, True])
        socket.recheck_start(what="test socket")
        task = socket._recheck
        await asyncio.wait_for(task, timeout=5)
        await asyncio.sleep(0.2)
        return socket, task.cancelled(), _rechecks()

    with caplog.at_level(logging.WARNING, logger="rlstudio.accounts.sockets"):
        socket, cancelled, left = asyncio.run(scenario())
    assert socket.asked == 3  # raised, stayed open, closed: no fourth check
    assert socket.revoked and socket.left == 1 and socket.closed == [4403]
    assert not cancelled and left == 0
    assert "test socket: access re-check failed: RuntimeError('database down')" in caplog.text


def test_a_group_message_and_the_periodic_recheck_close_the_same_way(settings):
    """`user_changed` (the group message) and the periodic task both run `recheck`: access gone, the
    socket is marked revoked, leaves its groups once and is closed with 4403 once; checks after that
    (another message, the next interval) ask nothing and close nothing again."""

    async def scenario():
        by_message, by_interval = _Socket([False]), _Socket([True, False])
        settings.RLSTUDIO_SOCKET_RECHECK_S = 60  # the message comes first: no periodic check meanwhile
        by_message.recheck_start(what="by message")
        await by_message.user_changed({"type": "user.changed"})
        await by_message.user_changed({"type": "user.changed"})
        settings.RLSTUDIO_SOCKET_RECHECK_S = 0.05
        by_interval.recheck_start(what="by interval")
        await asyncio.wait_for(by_interval._recheck, timeout=5)
        await by_interval.user_changed({"type": "user.changed"})
        by_message.recheck_stop()
        return by_message, by_interval

    by_message, by_interval = asyncio.run(scenario())
    for socket, asked in ((by_message, 1), (by_interval, 2)):
        assert (socket.revoked, socket.left, socket.closed, socket.asked) == (True, 1, [4403], asked)


def test_a_socket_closed_during_the_check_is_neither_left_nor_closed_again(settings):
    """The access read is slow and the socket disconnects meanwhile (`recheck_stop`): the answer that
    the access is gone closes nothing; a socket never started (its connect refused) is not checked.
    The read is held until the socket has stopped (events, no timing), so a slow loop cannot reorder it."""
    settings.RLSTUDIO_SOCKET_RECHECK_S = 60

    async def scenario():
        socket = _Socket([False], held=True)
        socket.recheck_start(what="slow")
        check = asyncio.ensure_future(socket.recheck())
        await asyncio.wait_for(socket.asking.wait(), timeout=30)  # the check is reading the access
        socket.recheck_stop()
        socket.release.set()
        still_open = await asyncio.wait_for(check, timeout=30)
        never = _Socket([False])
        return socket, still_open, never, await never.recheck()

    socket, still_open, never, never_open = asyncio.run(scenario())
    assert still_open is False and socket.asked == 1 and (socket.left, socket.closed) == (0, [])
    assert never_open is False and (never.asked, never.left, never.closed) == (0, 0, [])


def test_the_recheck_ends_on_stop_and_when_the_consumer_ends(settings):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.05

    async def scenario():
        stopped = _Socket()
        stopped.recheck_start(what="stopped")
        await asyncio.sleep(0.2)
        first = stopped._recheck
        stopped.recheck_stop()
        await asyncio.sleep(0)
        seen = {"after stop": (first.cancelled(), _rechecks())}
        queue: asyncio.Queue = asyncio.Queue()
        for ending in ("returns", "cancelled"):
            socket = _Socket()
            running = asyncio.ensure_future(socket(None, queue.get, None))
            await asyncio.sleep(0)
            socket.recheck_start(what=ending)
            await asyncio.sleep(0.2)
            assert _rechecks() == 1
            if ending == "returns":
                await queue.put({"type": "websocket.disconnect"})
                await running
            else:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            await asyncio.sleep(0)
            seen[ending] = (socket._recheck, _rechecks())
        return seen

    seen = asyncio.run(scenario())
    assert seen == {"after stop": (True, 0), "returns": (None, 0), "cancelled": (None, 0)}
