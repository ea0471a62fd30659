"""accounts.sockets.RecheckedSocket on its own (no socket, no database): the periodic re-check awaits
the consumer's check every RLSTUDIO_SOCKET_RECHECK_S, keeps going through a check that fails (logged),
ends when the check answers that the socket closed, and never outlives the consumer. The consumers'
use of it (4403 on a bulk update or a sharing change without a message) is tested with their sockets:
telemetry/test_consumers.py, alerts/test_consumer.py, playground/test_playground_stream.py."""
import asyncio
import logging

from rlstudio.accounts.sockets import RecheckedSocket


class _Consumer:
    """Stands for Channels' consumer: `__call__` runs until the client's message arrives."""

    async def __call__(self, scope, receive, send):
        await receive()


class _Socket(RecheckedSocket, _Consumer):
    pass


def _rechecks() -> int:
    return sum(t.get_coro().__qualname__ == "_recheck_every" for t in asyncio.all_tasks())


def test_a_failing_check_is_logged_and_tried_again_until_the_socket_closes(settings, caplog):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.05
    answers = [RuntimeError("database down"), True, False, True]
    calls = []

    async def check() -> bool:
        calls.append(len(calls))
        answer = answers[len(calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario():
        socket = _Socket()
        socket.recheck_start(check, what="test socket")
        task = socket._recheck
        await asyncio.wait_for(task, timeout=5)
        return task.cancelled(), _rechecks()

    with caplog.at_level(logging.WARNING, logger="rlstudio.accounts.sockets"):
        cancelled, left = asyncio.run(scenario())
    assert calls == [0, 1, 2]  # raised, stayed open, closed: no fourth check
    assert not cancelled and left == 0
    assert "test socket: access re-check failed: RuntimeError('database down')" in caplog.text


def test_the_recheck_ends_on_stop_and_when_the_consumer_ends(settings):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.05

    async def stays_open() -> bool:
        return True

    async def scenario():
        stopped = _Socket()
        stopped.recheck_start(stays_open, what="stopped")
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
            socket.recheck_start(stays_open, what=ending)
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
