"""The Redis store against a real server: create (and a stale call-id marker raced by two
replicas), resolve races, cancel, expiry, votes against an escalation, TTLs, bad input."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from approvals._internal.grant_scopes import Grant
from approvals._internal.store.connection import connect
from approvals._internal.store.digests import SCRIPT_NAMES as DIGEST_SCRIPTS
from approvals._internal.store.grants import GrantStore
from approvals._internal.store.keys import Keys
from approvals._internal.store.outbox import Outbox
from approvals._internal.store.posting import SCRIPT_NAMES as POSTING_SCRIPTS
from approvals._internal.store.store import SCRIPT_NAMES, ApprovalStore, load_script_source
from approvals.errors import NotFound, PayloadTooLarge, StoreUnavailable
from approvals.models import (
    MAX_EVENT_BYTES,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    SlackMessage,
)
from tests.support.redis_proxy import RedisProxy

LUA_FILES = list(
    (Path(__file__).resolve().parents[4] / "approvals/_internal/store/lua").glob("*.lua")
)


def make_request(tool: str = "deploy", call_id: str | None = None, **kw: object) -> ApprovalRequest:
    event = ApprovalEvent(tool_name=tool, arguments={"env": "prod"}, call_id=call_id)
    return ApprovalRequest(event=event, **kw)  # type: ignore[arg-type]


async def all_keys(redis: Redis, keys: Keys) -> list[str]:
    return [k async for k in redis.scan_iter(match=keys.pattern(), count=1000)]


async def test_every_lua_script_loads(redis: Redis) -> None:
    on_disk = {p.stem for p in LUA_FILES}
    # webhook_due: held by Deliveries; begin_post, record_message: by Posting; reap: by Outbox;
    # digest_*: by Digests
    held_elsewhere = {"webhook_due", *POSTING_SCRIPTS, "reap", *DIGEST_SCRIPTS}
    assert set(SCRIPT_NAMES) | held_elsewhere == on_disk
    for name in sorted(on_disk):
        sha = await redis.script_load(load_script_source(name))
        assert len(sha) == 40, name
        assert (await redis.script_exists(sha)) == [True]


async def test_create_writes_request_deadline_outbox_and_audit(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    result = await store.create(make_request(config=ApprovalConfig(deadline_seconds=60)))
    assert result.created
    req = await store.get(result.request.id)
    assert req.status == "pending"
    assert req.prompt == 'Approve deploy(env="prod")?'
    assert req.deadline_at is not None
    assert 59 <= (req.deadline_at - req.created_at).total_seconds() <= 60
    assert await redis.zscore(keys.deadlines, req.id) == pytest.approx(
        req.deadline_at.timestamp(), abs=1e-3
    )
    outbox = await redis.xrange(keys.outbox)
    assert [(f["op"], f["id"]) for _, f in outbox] == [("post", req.id)]
    audit = await store.audit_entries()
    assert [(e.request_id, e.event) for e in audit] == [(req.id, "created")]
    assert [r.id for r in await store.list_pending()] == [req.id]


async def test_create_is_idempotent_on_call_id(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    first = await store.create(make_request(call_id="call-1"))
    second = await store.create(make_request(call_id="call-1"))
    assert first.created and not second.created
    assert second.request.id == first.request.id
    assert len(await redis.xrange(keys.outbox)) == 1, "no second Slack post queued"
    assert len(await store.audit_entries()) == 1
    assert len([k for k in await all_keys(redis, keys) if ":req:" in k]) == 1
    other = await store.create(make_request(call_id="call-2"))
    assert other.created and other.request.id != first.request.id


async def test_concurrent_creates_with_one_call_id_make_one_request(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    results = await asyncio.gather(*(store.create(make_request(call_id="same")) for _ in range(30)))
    assert sum(r.created for r in results) == 1
    assert len({r.request.id for r in results}) == 1
    assert len(await redis.xrange(keys.outbox)) == 1


async def test_stale_call_id_marker_does_not_block_a_new_request(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    first = await store.create(make_request(call_id="c"))
    await redis.delete(keys.request(first.request.id))  # the request expired, the marker did not
    again = await store.create(make_request(call_id="c"))
    assert again.created and again.request.id != first.request.id


async def test_fifty_racing_deciders_one_winner(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    req = (await store.create(make_request())).request
    rng = random.Random(7)

    async def decide(n: int):  # type: ignore[no-untyped-def]
        await asyncio.sleep(rng.random() / 1000)
        kind = n % 3
        if kind == 0:
            return await store.resolve(req.id, Decision.approve(by=f"U{n}", via="slack"))
        if kind == 1:
            return await store.resolve(req.id, Decision.deny(f"no {n}", by=f"U{n}", via="slack"))
        return await store.resolve(
            req.id, Decision.deny("approval timeout", by="system", via="timeout"), status="expired"
        )

    results = await asyncio.gather(*(decide(n) for n in range(50)))
    winners = [r for r in results if r.won]
    assert len(winners) == 1
    final = winners[0].request
    assert final.status in {"approved", "denied", "expired"}
    for loser in (r for r in results if not r.won):
        assert loser.request.status == final.status
        assert loser.request.decision == final.decision, "every loser learns who won"
    transitions = [e for e in await store.audit_entries() if e.event != "created"]
    assert len(transitions) == 1
    assert transitions[0].status == final.status
    assert transitions[0].by == (final.decision.decided_by if final.decision else None)
    assert await redis.zscore(keys.deadlines, req.id) is None
    assert await redis.zscore(keys.pending, req.id) is None


async def test_resolve_unknown_id_is_not_found(store: ApprovalStore) -> None:
    with pytest.raises(NotFound, match="apr_nope"):
        await store.resolve("apr_nope", Decision.approve())
    with pytest.raises(NotFound):
        await store.get("apr_nope")


async def test_cancel_then_decide_loses(store: ApprovalStore) -> None:
    req = (await store.create(make_request())).request
    cancelled = await store.cancel(req.id, by="agent-1", reason="no longer needed")
    assert cancelled.won and cancelled.request.status == "cancelled"
    assert cancelled.request.decision is not None
    assert cancelled.request.decision.reason == "no longer needed"
    late = await store.resolve(req.id, Decision.approve(by="U1"))
    assert not late.won and late.request.status == "cancelled"
    again = await store.cancel(req.id)
    assert not again.won


async def test_a_cancel_for_an_owner_leaves_another_principals_request_alone(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    theirs = (await store.create(make_request(principal="agent-b"))).request
    nobodys = (await store.create(make_request(tool="other"))).request  # no principal
    for request in (theirs, nobodys):
        before = await redis.hgetall(keys.request(request.id))
        with pytest.raises(NotFound):
            await store.cancel(request.id, by="agent-a", owner="agent-a")
        assert await redis.hgetall(keys.request(request.id)) == before  # nothing changed
    with pytest.raises(NotFound):
        await store.cancel("apr_missing", by="agent-a", owner="agent-a")
    mine = await store.cancel(theirs.id, by="agent-b", owner="agent-b")
    assert mine.won and mine.request.status == "cancelled"
    again = await store.cancel(theirs.id, by="agent-b", owner="agent-b")
    assert not again.won and again.request.status == "cancelled"  # decided: 409, not 404


async def test_due_lists_only_overdue_pending(store: ApprovalStore) -> None:
    soon = (await store.create(make_request(config=ApprovalConfig(deadline_seconds=1)))).request
    later = (await store.create(make_request(config=ApprovalConfig(deadline_seconds=600)))).request
    assert await store.due() == []
    assert soon.deadline_at is not None
    due = await store.due(now=soon.deadline_at + timedelta(seconds=1))
    assert due == [soon.id]
    result = await store.resolve(
        soon.id,
        Decision.deny("approval timeout", via="timeout"),
        status="expired",
        expected_deadline=soon.deadline_at,
    )
    assert result.won and result.request.status == "expired"
    assert await store.due(now=soon.deadline_at + timedelta(days=2)) == [later.id]


async def test_expiry_is_conditional_on_the_deadline(store: ApprovalStore) -> None:
    req = (await store.create(make_request(config=ApprovalConfig(deadline_seconds=5)))).request
    assert req.deadline_at is not None
    stale = req.deadline_at - timedelta(seconds=3)
    result = await store.resolve(
        req.id,
        Decision.deny("approval timeout", via="timeout"),
        status="expired",
        expected_deadline=stale,
    )
    assert not result.won and result.request.status == "pending"


async def test_every_key_written_has_a_ttl(store: ApprovalStore, redis: Redis, keys: Keys) -> None:
    a = (await store.create(make_request(call_id="x"))).request
    b = (await store.create(make_request(quorum=2))).request
    await store.resolve(a.id, Decision.approve(by="U1"))
    await store.vote(b.id, "U2", "approve")
    now = store.now()
    grant = Grant(
        principal="p",
        session_id="s1",
        agent=None,
        tool_name="deploy",
        scope="tool",
        label="every `deploy` call",
        route="default",
        request_id=a.id,
        decided_by="U1",
        granted_at=now,
        expires_at=now + timedelta(seconds=60),
    )
    await GrantStore(redis, keys).give(grant)
    written = await all_keys(redis, keys)
    assert len(written) >= 7
    for key in written:
        ttl = await redis.ttl(key)
        assert ttl > 0, f"{key} has no TTL ({ttl})"


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "vote"},
        {"sensitivity": "top-secret"},
        {"kind": "choice"},
        {"kind": "approval", "options": ["a"]},
        {"deadline_seconds": -1},
        {"deadline_seconds": 10**9},
        {"colour": "red"},
    ],
)
def test_invalid_config_is_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ApprovalConfig.model_validate(bad)


@pytest.mark.parametrize("arguments", [[1, 2], "rm -rf /", 42, None])
def test_arguments_must_be_an_object(arguments: object) -> None:
    with pytest.raises(ValidationError, match="arguments must be a JSON object"):
        ApprovalEvent(tool_name="x", arguments=arguments)  # type: ignore[arg-type]


async def test_oversized_request_is_rejected_and_nothing_written(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    event = ApprovalEvent(tool_name="upload", arguments={"blob": "x" * (MAX_EVENT_BYTES + 1)})
    with pytest.raises(PayloadTooLarge, match="2 MiB"):
        await store.create(ApprovalRequest(event=event))
    assert await all_keys(redis, keys) == []


async def test_event_and_metadata_are_each_measured_in_bytes_not_together(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """The limit is on the event and on the metadata, each as UTF-8 bytes: two parts just
    under it make a stored request over it, which is fine; an event under it in characters
    but over it in bytes is not."""
    half = "x" * (MAX_EVENT_BYTES - 1000)
    event = ApprovalEvent(tool_name="upload", arguments={"blob": half})
    made = await store.create(ApprovalRequest(event=event, metadata={"transcript": half}))
    stored = await store.get(made.request.id)
    assert stored.event.arguments == {"blob": half} and stored.metadata == {"transcript": half}
    wide = ApprovalEvent(tool_name="upload", arguments={"blob": "é" * (MAX_EVENT_BYTES // 2)})
    with pytest.raises(PayloadTooLarge, match="2 MiB"):
        await store.create(ApprovalRequest(event=wide))
    assert [k async for k in redis.scan_iter(match=keys.request("*"))] == [
        keys.request(made.request.id)
    ]


async def test_quorum_votes_race_and_count_once(store: ApprovalStore) -> None:
    req = (await store.create(make_request(quorum=3))).request
    first = await store.vote(req.id, "U1", "approve")
    assert first.status == "recorded" and first.approvals == 1
    dup = await store.vote(req.id, "U1", "approve")
    assert dup.status == "duplicate" and dup.approvals == 1
    results = await asyncio.gather(*(store.vote(req.id, f"U{n}", "approve") for n in range(2, 12)))
    decided = [r for r in results if r.status == "decided"]
    assert len(decided) == 1
    final = await store.get(req.id)
    assert final.status == "approved"
    assert (
        final.decision is not None
        and final.decision.decided_by == decided[0].request.decision.decided_by
    )  # type: ignore[union-attr]
    assert sum(1 for v in final.votes if v.outcome == "approve") == 3
    statuses = sorted(r.status for r in results)
    assert statuses == ["closed"] * 8 + ["decided", "recorded"]


async def test_any_deny_vote_denies(store: ApprovalStore) -> None:
    req = (await store.create(make_request(quorum=2))).request
    await store.vote(req.id, "U1", "approve")
    result = await store.vote(req.id, "U2", "deny", reason="not on a Friday")
    assert result.status == "decided"
    assert result.request.status == "denied"
    assert result.request.decision is not None
    assert result.request.decision.reason == "not on a Friday"


async def test_escalate_moves_route_and_resets_deadline(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    req = (
        await store.create(
            make_request(config=ApprovalConfig(deadline_seconds=1), channel="C1", quorum=2)
        )
    ).request
    await store.vote(req.id, "U1", "approve")
    assert req.deadline_at is not None
    new_deadline = req.deadline_at + timedelta(minutes=5)
    moved = await store.escalate(
        req, route="oncall", channel="C2", deadline_at=new_deadline, quorum=1, reviewers=["U9"]
    )
    assert moved
    after = await store.get(req.id)
    assert (after.route, after.channel, after.quorum, after.reviewers) == (
        "oncall",
        "C2",
        1,
        ("U9",),
    )
    assert after.escalations == 1 and after.votes == ()
    assert not await store.escalate(
        req, route="x", channel="C3", deadline_at=new_deadline, quorum=1, reviewers=[]
    ), "stale deadline: no second move"
    ops = [f["op"] for _, f in await redis.xrange(keys.outbox)]
    assert ops[-2:] == ["escalated", "post"]


async def test_create_already_decided_is_audited_and_never_queued(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    verdict = Decision.deny("blocked by rule no-prod", by="policy:no-prod", via="policy")
    result = await store.create(make_request(call_id="p1"), decision=verdict)
    assert result.created and result.request.status == "denied"
    stored = await store.get(result.request.id)
    assert stored.status == "denied" and stored.decision == verdict
    assert await redis.xrange(keys.outbox) == [], "nothing for Slack"
    assert await store.list_pending() == [] and await store.due(now=None) == []
    events = [(e.event, e.by, e.reason) for e in await store.audit_entries()]
    assert events == [("created", "", ""), ("denied", "policy:no-prod", "blocked by rule no-prod")]
    again = await store.create(make_request(call_id="p1"), decision=verdict)
    assert not again.created and again.request.id == result.request.id


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
    marker = await redis.get(keys.call("retry-me"))
    assert marker == f"{a.request.id} {a.request.fingerprint}"
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
    request = make_request(metadata={"transcript": "x" * (MAX_EVENT_BYTES + 1)})
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
    now = store.now()
    await GrantStore(redis, keys).give(
        Grant(
            principal=None,
            session_id="s1",
            agent=None,
            tool_name="deploy",
            scope="call",
            call="x",
            label="only this exact call, again",
            route="default",
            request_id=c.id,
            decided_by="U1",
            granted_at=now,
            expires_at=now + timedelta(seconds=60),
        )
    )
    entries = await outbox.read(count=100, block_ms=10)
    await outbox.ack(*(e.entry_id for e in entries))
    written = [k async for k in redis.scan_iter(match=keys.pattern(), count=1000)]
    assert {k.rsplit(":", 1)[-1] for k in written} >= {"outbox", "audit", "deadlines", "pending"}
    no_ttl = [k for k in written if await redis.ttl(k) <= 0]
    assert no_ttl == [], f"keys without a TTL: {no_ttl}"


# -- turns: at most max_concurrent operations at once, the rest in order -------------------------


async def test_operations_take_turns_and_all_complete(redis: Redis, keys: Keys) -> None:
    """200 creates at once on a store allowing 4 at a time: never more than 4 hold a turn at
    once, every one is created (none fails for waiting its turn), nested reads included."""
    store = ApprovalStore(redis, keys, command_timeout=3.0, max_concurrent=4)
    holding = peak = 0

    class Counting(asyncio.Semaphore):
        async def acquire(self) -> Literal[True]:
            nonlocal holding, peak
            await super().acquire()
            holding += 1
            peak = max(peak, holding)
            return True

        def release(self) -> None:
            nonlocal holding
            holding -= 1
            super().release()

    store.turns = Counting(4)
    results = await asyncio.gather(
        *(store.create(make_request(call_id=f"turn-{i}")) for i in range(200))
    )
    assert all(r.created for r in results)
    assert peak == 4 and holding == 0
    ids = [r.request.id for r in results]
    found = await asyncio.gather(*(store.get(i) for i in ids))  # get → get_many: nested
    assert [f.id for f in found] == ids and holding == 0


async def test_a_nested_operation_runs_on_its_callers_turn(redis: Redis, keys: Keys) -> None:
    store = ApprovalStore(redis, keys, command_timeout=3.0, max_concurrent=1)
    made = (await store.create(make_request(call_id="nested"))).request
    got = await asyncio.wait_for(store.get(made.id), 5)  # get calls get_many: no deadlock
    assert got.id == made.id


async def test_waiting_too_long_for_a_turn_is_store_unavailable(redis: Redis, keys: Keys) -> None:
    store = ApprovalStore(redis, keys, max_concurrent=1, admission_timeout=0.05)
    assert store.turns is not None
    await store.turns.acquire()  # an operation that does not end
    try:
        with pytest.raises(StoreUnavailable):
            await store.create(make_request(call_id="no-turn"))
    finally:
        store.turns.release()
    assert (await store.create(make_request(call_id="no-turn"))).created
