"""Graceful shutdown (SIGTERM): stop taking work, answer what is parked, finish what is in hand.

`Bot.drain(grace)` sets `ctx.draining`; from then on:

- `/healthz` answers 503 `{"draining": true}`, so a load balancer or Kubernetes readiness
  probe stops sending this replica new calls;
- `POST /v1/approvals` answers 503 `shutting_down` with `Retry-After: 1` (retry, on
  another replica or this one restarted); a parked `GET /v1/approvals/{id}?wait=` is
  answered the same way at once — `ApprovalClient` treats a 503 as a blip and polls
  again, so its agent keeps waiting for the same request;
- the Claude Code http hook answers a clean **deny** naming the restart (fail closed: the
  agent is told, nothing runs unreviewed); its request stays pending until its deadline
  (the hook's own timeout), so a reviewer's click still lands in the audit trail;
- the dispatcher reads no more outbox entries and finishes (and acks) those in hand; the
  webhook worker lets attempts under way finish; then everything stops.

The whole drain is bounded by `grace` (`APPROVALS_SHUTDOWN_GRACE`, default 10 s; keep it
under the platform's own kill timeout, e.g. Kubernetes' `terminationGracePeriodSeconds`).
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
