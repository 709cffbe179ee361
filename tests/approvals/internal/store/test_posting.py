"""The posting record (begin_post / record_message) and the outbox's liveness (heartbeats,
reaping gone replicas, owed entries), on real Redis."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from approvals._internal.store.keys import Keys
from approvals._internal.store.outbox import Outbox
from approvals._internal.store.posting import SCRIPT_NAMES, Posting
from approvals._internal.store.store import ApprovalStore, load_script_source
from approvals.models import ApprovalEvent, ApprovalRequest, Decision, SlackMessage


async def test_posting_and_reap_scripts_load(redis: Redis) -> None:
    for name in (*SCRIPT_NAMES, "reap"):
        sha = await redis.script_load(load_script_source(name))
        assert (await redis.script_exists(sha)) == [True], name


async def make(store: ApprovalStore) -> str:
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"})
    created = await store.create(ApprovalRequest(event=event, channel="C1"))
    return created.request.id


async def test_first_attempt_goes_a_second_holder_is_busy_a_gone_one_is_taken_over(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    posting = Posting(redis, keys)
    rid = await make(store)
    kw = {"lock_seconds": 60}
    first = await posting.begin(rid, 0, "C1", holder="a 1", now=100.0, **kw)
    assert (first.state, first.earlier_at, first.earlier_attempts) == ("go", None, 0)
    busy = await posting.begin(rid, 0, "C1", holder="b 2", now=101.0, **kw)
    assert (busy.state, busy.holder) == ("busy", "a 1")
    # "a 1" is known to be gone: b takes over, and learns an attempt came before it.
    taken = await posting.begin(rid, 0, "C1", holder="b 2", now=102.0, gone_holder="a 1", **kw)
    assert (taken.state, taken.earlier_at, taken.earlier_attempts) == ("go", 100.0, 1)
    # ...but a gone holder named wrongly takes nothing from the live one.
    stolen = await posting.begin(rid, 0, "C1", holder="c 3", now=103.0, gone_holder="a 1", **kw)
    assert (stolen.state, stolen.holder) == ("busy", "b 2")
    _, attempts = await posting.history(rid)
    assert [(a.escalations, a.channel, a.first_at, a.count) for a in attempts] == [
        (0, "C1", 100.0, 2)
    ]


async def test_record_keeps_the_first_copy_as_the_message_and_the_rest_as_copies(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    posting = Posting(redis, keys)
    rid = await make(store)
    await posting.begin(rid, 0, "C1", holder="a 1", lock_seconds=60, now=1.0)
    one, two = SlackMessage(channel="C1", ts="1.1"), SlackMessage(channel="C1", ts="1.2")
    assert await posting.record(rid, 0, one) == ("message", "pending", [])
    assert not await redis.exists(posting.lock(rid, 0)), "the lock is freed once recorded"
    assert await posting.record(rid, 0, one) == ("message", "pending", []), "adopting twice"
    assert await posting.record(rid, 0, two) == ("copy", "pending", [])
    assert await posting.record(rid, 0, two) == ("copy", "pending", [])
    assert (await store.get(rid)).message == one
    copies, _ = await posting.history(rid)
    assert copies == [two]
    # Once posted, nothing more is posted; once decided, neither.
    assert (await posting.begin(rid, 0, "C1", holder="b", lock_seconds=60, now=2.0)).state == (
        "posted"
    )
    await store.resolve(rid, Decision.approve(by="U1"))
    assert (await posting.begin(rid, 0, "C1", holder="b", lock_seconds=60, now=2.0)).state == (
        "closed"
    )
    assert await posting.record(rid, 0, SlackMessage(channel="C1", ts="1.3")) == (
        "copy",
        "approved",
        [],
    )


async def test_the_message_is_recorded_with_its_reviewers_dms_owed_until_each_is_sent(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    posting = Posting(redis, keys)
    rid = await make(store)
    one = SlackMessage(channel="C1", ts="1.1")
    await posting.begin(rid, 0, "C1", holder="a 1", lock_seconds=60, now=1.0)
    assert await posting.record(rid, 0, one, ["U1", "U2"]) == ("message", "pending", ["U1", "U2"])
    await posting.dm_sent(rid, 0, "U1")
    # Recorded again (a replica taking the entry over adopts the same message): only the DMs
    # not sent yet, and the list given now does not add any.
    assert await posting.record(rid, 0, one, ["U1", "U2", "U3"]) == ("message", "pending", ["U2"])
    row = await redis.hgetall(keys.request(rid))
    assert Posting.dms_owed(row, 0) == ["U2"] and Posting.dms_owed(row, 1) == []
    await posting.dm_sent(rid, 0, "U2")
    assert await posting.record(rid, 0, one) == ("message", "pending", [])
    # A copy owes no DMs.
    two = SlackMessage(channel="C1", ts="1.2")
    assert await posting.record(rid, 0, two, ["U9"]) == ("copy", "pending", [])
    assert Posting.dms_owed(await redis.hgetall(keys.request(rid)), 0) == []


async def test_a_post_for_an_earlier_route_round_is_a_copy_and_gone_requests_stay_gone(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    posting = Posting(redis, keys)
    rid = await make(store)
    await redis.hset(keys.request(rid), "escalations", "1")
    assert (await posting.begin(rid, 0, "C1", holder="a", lock_seconds=60, now=1.0)).state == (
        "moved"
    )
    assert await posting.record(rid, 0, SlackMessage(channel="C1", ts="1.1")) == (
        "copy",
        "pending",
        [],
    )
    assert (await store.get(rid)).message is None
    assert (
        await posting.begin("apr_missing", 0, "C1", holder="a", lock_seconds=60, now=1.0)
    ).state == "gone"
    assert await posting.record("apr_missing", 0, SlackMessage(channel="C", ts="1")) == (
        "gone",
        "",
        [],
    )
    assert not await redis.exists(keys.request("apr_missing")), "never resurrected"


async def test_a_gone_replica_is_reaped_a_live_one_is_not(redis: Redis, keys: Keys) -> None:
    gone = Outbox(redis, keys, "gone")
    alive = Outbox(redis, keys, "alive")
    survivor = Outbox(redis, keys, "survivor")
    await gone.ensure_group()
    for i in range(5):
        await redis.xadd(keys.outbox, {"op": "post", "id": f"r{i}", "channel": "C1"})
    await alive.heartbeat(10_000)
    assert len(await gone.read(count=3, block_ms=10)) == 3
    assert len(await alive.read(count=2, block_ms=10)) == 2
    assert await survivor.holder_alive(alive.holder)
    assert not await survivor.holder_alive(gone.holder)
    assert not await survivor.holder_alive("alive another-run"), "a restart is another run"
    await asyncio.sleep(0.05)
    assert await survivor.reap(gone_after_ms=20, count=2) == 3  # in pages of 2
    names = {c["name"] for c in await redis.xinfo_consumers(keys.outbox, "bot")}
    assert names == {"alive", "survivor"}, "the gone consumer is removed, the live one kept"
    owed = await survivor.owed()
    assert len(owed) == 3 and all(o.deliveries == 1 for o in owed)
    assert all(o.idle_ms >= 3_600_000 for o in owed), "taken entries are due at once"
    taken = await survivor.take_again([o.entry_id for o in owed])
    assert sorted(e.request_id for e in taken) == ["r0", "r1", "r2"]
    assert [o.deliveries for o in await survivor.owed()] == [2, 2, 2], "backoff grows"
    await alive.leave()
    assert not await survivor.holder_alive(alive.holder)


async def test_a_request_listed_in_a_digest_is_not_posted_on_its_own(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """A storm request's place this round is its digest row (digest_add.lua): begin_post
    answers `posted` and counts no attempt, so it never gets a second set of buttons."""
    from approvals._internal.store.digests import Digests

    posting = Posting(redis, keys)
    rid = await make(store)
    added = await Digests(redis, keys).add(
        rid,
        0,
        "C1",
        holder="a 1",
        max_rows=45,
        open_seconds=60,
        now=1.0,
        post_lock=posting.lock(rid, 0),
    )
    assert added.state == "added"
    for holder in ("a 1", "b 2"):
        begun = await posting.begin(rid, 0, "C1", holder=holder, lock_seconds=60, now=2.0)
        assert begun.state == "posted", holder
    _, attempts = await posting.history(rid)
    assert attempts == [], "an attempt was counted for a request its digest lists"
    assert not await redis.exists(posting.lock(rid, 0))
