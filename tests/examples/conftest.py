"""Fixtures for the recipes in `examples/`: a bot API and webhook worker on real Redis with
callbacks allowed to loopback, and a way to serve a recipe's webhook handler over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from approvals._internal.policy_file import parse_policy
from approvals._internal.store.webhooks import WebhookSecrets
from bot.core.context import BotContext
from bot.http.principals import derived_name
from bot.workers.webhooks import WebhookOptions, WebhookWorker
from tests.support.credentials import API_TOKEN

FAST = WebhookOptions(
    timeout=5.0,
    claim_idle_ms=1000,
    read_block_ms=100,
    backoff_base=0.05,
    backoff_max=0.2,
    retry_poll_interval=0.05,
)

#: A recipe's handler: (headers, body) → (status, text), sync or async.
Handler = Callable[[dict[str, str], str], Awaitable[tuple[int, str]]]


@pytest.fixture
async def webhooks(ctx: BotContext) -> AsyncIterator[WebhookWorker]:
    """The webhook worker, with callbacks allowed to 127.0.0.1 only."""
    ctx.service.policy = parse_policy(
        {"callbacks": {"allowed_hosts": ["127.0.0.1"]}}, source="t", default_channel="C0APPROVALS"
    )
    worker = WebhookWorker(ctx, "examples", FAST)
    await worker.start()
    yield worker
    await worker.stop()


@pytest.fixture
async def secret(ctx: BotContext) -> str:
    # Webhooks are signed with the asking principal's secret: here the test token's.
    return await WebhookSecrets(ctx.redis, ctx.keys).current(derived_name(API_TOKEN))


@pytest.fixture
async def serve_handler() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Serve `handler` at `http://127.0.0.1:<port>/hook`; returns the URL."""
    runners: list[web.AppRunner] = []

    async def serve(handler: Handler) -> str:
        async def route(request: web.Request) -> web.Response:
            status, text = await handler(dict(request.headers), await request.text())
            return web.Response(status=status, text=text)

        app = web.Application()
        app.router.add_post("/hook", route)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/hook"

    yield serve
    for runner in runners:
        await runner.cleanup()
