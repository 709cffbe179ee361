"""Graceful shutdown (SIGTERM): stop taking work, answer what is parked, finish what is in hand.

While `Bot.drain(grace)` runs (`ctx.draining` set), new requests are refused
(`shutting_down_response`: 503 `shutting_down`, `Retry-After: 1`) and a call waiting on a
reviewer ends with `Drained` (`unless_draining`, or the Waiter's `interrupt`): a parked
long-poll answers the same 503 at once, the Claude Code http hook denies naming the restart
(`HOOK_DENY`). The drain is bounded by `grace` (`APPROVALS_SHUTDOWN_GRACE`). What each part
does: docs/ARCHITECTURE.md, "Draining and stopping".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from aiohttp import web

T = TypeVar("T")

CODE = "shutting_down"
MESSAGE = "this replica of the approval bot is shutting down; retry (another replica will answer)"
#: What a hook caller (an agent) reads when the bot restarts under it.
HOOK_DENY = (
    "Approval service is restarting, so this tool call was not reviewed and is denied. "
    "Try it again in a few seconds."
)


class Drained(Exception):
    """The bot began shutting down while this call waited."""


async def unless_draining(draining: asyncio.Event, work: Awaitable[T]) -> T:
    """`work`'s result, or `Drained` (and `work` cancelled) once `draining` is set."""
    if draining.is_set():
        if asyncio.iscoroutine(work):
            work.close()
        raise Drained()
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(draining.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise Drained()


def shutting_down_response() -> web.Response:
    return web.json_response(
        {"error": {"code": CODE, "message": MESSAGE}},
        status=503,
        headers={"Retry-After": "1"},
    )
