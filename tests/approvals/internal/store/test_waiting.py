"""Waking waiters: fan-out, connection count, decisions published while disconnected, lazy start
under concurrency, transient store errors and the periodic re-read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter, Watch
from approvals.errors import ApprovalTimeout, NotFound
from approvals.models import ApprovalEvent, ApprovalRequest, Decision
from tests.support import eventually
from tests.support.redis_proxy import RedisProxy


async def new_pending(store: ApprovalStore, n: int) -> list[str]:
    created = await asyncio.gather(
        *(store.create(ApprovalRequest(event=ApprovalEvent(tool_name=f"t{i}"))) for i in range(n))
    )
    return [c.request.id for c in created]


async def clients_named(redis: Redis, name: str) -> int:
    return sum(1 for c in await redis.client_list() if c.get("name") == name)


async def subscribed_ids(redis: Redis, name: str) -> list[str]:
    """Ids of the connections named `name` that hold a subscription."""
    return [
        c["id"]
        for c in await redis.client_list()
        if c.get("name") == name and int(c.get("sub", 0)) > 0
    ]


async def test_wait_returns_decision_made_after_wait_began(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    (rid,) = await new_pending(store, 1)
    async with Waiter(redis, keys, store=store) as waiter:
        task = asyncio.create_task(waiter.wait(rid, timeout=5))
        await asyncio.sleep(0.05)
        assert not task.done()
        await store.resolve(rid, Decision.approve(by="U1", input="ship it"))
        req = await task
    assert req.status == "approved"
    assert req.decision is not None and req.decision.input == "ship it"


async def test_wait_returns_decision_made_before_wait_began(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    (rid,) = await new_pending(store, 1)
    await store.resolve(rid, Decision.deny("nope", by="U1"))
    async with Waiter(redis, keys, store=store) as waiter:
        req = await waiter.wait(rid, timeout=2)
    assert req.status == "denied"


async def test_wait_times_out_and_unknown_id_is_not_found(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    (rid,) = await new_pending(store, 1)
    async with Waiter(redis, keys, store=store) as waiter:
        with pytest.raises(ApprovalTimeout):
            await waiter.wait(rid, timeout=0.2)
        with pytest.raises(NotFound):
            await waiter.wait("apr_missing", timeout=2)
        assert waiter.waiting == 0


async def test_thousand_waiters_wake_with_their_own_decision_on_few_connections(
    store: ApprovalStore, redis_url: str, keys: Keys, redis: Redis
) -> None:
    ids = await new_pending(store, 1000)
    name = f"waiter-{keys.prefix}"
    wredis = connect(redis_url, max_connections=2, client_name=name)
    waiter = Waiter(wredis, keys)
    await waiter.start()
    try:
        tasks = {rid: asyncio.create_task(waiter.wait(rid, timeout=30)) for rid in ids}
        await eventually(lambda: waiter.waiting == 1000, what="1000 waiters registered")
        await asyncio.gather(
            *(
                store.resolve(
                    rid,
                    Decision.approve(by="U1", input=rid)
                    if i % 2 == 0
                    else Decision.deny(f"deny {rid}", by="U2"),
                )
                for i, rid in enumerate(ids)
            )
        )
        results = await asyncio.gather(*tasks.values())
        for i, (rid, req) in enumerate(zip(tasks, results, strict=True)):
            assert req.id == rid
            assert req.decision is not None
            if i % 2 == 0:
                assert req.status == "approved" and req.decision.input == rid
            else:
                assert req.status == "denied" and req.decision.reason == f"deny {rid}"
        used = await clients_named(redis, name)
        assert 1 <= used <= 3, f"waiting used {used} connections"
    finally:
        await waiter.stop()
        await wredis.aclose()


async def test_decision_published_while_subscription_is_down_is_delivered(
    store: ApprovalStore, redis_url: str, keys: Keys, redis: Redis
) -> None:
    ids = await new_pending(store, 3)
    name = f"waiter-{keys.prefix}"
    wredis = connect(redis_url, max_connections=2, client_name=name)
    waiter = Waiter(wredis, keys, recheck_interval=3600)  # only the reconnect can save us
    await waiter.start()
    try:
        tasks = [asyncio.create_task(waiter.wait(rid, timeout=20)) for rid in ids]
        # Kill the pub/sub connection, and keep killing it while the decisions are published.
        pubsub_ids = await eventually(
            lambda: subscribed_ids(redis, name), what="the waiter's subscription"
        )
        await redis.execute_command("CLIENT", "KILL", "ID", pubsub_ids[0])
        for rid in ids:
            await store.resolve(rid, Decision.approve(by="U1"))
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=15)
        assert [r.status for r in results] == ["approved"] * 3
        # On a loaded machine a wait's first read may come after the decisions; the killed
        # subscription must come back all the same.
        await eventually(lambda: waiter.subscriptions >= 2, what="the resubscription")
    finally:
        await waiter.stop()
        await wredis.aclose()


async def test_pubsub_connection_killed_while_deciding(
    store: ApprovalStore, redis_url: str, keys: Keys, redis: Redis
) -> None:
    (rid,) = await new_pending(store, 1)
    wredis = connect(redis_url, max_connections=2, client_name=f"w2-{keys.prefix}")
    waiter = Waiter(wredis, keys, recheck_interval=3600)
    await waiter.start()
    try:
        task = asyncio.create_task(waiter.wait(rid, timeout=20))
        # Cut the waiter's own pub/sub connection (by id: never other clients on the
        # server) and decide before the waiter can resubscribe.
        pubsub_ids = await eventually(
            lambda: subscribed_ids(redis, f"w2-{keys.prefix}"), what="the waiter's subscription"
        )
        await asyncio.gather(
            redis.execute_command("CLIENT", "KILL", "ID", pubsub_ids[0]),
            store.resolve(rid, Decision.deny("too risky", by="U7")),
        )
        req = await asyncio.wait_for(task, timeout=15)
        assert req.status == "denied" and req.decision is not None
        assert req.decision.reason == "too risky"
    finally:
        await waiter.stop()
        await wredis.aclose()


async def test_several_waiters_on_one_id_all_wake(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    (rid,) = await new_pending(store, 1)
    async with Waiter(redis, keys, store=store) as waiter:
        tasks = [asyncio.create_task(waiter.wait(rid, timeout=5)) for _ in range(20)]
        await asyncio.sleep(0.05)
        await store.resolve(rid, Decision.approve(by="U1", selection="blue"))
        results = await asyncio.gather(*tasks)
    assert {r.decision.selection for r in results if r.decision} == {"blue"}


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
        await eventually(lambda: waiter.subscriptions, what="the first subscription")
        await asyncio.sleep(0.2)  # time for a second one, were the waits to race
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
            await eventually(lambda: waiter.waiting and waiter.subscriptions, what="waiting")
            via.cut()
            await asyncio.sleep(0.1)
            await store.resolve(rid, Decision.approve(by="U1", input="while away"))
            await asyncio.sleep(0.3)
            assert not task.done()
            via.restore()
            req = await asyncio.wait_for(task, timeout=15)
            assert req.decision is not None and req.decision.input == "while away"
            # The decision may arrive through the retried read before the resubscription is
            # counted; the waiter must still resubscribe.
            await eventually(lambda: waiter.subscriptions >= 2, what="the resubscription")
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


class Stop(Exception):
    pass


async def test_interrupt_fails_interruptible_waits_only_now_and_later(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    a, b = await new_pending(store, 2)
    async with Waiter(redis, keys, store=store) as waiter:
        parked = asyncio.create_task(waiter.wait(a, timeout=30, interruptible=True))
        plain = asyncio.create_task(waiter.wait(b, timeout=30))
        await eventually(lambda: waiter.waiting == 2, what="two waits registered")
        assert waiter.interrupt(Stop) == 1
        with pytest.raises(Stop):
            await parked
        with pytest.raises(Stop):
            await waiter.wait(a, timeout=30, interruptible=True)
        assert not plain.done(), "a wait that did not ask to be interrupted goes on"
        await store.resolve(b, Decision.approve(by="U1"))
        assert (await plain).status == "approved"
        assert waiter.waiting == 0


async def test_a_watch_hears_what_is_published_after_it_and_leaves_nothing_behind(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """`watch` does no read of its own: the caller reads after registering (the HTTP
    long-poll does); a decision published after the watch wakes it; `unwatch` always
    clears the registry, whatever the outcome."""
    a, b, c = await new_pending(store, 3)
    async with Waiter(redis, keys, store=store) as waiter:
        woken = waiter.watch(a, 30)
        timed_out = waiter.watch(b, 0.05)
        dropped = waiter.watch(c, 30)
        assert waiter.waiting == 3
        await store.resolve(a, Decision.deny("no", by="U1"))
        assert (await asyncio.wait_for(woken, 10)).status == "denied"
        with pytest.raises(ApprovalTimeout):
            await asyncio.wait_for(timed_out, 10)
        for w in (woken, timed_out, dropped):
            waiter.unwatch(w)
        assert dropped.cancelled()
        assert waiter.waiting == 0 and not waiter._watches


async def test_stop_ends_the_waiter_when_a_read_loses_its_cancellation(
    store: ApprovalStore, redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Python 3.11 a cancellation that lands inside a bounded Redis read can come out as a
    `TimeoutError` (lost). The listener survives Redis errors, so after one cancel it would read
    on, and `stop()` (so Ctrl-C on `approval-bot request --wait` over Redis) would hang: `stop()`
    cancels again until every task has ended. Here the first cancellation is lost for sure."""
    lost: list[str] = []
    real_pubsub = redis.pubsub

    def pubsub(**kwargs: object) -> PubSub:
        subscription = real_pubsub(**kwargs)
        real_get = subscription.get_message

        async def get_message(*args: object, **kw: object) -> object:
            try:
                return await real_get(*args, **kw)  # type: ignore[arg-type]
            except asyncio.CancelledError:
                if lost:
                    raise
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()  # as asyncio.timeout does when it takes the cancel for its own
                lost.append(task.get_name())
                raise TimeoutError("the read's own timeout won the race") from None

        monkeypatch.setattr(subscription, "get_message", get_message)
        return subscription

    monkeypatch.setattr(redis, "pubsub", pubsub)
    waiter = Waiter(redis, keys, store=store)
    await waiter.start()
    (rid,) = await new_pending(store, 1)
    waiting = asyncio.create_task(waiter.wait(rid, timeout=60))
    await eventually(lambda: waiter.waiting == 1, what="the wait to begin")
    tasks = list(waiter._tasks)
    stopping = asyncio.create_task(waiter.stop())
    done, _ = await asyncio.wait({stopping}, timeout=20)
    if not done:  # the failure: end it for the teardown (a second cancel is not lost here)
        for task in tasks:
            task.cancel()
        await stopping
    assert lost == ["waiter-listen"], "the listener's first cancellation was lost"
    assert done, "stop() did not end: the listener went on reading after the lost cancel"
    assert all(t.done() for t in tasks)
    with pytest.raises(asyncio.CancelledError):
        await waiting


class NoReads(ApprovalStore):
    """A store the Waiter cannot read through: only `deliver` can settle its waits."""

    async def get_many(self, request_ids: Iterable[str]) -> dict[str, ApprovalRequest]:
        raise AssertionError("the Waiter read the request")

    async def status_many(self, request_ids: Iterable[str]) -> dict[str, str | None]:
        raise AssertionError("the Waiter read the status")


async def test_a_decision_made_in_this_process_wakes_its_waiters_from_the_cas_result(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """`on_decided`: the compare-and-set's own result settles the local waiters (no message
    and no re-read needed); a hook that raises does not undo or fail the decision."""
    rid, other = await new_pending(store, 2)
    waiter = Waiter(redis, keys, store=NoReads(redis, keys))
    await waiter.start()
    try:

        def broken(request: ApprovalRequest) -> None:
            raise RuntimeError("a broken hook")

        store.on_decided(broken)
        store.on_decided(waiter.deliver)
        mine = waiter.watch(rid, 30)
        theirs = waiter.watch(other, 30)
        result = await store.resolve(rid, Decision.approve(by="U1", input="go"))
        assert result.won and result.request.status == "approved"
        got = await asyncio.wait_for(mine, 10)
        assert got.id == rid and got.decision is not None and got.decision.input == "go"
        assert not theirs.done()
        lost = await store.resolve(rid, Decision.deny("late", by="U2"))
        assert not lost.won  # a loser delivers nothing
        for w in (mine, theirs):
            waiter.unwatch(w)
        assert waiter.waiting == 0
    finally:
        await waiter.stop()


async def test_on_settle_hooks_run_as_the_decision_lands_each_once_even_if_they_unwatch_or_fail(
    store: ApprovalStore, redis: Redis, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """A watch's `on_settle` runs before `resolve` returns (the done callbacks a turn of the
    loop later), once; every watch of the id is settled even when a hook unwatches its own
    (which unchains it) or raises (logged; the decision and the other hooks stand)."""
    (rid,) = await new_pending(store, 1)
    waiter = Waiter(redis, keys, store=NoReads(redis, keys))
    store.on_decided(waiter.deliver)
    await waiter.start()
    try:
        watches = [waiter.watch(rid, 30) for _ in range(4)]
        calls: list[tuple[int, str]] = []

        def unwatching(i: int) -> Callable[[Watch], None]:
            def hook(w: Watch) -> None:
                calls.append((i, w.result().status))
                waiter.unwatch(w)

            return hook

        def broken(w: Watch) -> None:
            raise RuntimeError("a broken hook")

        for i, w in enumerate(watches):
            w.on_settle = broken if i == 1 else unwatching(i)
        result = await store.resolve(rid, Decision.approve(by="U1"))
        assert result.won
        # No await since: the hooks ran inside resolve, the done callbacks not yet.
        assert sorted(calls) == [(0, "approved"), (2, "approved"), (3, "approved")]
        assert all(w.done() and w.result().status == "approved" for w in watches)
        assert all(w.on_settle is None for w in watches)
        assert "a settled watch's hook failed" in caplog.text
        waiter.deliver(result.request)  # settled already: no hook runs twice
        assert len(calls) == 3
        waiter.unwatch(watches[1])
        assert waiter.waiting == 0
    finally:
        await waiter.stop()


async def test_a_deciding_vote_made_in_this_process_wakes_its_waiters_too(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """A Slack click is a vote (`ApprovalStore.vote`): the one that decides wakes the local
    waiters from the script's result; a vote that only records does not."""
    created = await store.create(ApprovalRequest(event=ApprovalEvent(tool_name="deploy"), quorum=2))
    rid = created.request.id
    waiter = Waiter(redis, keys, store=NoReads(redis, keys))
    await waiter.start()
    try:
        store.on_decided(waiter.deliver)
        watch = waiter.watch(rid, 30)
        first = await store.vote(rid, "U1", "approve")
        assert first.status == "recorded"
        assert not watch.done()
        second = await store.vote(rid, "U2", "approve")
        assert second.status == "decided"
        got = await asyncio.wait_for(watch, 10)
        assert got.status == "approved" and {v.user for v in got.votes} == {"U1", "U2"}
        waiter.unwatch(watch)
    finally:
        await waiter.stop()


async def test_reads_are_batched_on_the_waiters_own_connections(
    store: ApprovalStore, redis_url: str, keys: Keys, redis: Redis
) -> None:
    """`read()`: 300 concurrent reads are answered (the request, or `NotFound`) through the
    Waiter's client of two connections, which it never grows."""
    ids = await new_pending(store, 300)
    await store.resolve(ids[0], Decision.deny("no", by="U1"))
    name = f"waiter-{keys.prefix}"
    wredis = connect(redis_url, max_connections=2, client_name=name)
    waiter = Waiter(wredis, keys)
    await waiter.start()
    try:
        got = await asyncio.gather(*(waiter.read(rid) for rid in ids))
        assert [r.id for r in got] == ids
        assert got[0].status == "denied" and all(r.status == "pending" for r in got[1:])
        with pytest.raises(NotFound):
            await waiter.read("apr_missing")
        assert await clients_named(redis, name) <= 2
    finally:
        await waiter.stop()
        await wredis.aclose()


async def test_deadlines_share_one_timer_and_unwatched_ones_are_dropped(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """Timeouts come from one heap and one timer (no timer per wait): each watch times out on
    its own deadline whatever order they were made in; watches given up before their deadline
    fail nothing and are dropped from the heap once they are most of it."""
    a, b, c = await new_pending(store, 3)
    async with Waiter(redis, keys, store=store) as waiter:
        late = waiter.watch(a, 30)
        soon = waiter.watch(b, 0.05)
        sooner = waiter.watch(c, 0.02)
        assert waiter._deadlines[0].watch is sooner
        for w in (sooner, soon):
            with pytest.raises(ApprovalTimeout, match=r"within 0\.0"):
                await asyncio.wait_for(w, 10)
        assert not late.done()
        assert len(waiter._deadlines) == 1  # the two that timed out left the heap
        given_up = [waiter.watch(a, 0.3 + i / 1000) for i in range(300)]
        for w in given_up[:256]:
            waiter.unwatch(w)
        assert all(w.cancelled() for w in given_up[:256])
        assert len(waiter._deadlines) == 301  # a few given up: kept, dropped at their time
        waiter.unwatch(given_up[256])
        assert len(waiter._deadlines) == 301 - 257, "rebuilt without the 257 given up"
        for w in given_up[257:290]:
            waiter.unwatch(w)
        for w in given_up[290:]:
            with pytest.raises(ApprovalTimeout):
                await asyncio.wait_for(w, 10)
            waiter.unwatch(w)
        for w in (late, soon, sooner):
            waiter.unwatch(w)
        assert waiter.waiting == 0 and not waiter._watches
        # What is left in the heap are emptied entries, dropped at their time (late's, 30 s).
        await eventually(lambda: len(waiter._deadlines) == 1, what="the given up ones dropped")
        assert waiter._deadlines[0].watch is None and waiter._dead == 1


class FakeTransport(asyncio.BaseTransport):
    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


async def test_a_watch_ends_when_its_callers_transport_closes(
    store: ApprovalStore, redis: Redis, keys: Keys
) -> None:
    """`watch(transport=…)`: once the caller's connection closes, the watch ends with
    `CallerGone` (the HTTP long-poll's client went away); other watches on the same request
    go on and still wake on the decision."""
    from approvals._internal.store.waiting import CallerGone

    (rid,) = await new_pending(store, 1)
    async with Waiter(redis, keys, store=store, gone_interval=0.05) as waiter:
        left, stays = FakeTransport(), FakeTransport()
        gone = waiter.watch(rid, 30, transport=left)
        other = waiter.watch(rid, 30, transport=stays)
        plain = waiter.watch(rid, 30)
        left.closing = True
        with pytest.raises(CallerGone):
            await asyncio.wait_for(gone, 10)
        waiter.unwatch(gone)
        assert waiter.waiting == 2 and not other.done() and not plain.done()
        await store.resolve(rid, Decision.approve(by="U1"))
        for w in (other, plain):
            assert (await asyncio.wait_for(w, 10)).status == "approved"
            waiter.unwatch(w)
        assert waiter.waiting == 0 and not waiter._watches
