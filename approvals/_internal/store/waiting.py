"""Waking waiting agents: one pub/sub connection per process fans decisions out to futures.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A `Waiter` holds one subscription to `Keys.decided_channel` and one checker task. `wait(id)`
registers a `Watch` (a future) and then reads the request; `watch()` registers without the
read, for a caller that reads through `read()`; `deliver()` settles waits from a decision this
process made; `interrupt()` fails every `interruptible` wait (the bot's drain). Why nothing is
missed and what a wait costs: docs/ARCHITECTURE.md, "Waking agents".
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals._internal.store.connection import cancel_and_wait
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.errors import ApprovalTimeout, NotFound, StoreUnavailable
from approvals.models import ApprovalRequest

log = logging.getLogger(__name__)

# The store turns Redis connection errors into StoreUnavailable: a read that failed that way
# is retried, never dropped.
_REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError, StoreUnavailable)


class CallerGone(Exception):
    """The connection of a watch's caller closed (`Waiter.watch(transport=…)`): nobody is
    left to answer."""


class Watch(asyncio.Future[ApprovalRequest]):
    """One registered wait (`Waiter.watch`), and the future its caller awaits: the request once
    it is decided, or `ApprovalTimeout`, `NotFound`, the `interrupt()` error, `CallerGone`.

    One object per wait: no timer (its `deadline` sits in the Waiter's heap), no list (the
    watches of one request id are chained through `next`).

    `on_settle`, if its owner sets one, is called with the watch as soon as a decision (or a
    `NotFound`) settles it, before anything else runs: a parked long-poll writes its answer
    then, not a turn of the event loop later, after the rest of the code that decided (a
    click's own Slack answer, say). Done callbacks still run as usual."""

    __slots__ = (
        "deadline",
        "interruptible",
        "next",
        "on_settle",
        "request_id",
        "timeout",
        "transport",
    )

    request_id: str
    timeout: float | None
    deadline: _Deadline | None  # its entry in the Waiter's deadline heap, while there
    interruptible: bool
    transport: asyncio.BaseTransport | None
    next: Watch | None
    on_settle: Callable[[Watch], None] | None


class _Deadline:
    """An entry of the deadline heap: when, and the watch it ends (None once unwatched, so an
    entry left in the heap holds nothing of the watch or its result)."""

    __slots__ = ("at", "watch")

    def __init__(self, at: float, watch: Watch) -> None:
        self.at = at
        self.watch: Watch | None = watch

    def __lt__(self, other: _Deadline) -> bool:
        return self.at < other.at


class Waiter:
    """Waits for requests to leave `pending`, for any number of in-process callers."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        store: ApprovalStore | None = None,
        recheck_interval: float = 10.0,
        batch_size: int = 100,
        gone_interval: float = 2.0,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = store or ApprovalStore(redis, keys)
        self.recheck_interval = recheck_interval
        self.batch_size = batch_size
        self.gone_interval = gone_interval  # how often watches' transports are looked at
        # Per waited id, the first of its watches (the others chained through `Watch.next`:
        # almost always none). A wait costs its `Watch` and a place in the deadline heap.
        self._watches: dict[str, Watch] = {}
        self._count = 0
        # Deadlines: a heap, one `call_at` for the earliest. The entry of an unwatched watch
        # stays in the heap, emptied, until its time (no search to remove it); the heap is
        # rebuilt when such entries are over half of it.
        self._deadlines: list[_Deadline] = []
        self._dead = 0
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._with_transport = 0  # watches that carry their caller's transport
        self._interrupted: Callable[[], Exception] | None = None
        # Three queues, served in this order so a fresh decision never waits behind bulk work:
        # ids whose decision was just published (read whole, one round trip), ids whose wait
        # just began, and the bulk re-reads after a resubscribe and on the periodic tick.
        self._hinted: set[str] = set()
        self._fresh: set[str] = set()
        self._to_check: set[str] = set()
        # Callers of `read()` per id, served before fresh waits and bulk re-reads.
        self._reads: dict[str, list[asyncio.Future[ApprovalRequest]]] = {}
        self._check_wanted = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._pubsub: PubSub | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._start_lock = asyncio.Lock()  # concurrent first `wait()`s start one subscription
        self.subscriptions = 0  # how often SUBSCRIBE was confirmed (1 + reconnects)

    @property
    def waiting(self) -> int:
        return self._count

    def _all(self) -> Iterator[Watch]:
        for head in list(self._watches.values()):
            w: Watch | None = head
            while w is not None:
                yield w
                w = w.next

    async def start(self) -> None:
        """Subscribe and start the listener and checker; returns once subscribed."""
        async with self._start_lock:
            if self._tasks:
                return
            # A Redis Cluster client learns its slots here (pub/sub picks a node by slot).
            await self.redis.initialize()
            self._pubsub = self.redis.pubsub()
            await self._pubsub.subscribe(self.keys.decided_channel)
            self._tasks = [
                asyncio.create_task(self._listen(), name="waiter-listen"),
                asyncio.create_task(self._check_loop(), name="waiter-check"),
                asyncio.create_task(self._tick(), name="waiter-tick"),
            ]
            await self._subscribed.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                # Through Any: typed from redis-py 8.2 on, untyped before (see connect()).
                close: Any = self._pubsub.aclose
                await close()
            self._pubsub = None
        for w in self._all():
            w.cancel()
        self._watches.clear()
        self._count = self._with_transport = self._dead = 0
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        for d in self._deadlines:
            if d.watch is not None:
                d.watch.deadline = None
                d.watch = None
        self._deadlines.clear()
        for reads in self._reads.values():
            for fut in reads:
                fut.cancel()
        self._reads.clear()

    async def __aenter__(self) -> Waiter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    async def wait(
        self,
        request_id: str,
        timeout: float | None,  # noqa: ASYNC109
        *,
        interruptible: bool = False,
        transport: asyncio.BaseTransport | None = None,
    ) -> ApprovalRequest:
        """The request once it is no longer pending; `ApprovalTimeout` when `timeout` passes
        first, `NotFound` for an unknown id. An `interruptible` wait raises the exception of
        `interrupt()` once that is called (or at once, if it was); with `transport` (the
        caller's connection), `CallerGone` within about `gone_interval` of its closing."""
        if not self._tasks:
            await self.start()
        watch = self.watch(request_id, timeout, interruptible=interruptible, transport=transport)
        # Registered first, then read: a decision published from now on is heard, one made
        # before is found by this read (batched with other fresh waits).
        self._fresh.add(request_id)
        self._check_wanted.set()
        try:
            return await watch
        finally:
            self.unwatch(watch)

    def watch(
        self,
        request_id: str,
        timeout: float | None,
        *,
        interruptible: bool = False,
        transport: asyncio.BaseTransport | None = None,
    ) -> Watch:
        """Register a wait without reading the request: the returned `Watch` (a future) gets
        the request once a decision on it is *published* (or re-read after a reconnect, or on
        the periodic tick), `ApprovalTimeout` after `timeout`, and `CallerGone` within about
        `gone_interval` of `transport` (the caller's connection, if any) closing. The caller
        must read the request itself after this call (a decision made before it is not
        published again) and must call `unwatch` when done. For callers that read anyway (the
        HTTP long-poll: its own read checks the caller's principal) this saves the Waiter's
        first read. Needs `start()`."""
        if interruptible and self._interrupted is not None:
            raise self._interrupted()
        loop = asyncio.get_running_loop()
        w = Watch(loop=loop)
        w.request_id = request_id
        w.timeout = timeout
        w.deadline = None
        w.interruptible = interruptible
        w.transport = transport
        w.on_settle = None
        w.next = self._watches.get(request_id)
        self._watches[request_id] = w
        self._count += 1
        if transport is not None:
            self._with_transport += 1
        if timeout is not None:
            w.deadline = _Deadline(loop.time() + timeout, w)
            heapq.heappush(self._deadlines, w.deadline)
            if self._deadlines[0] is w.deadline:
                self._arm(loop)
        return w

    def follow(self, watch: Watch, transport: asyncio.BaseTransport | None) -> None:
        """From now on end `watch` with `CallerGone` within about `gone_interval` of
        `transport` closing (None: stop looking), as `watch(transport=…)` does."""
        if watch.transport is None and transport is not None:
            self._with_transport += 1
        elif watch.transport is not None and transport is None:
            self._with_transport -= 1
        watch.transport = transport

    def unwatch(self, watch: Watch) -> None:
        """Forget a `watch` (it is cancelled if it has no outcome yet)."""
        head = self._watches.get(watch.request_id)
        if head is watch:
            if watch.next is None:
                del self._watches[watch.request_id]
            else:
                self._watches[watch.request_id] = watch.next
            self._forgotten(watch)
        elif head is not None:
            w = head
            while w.next is not None and w.next is not watch:
                w = w.next
            if w.next is watch:
                w.next = watch.next
                self._forgotten(watch)
        if not watch.done():
            watch.cancel()

    def _forgotten(self, watch: Watch) -> None:
        self._count -= 1
        if watch.transport is not None:
            watch.transport = None
            self._with_transport -= 1
        watch.next = None
        if watch.deadline is not None:  # its entry stays in the heap, emptied
            watch.deadline.watch = None
            watch.deadline = None
            self._dead += 1
            if self._dead > 256 and 2 * self._dead > len(self._deadlines):
                self._compact()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """One timer, at the earliest deadline."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_timer = (
            loop.call_at(self._deadlines[0].at, self._expire) if self._deadlines else None
        )

    def _expire(self) -> None:
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        heap = self._deadlines
        now = loop.time() + 0.001  # the clock's resolution (uvloop's: 1 ms), as asyncio allows
        while heap and heap[0].at <= now:
            w = heapq.heappop(heap).watch
            if w is None:  # unwatched before its deadline
                self._dead -= 1
                continue
            w.deadline = None
            if not w.done():
                w.set_exception(
                    ApprovalTimeout(f"no decision on {w.request_id} within {w.timeout:g} s")
                )
        self._arm(loop)

    def _compact(self) -> None:
        """Drop unwatched entries from the deadline heap."""
        live = [d for d in self._deadlines if d.watch is not None]
        heapq.heapify(live)
        self._deadlines = live
        self._dead = 0
        self._arm(asyncio.get_running_loop())

    def deliver(self, request: ApprovalRequest) -> None:
        """A decision this process just made (`ApprovalStore.on_decided`: the request as the
        compare-and-set's script left it), or a decided request this process just read (the
        dispatcher, before it draws the message): settle the callers waiting on it now. The
        message still comes and is ignored when nobody waits any more."""
        if not request.is_pending and request.id in self._watches:
            self._settle(request.id, result=request)

    async def read(self, request_id: str) -> ApprovalRequest:
        """The request as it is now (`NotFound` if unknown), read in one batch with the other
        callers' reads on the Waiter's own connection: a burst of thousands of long-polls
        arriving at once uses no more Redis connections than one does. Needs `start()`."""
        fut: asyncio.Future[ApprovalRequest] = asyncio.get_running_loop().create_future()
        self._reads.setdefault(request_id, []).append(fut)
        self._check_wanted.set()
        return await fut

    def interrupt(self, error: Callable[[], Exception]) -> int:
        """Fail every `interruptible` wait, now and from now on, with `error()` (the bot's
        shutdown answers parked long-polls this way); returns how many were waiting."""
        self._interrupted = error
        failed = 0
        for w in self._all():
            if w.interruptible and not w.done():
                w.set_exception(error())
                failed += 1
        return failed

    def _release_gone(self) -> None:
        """End the watches whose caller's connection has closed."""
        if not self._with_transport:
            return
        for w in self._all():
            if w.transport is not None and w.transport.is_closing() and not w.done():
                w.set_exception(CallerGone(f"the caller waiting on {w.request_id} went away"))

    # -- internals ---------------------------------------------------------------------

    def _request_check(self, ids: list[str]) -> None:
        self._to_check.update(ids)
        self._check_wanted.set()

    async def _listen(self) -> None:
        assert self._pubsub is not None
        backoff = 0.0  # the first reconnect is immediate, then 0.1 s doubling to 5 s
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
                backoff = 0.0
            except _REDIS_ERRORS as e:
                log.warning("waiter subscription lost error=%r retry_in=%.1fs", e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(max(backoff * 2, 0.1), 5.0)
                continue
            if message is None:
                continue
            kind = message.get("type")
            if kind == "subscribe":
                # (Re)subscribed: anything published while we were away must be re-read.
                self.subscriptions += 1
                self._subscribed.set()
                if self.subscriptions > 1:
                    log.info("waiter resubscribed waiting=%d", self.waiting)
                self._request_check(list(self._watches))
            elif kind == "message":
                request_id = message.get("data")
                if isinstance(request_id, str) and request_id in self._watches:
                    self._hinted.add(request_id)
                    self._check_wanted.set()

    async def _tick(self) -> None:
        """Every `gone_interval`, release watches whose caller left; every `recheck_interval`,
        re-read every waited id."""
        loop = asyncio.get_running_loop()
        recheck_at = loop.time() + self.recheck_interval
        while True:
            await asyncio.sleep(min(self.gone_interval, max(0.0, recheck_at - loop.time())))
            self._release_gone()
            if loop.time() >= recheck_at:
                recheck_at = loop.time() + self.recheck_interval
                if self._watches:
                    self._request_check(list(self._watches))

    async def _check_loop(self) -> None:
        while True:
            await self._check_wanted.wait()
            self._check_wanted.clear()
            while self._hinted or self._reads or self._fresh or self._to_check:
                if self._reads and not self._hinted:
                    await self._serve_reads()
                    continue
                hinted = bool(self._hinted)
                queue = self._hinted or self._fresh or self._to_check
                chunk = list(itertools.islice(queue, self.batch_size))
                queue.difference_update(chunk)
                batch = [i for i in chunk if i in self._watches]
                if not batch:
                    continue
                try:
                    await (self._read(batch) if hinted else self._check(batch))
                except _REDIS_ERRORS as e:
                    log.warning("waiter check failed error=%r ids=%d", e, len(batch))
                    self._to_check.update(batch)
                    await asyncio.sleep(0.5)
                except Exception:
                    log.exception("waiter check crashed ids=%d", len(batch))
                    await asyncio.sleep(0.5)

    async def _serve_reads(self) -> None:
        """One batch of `read()`s: one pipeline on the Waiter's client."""
        ids = list(itertools.islice(self._reads, self.batch_size))
        waiting = {i: self._reads.pop(i) for i in ids}
        try:
            found = await self.store.get_many(ids)
        except Exception as e:
            log.warning("waiter read failed error=%r ids=%d", e, len(ids))
            for futures in waiting.values():
                for fut in futures:
                    if not fut.done():
                        fut.set_exception(e)
            return
        for request_id, futures in waiting.items():
            request = found.get(request_id)
            if request is not None and not request.is_pending:
                self._settle(request_id, result=request)
            for fut in futures:
                if fut.done():
                    continue
                if request is None:
                    fut.set_exception(NotFound(f"no approval request with id {request_id!r}"))
                else:
                    fut.set_result(request)

    async def _read(self, ids: list[str]) -> None:
        """One round trip: settle what is decided; what is missing gets a careful re-check."""
        found = await self.store.get_many(ids)
        for request_id, request in found.items():
            if not request.is_pending:
                self._settle(request_id, result=request)
        missing = [i for i in ids if i not in found]
        if missing:
            self._request_check(missing)

    async def _check(self, ids: list[str]) -> None:
        """Statuses first (cheap), then whole requests for the decided ones."""
        statuses = await self.store.status_many(ids)
        done = [i for i, s in statuses.items() if s is not None and s != "pending"]
        missing = [i for i, s in statuses.items() if s is None]
        found = await self.store.get_many(done) if done else {}
        for request_id, request in found.items():
            self._settle(request_id, result=request)
        for request_id in missing:
            self._settle(request_id, error=NotFound(f"no approval request with id {request_id!r}"))

    def _settle(
        self,
        request_id: str,
        *,
        result: ApprovalRequest | None = None,
        error: Exception | None = None,
    ) -> None:
        w = self._watches.get(request_id)
        settled: list[Watch] = []
        while w is not None:
            if not w.done():
                if error is not None:
                    w.set_exception(error)
                else:
                    w.set_result(result)  # type: ignore[arg-type]
                if w.on_settle is not None:
                    settled.append(w)
            w = w.next
        # After the walk: a hook may unwatch its watch, which unchains it.
        for w in settled:
            hook, w.on_settle = w.on_settle, None
            try:
                hook(w)  # type: ignore[misc]
            except Exception:  # the decider must not fail for it: its done callbacks still run
                log.exception("a settled watch's hook failed id=%s", request_id)
