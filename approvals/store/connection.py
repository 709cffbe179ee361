"""Creating the one Redis client a process uses (bounded blocking pool, sane timeouts).

Internal to approval-bot (not a stable API); agents import from `approvals`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from redis.asyncio import BlockingConnectionPool, Redis

#: Connections one client may open; callers past it wait (up to `pool_timeout`).
DEFAULT_MAX_CONNECTIONS = 32
#: How long one store operation may wait for Redis before it fails as `StoreUnavailable` (a
#: frozen Redis or a silent partition then gives a quick 503 / deny instead of a hang). It is
#: an asyncio timeout around each `ApprovalStore` call, not redis-py's `socket_timeout`:
#: measured with redis-py 8.1, a finite `socket_timeout` makes a cancelled command carry on
#: (task cancellation is lost), so shutdown hangs; and it would cut blocking reads.
DEFAULT_COMMAND_TIMEOUT = 3.0


def connect(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = 20.0,
    client_name: str | None = "approval-bot",
    socket_timeout: float | None = None,
) -> Redis:
    """A client on a bounded *blocking* pool.

    redis-py's default pool raises `MaxConnectionsError` when exhausted; this
    one makes callers wait instead. `socket_timeout` is off by default: blocking
    commands (XREADGROUP BLOCK, pub/sub reads) are bounded by their own timeouts,
    and store operations by `DEFAULT_COMMAND_TIMEOUT`; connects still time out.
    """
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=30,
        client_name=client_name,
        decode_responses=True,
    )
    return Redis.from_pool(pool)  # closing the client closes the pool


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel `tasks` and wait until each has really ended.

    A cancellation that lands inside a bounded Redis call (a socket timeout, or a timeout
    around the call racing the cancel) can come out as a `TimeoutError` on Python 3.11 (the
    cancellation is lost), which a loop that survives Redis errors treats as a failure and goes
    on: so cancel again until the task is done.
    """
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
