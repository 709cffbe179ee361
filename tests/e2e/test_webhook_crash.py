"""A webhook in flight when its bot process is SIGKILLed is delivered after a restart, with
the same webhook-id (a real bot process, real Redis, a real receiver)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.webhooks import DEFAULT_PRINCIPAL, Deliveries, WebhookSecrets
from approvals.models import ApprovalEvent, Decision
from approvals.webhooks import Callback
from tests.support.webhook_receiver import Reply, WebhookReceiver

REPO = Path(__file__).resolve().parents[2]

#: One bot process: no Slack, the webhook worker on short timers, callbacks to loopback.
BOT = """
import asyncio, sys
from approvals._internal.policy_file import parse_policy
from bot.core.app import Bot, BotConfig
from bot.workers.webhooks import WebhookOptions

async def main():
    policy = parse_policy({"callbacks": {"allowed_hosts": ["127.0.0.1"]}}, source="test",
                          default_channel="C0APPROVALS")
    options = WebhookOptions(timeout=2.0, claim_idle_ms=500, read_block_ms=100,
                             backoff_base=0.1, retry_poll_interval=0.1)
    bot = Bot(BotConfig(redis_url=sys.argv[1], prefix=sys.argv[2], host="127.0.0.1", port=0,
                        consumer=sys.argv[3], webhooks=options), policy)
    await bot.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture
async def bots(redis_url: str, keys: Keys) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs: list[asyncio.subprocess.Process] = []
    yield procs
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def start_bot(
    redis_url: str, keys: Keys, procs: list[asyncio.subprocess.Process]
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        BOT,
        redis_url,
        keys.prefix,
        f"bot-{uuid.uuid4().hex[:6]}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    procs.append(proc)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"ready", line
    return proc


@pytest.mark.slow(reason="a real SIGKILL of `serve` mid-delivery and a restart")
async def test_delivery_in_flight_at_sigkill_is_delivered_after_restart(
    redis_url: str, keys: Keys, store: ApprovalStore, bots: list[asyncio.subprocess.Process]
) -> None:
    policy = parse_policy(
        {"callbacks": {"allowed_hosts": ["127.0.0.1"]}}, source="t", default_channel="C0APPROVALS"
    )
    service = ApprovalService(store, policy)
    # The first request is held open (the bot is mid-POST when it dies); later ones get 200.
    async with WebhookReceiver(Reply(hold=True)) as receiver:
        first = await start_bot(redis_url, keys, bots)
        request = await service.submit(
            ApprovalEvent(tool_name="deploy"), callback=Callback(url=receiver.url)
        )
        assert (await store.resolve(request.id, Decision.approve(by="U0R", via="cli"))).won
        await receiver.wait_for(1, timeout=20)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        deliveries = Deliveries(store.redis, keys)
        in_flight = await deliveries.get(request.id)
        assert in_flight is not None and in_flight.status == "pending"  # never recorded
        await start_bot(redis_url, keys, bots)
        got = await receiver.wait_for(2, timeout=20)
        for _ in range(200):
            delivery = await deliveries.get(request.id)
            if delivery is not None and delivery.status == "delivered":
                break
            await asyncio.sleep(0.05)
        assert delivery is not None and delivery.status == "delivered"
        assert receiver.ids() == [f"msg_{request.id}"] * 2
        secret = await WebhookSecrets(store.redis, keys).current(DEFAULT_PRINCIPAL)
        payload = Webhook(secret).verify(got[1].body, got[1].headers)
        assert payload["data"]["status"] == "approved"
        assert await deliveries.queue.pending_count() == 0
