"""Review findings on the store: a stale call-id marker replaced by two replicas at once,
votes against an escalated request, request size limits."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from approvals.connection import connect
from approvals.errors import PayloadTooLarge
from approvals.keys import Keys
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision, SlackMessage
from approvals.outbox import Outbox
from approvals.store import ApprovalStore
from tests.approvals.redis_proxy import RedisProxy


def make_request(call_id: str | None = None, **kw: object) -> ApprovalRequest:
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id=call_id)
    return ApprovalRequest(event=event, **kw)  # type: ignore[arg-type]


async def test_two_replicas_replacing_a_stale_call_id_marker_make_one_request(
    store: ApprovalStore, redis: Redis, redis_url: str, keys: Keys
) -> None:
    stale = (await store.create(make_request(call_id="retry-me"))).request
    await redis.delete(keys.request(stale.id))  # the request expired; its marker did not
    proxy = RedisProxy(redis_url)
    async with proxy as url:
        slow_redis = connect(url, max_connections=1)  # one connection: commands in order
        try:
            slow = ApprovalStore(slow_redis, keys)
            # Replica B stalls right after it found the marker's request gone.
            proxy.hold_after(b"HGETALL")
            b = asyncio.create_task(slow.create(make_request(call_id="retry-me")))
            await asyncio.wait_for(proxy.holding.wait(), 5)
            a = await store.create(make_request(call_id="retry-me"))  # replica A goes ahead
            proxy.release()
            b_result = await asyncio.wait_for(b, 5)
        finally:
            await slow_redis.aclose()
    assert a.created
    assert b_result.request.id == a.request.id, "one call_id, one request"
    assert await redis.get(keys.call("retry-me")) == a.request.id
    posts = [f["id"] for _, f in await redis.xrange(keys.outbox) if f["op"] == "post"]
    assert posts.count(a.request.id) == 1 and b_result.request.id in posts
    assert len(posts) == 2, f"one post for the stale request, one for the new: {posts}"


async def test_a_vote_checked_before_an_escalation_is_not_recorded_after_it(
    store: ApprovalStore,
) -> None:
    req = (
        await store.create(make_request(config=ApprovalConfig(deadline_seconds=5), quorum=2))
    ).request
    assert req.deadline_at is not None
    assert await store.escalate(
        req,
        route="oncall",
        channel="C0ONCALL",
        deadline_at=req.deadline_at + timedelta(minutes=5),
        quorum=1,
        reviewers=["U0BOSS"],
    )
    late = await store.vote(req.id, "U0ANN", "approve", expected_escalations=0)
    assert late.status == "moved"
    assert late.request.status == "pending" and late.request.votes == ()
    fresh = await store.vote(req.id, "U0BOSS", "approve", expected_escalations=1)
    assert fresh.status == "decided" and fresh.request.status == "approved"


async def test_oversized_metadata_is_rejected_and_nothing_written(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    request = make_request(metadata={"transcript": "x" * (256 * 1024 + 1)})
    with pytest.raises(PayloadTooLarge, match="metadata"):
        await store.create(request)
    assert [k async for k in redis.scan_iter(match=keys.pattern())] == []


async def test_after_an_escalation_the_indexes_outlive_the_new_deadline(
    redis: Redis, keys: Keys
) -> None:
    """An escalation chain can keep a request pending for longer than the retention window
    since the last create: the deadline index (and the streams the escalation writes to) must
    not expire before the new deadline, or the request is never swept and its waiter hangs."""
    short = Keys(prefix=keys.prefix, retention_seconds=100)  # same prefix: cleaned by `keys`
    store = ApprovalStore(redis, short)
    req = (await store.create(make_request(config=ApprovalConfig(deadline_seconds=50)))).request
    assert req.deadline_at is not None
    new_deadline = store.now() + timedelta(seconds=1000)
    assert await store.escalate(
        req, route="oncall", channel="C0ONCALL", deadline_at=new_deadline, quorum=1, reviewers=[]
    )
    for key in (short.deadlines, short.pending, short.outbox, short.audit):
        assert await redis.ttl(key) >= 1000, f"{key} expires before the new deadline"
    assert await redis.ttl(short.request(req.id)) >= 1000


async def test_every_key_any_store_operation_writes_has_a_ttl(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    outbox = Outbox(redis, keys, "c1")
    await outbox.ensure_group()
    a = await store.create(make_request(call_id="a", config=ApprovalConfig(deadline_seconds=5)))
    b = (await store.create(make_request(quorum=2))).request
    c = (await store.create(make_request())).request
    await store.create(make_request(call_id="d"), decision=Decision.deny("policy", via="policy"))
    await store.set_message(a.request.id, SlackMessage(channel="C1", ts="1.2"))
    assert a.request.deadline_at is not None
    await store.escalate(
        a.request,
        route="oncall",
        channel="C2",
        deadline_at=a.request.deadline_at + timedelta(minutes=5),
        quorum=1,
        reviewers=["U9"],
    )
    await store.vote(b.id, "U1", "approve")
    await store.cancel(c.id, by="agent")
    await store.put_grant("s1", "deploy", c, 60)
    entries = await outbox.read(count=100, block_ms=10)
    await outbox.ack(*(e.entry_id for e in entries))
    written = [k async for k in redis.scan_iter(match=keys.pattern(), count=1000)]
    assert {k.rsplit(":", 1)[-1] for k in written} >= {"outbox", "audit", "deadlines", "pending"}
    no_ttl = [k for k in written if await redis.ttl(k) <= 0]
    assert no_ttl == [], f"keys without a TTL: {no_ttl}"
