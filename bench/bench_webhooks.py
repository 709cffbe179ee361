"""Benchmark: decision → signed webhook received, beside decision → long-poll answered, in one run.

    .venv/bin/python -m bench.bench_webhooks [--requests 300] [--concurrency 20] [--redis-url URL]

The real `Bot` (aiohttp app, HTTP API, webhook worker; Slack off) runs in this
process on real Redis. Each cycle: an agent creates a request over the HTTP API
with a `callback` to a local receiver and starts a long-poll (`GET ?wait=30`) on
it; then the request is decided through the store's compare-and-set (the path a
Slack click or the CLI takes). Measured from just before `resolve()`:

- *long-poll*: until the agent's `GET ?wait=` response has been read;
- *webhook*: until the receiver's handler has the request (signature verified
  with `standardwebhooks` right after the stamp).

Bot, receiver and agents share one event loop, so both figures include the
others' CPU. Prints a table, then one JSON line. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from typing import Any

import aiohttp
from aiohttp import web
from standardwebhooks import Webhook

from approvals._internal.policy_file import parse_policy
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.webhooks import WebhookSecrets
from approvals.models import Decision
from bench.common import (
    add_redis_arguments,
    delete_prefix,
    machine,
    redis_server,
    server_name,
    summarize_ms,
    table,
)
from bot.core.app import Bot, BotConfig
from bot.workers.webhooks import WebhookOptions

API_TOKEN = "bench-token"
#: The principal the API token names: its secret signs the webhooks.
PRINCIPAL = "bench"


class Receiver:
    """Stamps each webhook's arrival by request id, then verifies its signature."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.webhook: Webhook | None = None
        self.bad = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        at = time.perf_counter()
        assert self.webhook is not None
        try:
            payload = self.webhook.verify(body, dict(request.headers))
        except Exception as e:
            self.bad += 1
            # Fail that cycle now (not after its 30 s wait): the bench signs with the wrong secret.
            unverified = json.loads(body).get("data", {}).get("id", "")
            future = self.waiters.get(unverified)
            if future is not None and not future.done():
                future.set_exception(RuntimeError(f"webhook signature did not verify: {e}"))
            return web.Response(status=401)
        request_id = payload["data"]["id"]
        self.arrived[request_id] = at
        future = self.waiters.get(request_id)
        if future is not None and not future.done():
            future.set_result(at)
        return web.Response(status=204)

    def expect(self, request_id: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if request_id in self.arrived:
            future.set_result(self.arrived[request_id])
        self.waiters[request_id] = future
        return future


async def cycle(
    http: aiohttp.ClientSession,
    api: str,
    store: ApprovalStore,
    receiver: Receiver,
    hook_url: str,
    n: int,
) -> tuple[float, float]:
    body = {
        "tool_name": "deploy",
        "arguments": {"n": n},
        "callback": {"url": hook_url},
    }
    async with http.post(f"{api}/v1/approvals", json=body) as resp:
        assert resp.status == 201, await resp.text()
        request_id = (await resp.json())["id"]
    hook = receiver.expect(request_id)

    async def long_poll() -> float:
        async with http.get(f"{api}/v1/approvals/{request_id}?wait=30") as resp:
            data = await resp.json()
        at = time.perf_counter()
        assert data["status"] == "approved", data
        return at

    poll = asyncio.create_task(long_poll())
    await asyncio.sleep(0.05)  # the long-poll is parked in the waiter
    started = time.perf_counter()
    result = await store.resolve(request_id, Decision.approve(by="U0BENCH", via="cli"))
    assert result.won
    polled_at = await asyncio.wait_for(poll, 30)
    hooked_at = await asyncio.wait_for(hook, 30)
    return polled_at - started, hooked_at - started


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    keys = Keys(f"bench-{uuid.uuid4().hex[:10]}")
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hook_url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    policy = parse_policy(
        {"callbacks": {"allowed_hosts": ["127.0.0.1"]}}, source="bench", default_channel="C0BENCH"
    )
    bot = Bot(
        BotConfig(
            redis_url=url,
            prefix=keys.prefix,
            host="127.0.0.1",
            port=0,
            api_tokens=(f"{PRINCIPAL}:{API_TOKEN}",),
            consumer=f"bench-{uuid.uuid4().hex[:6]}",
            webhooks=WebhookOptions(read_block_ms=1000),
        ),
        policy,
    )
    await bot.start()
    redis = connect(url, client_name="bench-webhooks")
    store = ApprovalStore(redis, keys)
    receiver.webhook = Webhook(await WebhookSecrets(redis, keys).current(PRINCIPAL))
    api = f"http://127.0.0.1:{bot.port}"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    limits = aiohttp.TCPConnector(limit=args.concurrency * 3)
    try:
        async with aiohttp.ClientSession(headers=headers, connector=limits) as http:
            for n in range(min(10, args.requests)):  # warm up
                await cycle(http, api, store, receiver, hook_url, -n - 1)
            sem = asyncio.Semaphore(args.concurrency)

            async def one(n: int) -> tuple[float, float]:
                async with sem:
                    return await cycle(http, api, store, receiver, hook_url, n)

            began = time.perf_counter()
            results = await asyncio.gather(*(one(n) for n in range(args.requests)))
            elapsed = time.perf_counter() - began
        assert bot.ctx is not None
        metrics = dict(bot.ctx.metrics)
        return {
            "requests": args.requests,
            "concurrency": args.concurrency,
            "elapsed_s": round(elapsed, 2),
            "long_poll": summarize_ms([p for p, _ in results]),
            "webhook": summarize_ms([h for _, h in results]),
            "webhook_attempts": metrics.get("webhook_attempts", 0),
            "webhook_bad_signatures": receiver.bad,
            "redis": await server_name(redis),
            "machine": machine(),
        }
    finally:
        await bot.stop()
        await delete_prefix(redis, keys)
        await redis.aclose()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    add_redis_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with redis_server(args.redis_url, embedded=args.embedded) as url:
        report = asyncio.run(run(args, url))
    rows = [
        [name, s["min_ms"], s["p50_ms"], s["p99_ms"], s["max_ms"]]
        for name, s in (("long-poll", report["long_poll"]), ("webhook", report["webhook"]))
    ]
    print(
        f"decision → agent told, {report['requests']} requests at concurrency "
        f"{report['concurrency']} ({report['elapsed_s']} s, {report['redis']})"
    )
    print(table(["path", "min ms", "p50 ms", "p99 ms", "max ms"], rows))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
