"""Review findings on waiting: lazy start under concurrency, transient store errors, the tick."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from approvals.connection import connect
from approvals.keys import Keys
from approvals.models import ApprovalEvent, ApprovalRequest, Decision
from approvals.store import ApprovalStore
from approvals.waiting import Waiter
from tests.approvals.redis_proxy import RedisProxy


async def test_concurrent_first_waits_start_one_subscription(
    store: ApprovalStore, redis_url: str, keys: Keys, redis: Redis
) -> None:
    ids = [
        (await store.create(ApprovalRequest(event=ApprovalEvent(tool_name=f"t{i}")))).request.id
        for i in range(20)
    ]
    name = f"lazy-{keys.prefix}"
    wredis = connect(redis_url, max_connections=8, client_name=name)
    waiter = Waiter(wredis, keys, store=store)  # never started: wait() starts it
    try:
        tasks = [asyncio.create_task(waiter.wait(rid, timeout=10)) for rid in ids]
        await asyncio.sleep(0.2)
        subscribed = [
            c for c in await redis.client_list() if c.get("name") == name and int(c["sub"]) > 0
        ]
        assert len(subscribed) == 1, f"{len(subscribed)} pub/sub connections for one waiter"
        for rid in ids:
            await store.resolve(rid, Decision.approve(by="U1"))
        assert [r.status for r in await asyncio.gather(*tasks)] == ["approved"] * 20
    finally:
        await waiter.stop()
        await wredis.aclose()
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("waiter-")]
    assert leftover == [], f"tasks left running after stop: {leftover}"


async def test_decision_published_while_cut_off_is_read_on_resubscribe(
    store: ApprovalStore, redis_url: str, keys: Keys
) -> None:
    """Deterministic: the publish happens while the waiter cannot reach Redis at all, and the
    periodic re-read is off, so only the re-read after resubscribing can deliver it."""
    (rid,) = [(await store.create(ApprovalRequest(event=ApprovalEvent(tool_name="t")))).request.id]
    via = RedisProxy(redis_url)
    async with via as url:
        wredis = connect(url, max_connections=4)
        waiter = Waiter(wredis, keys, recheck_interval=3600)
        await waiter.start()
        try:
            task = asyncio.create_task(waiter.wait(rid, timeout=20))
            await asyncio.sleep(0.1)
            via.cut()
            await asyncio.sleep(0.1)
            await store.resolve(rid, Decision.approve(by="U1", input="while away"))
            await asyncio.sleep(0.3)
            assert not task.done()
            via.restore()
            req = await asyncio.wait_for(task, timeout=15)
            assert req.decision is not None and req.decision.input == "while away"
            assert waiter.subscriptions >= 2
        finally:
            await waiter.stop()
            await wredis.aclose()


async def test_a_failed_read_is_retried_not_dropped(
    store: ApprovalStore, redis: Redis, redis_url: str, keys: Keys
) -> None:
    """The subscription stays up; only the reads fail for a moment (StoreUnavailable).
    The waiter must retry them, not wait for the (here: hour-long) periodic tick."""
    (rid,) = [(await store.create(ApprovalRequest(event=ApprovalEvent(tool_name="t")))).request.id]
    await store.resolve(rid, Decision.deny("before the wait", by="U1"))  # no message will come
    via = RedisProxy(redis_url)
    async with via as url:
        rredis = connect(url, max_connections=4)
        waiter = Waiter(redis, keys, store=ApprovalStore(rredis, keys), recheck_interval=3600)
        await waiter.start()
        try:
            via.cut()
            task = asyncio.create_task(waiter.wait(rid, timeout=30))
            await asyncio.sleep(0.5)
            assert not task.done()
            via.restore()
            req = await asyncio.wait_for(task, timeout=25)
            assert req.status == "denied"
        finally:
            await waiter.stop()
            await rredis.aclose()


async def test_the_periodic_re_read_finds_a_decision_whose_message_never_came(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    (rid,) = [(await store.create(ApprovalRequest(event=ApprovalEvent(tool_name="t")))).request.id]
    async with Waiter(redis, keys, store=store, recheck_interval=0.2) as waiter:
        task = asyncio.create_task(waiter.wait(rid, timeout=10))
        await asyncio.sleep(0.1)
        # The decision lands without its PUBLISH (as if the message was lost in transit).
        decision = Decision.approve(by="U1", input="silent")
        await redis.hset(
            keys.request(rid),
            mapping={"status": "approved", "decision": decision.model_dump_json()},
        )
        req = await asyncio.wait_for(task, timeout=5)
    assert req.decision is not None and req.decision.input == "silent"
