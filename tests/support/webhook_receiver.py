"""A webhook receiver for tests: a real aiohttp server on a loopback port that records every
request and answers from a script (status, headers, a delay, or hold the request open)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (past the bot's timeout: a timeout).
    delay: float = 0.0
    #: Never answer (the request stays in flight until the connection drops).
    hold: bool = False


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    path: str


class WebhookReceiver:
    """`async with WebhookReceiver() as r:` — `r.url` to call, `r.received` to inspect."""

    def __init__(self, *replies: Reply, default: Reply | None = None) -> None:
        self.replies = list(replies)
        self.default = default or Reply()
        self.received: list[Received] = []
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def __aenter__(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A held or slow reply never keeps cleanup waiting (aiohttp would wait 60 s).
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with self._arrived:
            self.received.append(
                Received(dict(request.headers), body, time.monotonic(), request.path)
            )
            self._arrived.notify_all()
        reply = self.replies.pop(0) if self.replies else self.default
        if reply.hold:
            await asyncio.Event().wait()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return web.Response(status=reply.status, headers=reply.headers, text="ok")

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:  # noqa: ASYNC109
        """Until `count` requests have arrived (AssertionError naming what came if not)."""
        try:
            async with asyncio.timeout(timeout):
                async with self._arrived:
                    await self._arrived.wait_for(lambda: len(self.received) >= count)
        except TimeoutError:
            raise AssertionError(
                f"expected {count} webhook requests within {timeout}s, got {len(self.received)}"
            ) from None
        return self.received

    def ids(self) -> list[Any]:
        return [r.headers.get("webhook-id") for r in self.received]


async def eventually(check: Callable[[], Any], timeout: float = 15.0) -> Any:  # noqa: ASYNC109
    """Poll `check` (sync or async) until it returns something truthy."""
    end = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"not true within {timeout}s: {check}")
        await asyncio.sleep(0.05)
