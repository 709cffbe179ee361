"""Waking waiting agents: one pub/sub connection per process fans decisions out to futures.

Internal to approval-bot (not a stable API); agents import from `approvals`.

The store publishes a request id on `Keys.decided_channel` when it leaves
`pending`. A `Waiter` holds one subscription and one checker task; `wait(id)`
registers a future, *then* asks the checker to read the state, so a decision
made before the wait began is found by the read and one made after is found
by the message. Whenever the subscription is (re)established — the server
confirms SUBSCRIBE — and on a slow periodic tick, every waited id is read
again, so a decision published while the connection was down is never missed.
All reads are batched into one pipeline, so Redis connections stay constant
in the number of waiters.

A wait costs one future, one timer and a registry entry (no task, no
`wait_for`/`shield`): the HTTP API parks thousands of long-polls on it.
`watch()` registers without the first read, for a caller that reads the
request itself right after (the API's long-poll: its read also checks the
caller's principal), through `read()`, batched on the Waiter's connection;
`interrupt()` fails every `interruptible` wait at once (the bot's drain);
`deliver()` settles waits from a decision this process just made.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals.errors import ApprovalTimeout, NotFound, StoreUnavailable
from approvals.models import ApprovalRequest
from approvals.store.connection import cancel_and_wait
from approvals.store.keys import Keys
from approvals.store.store import ApprovalStore

log = logging.getLogger(__name__)

# The store turns Redis connection errors into StoreUnavailable: a read that failed that way
# is retried, never dropped.
_REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError, StoreUnavailable)


class Watch:
    """One registered wait (`Waiter.watch`): the future its caller awaits, and its timer."""

    __slots__ = ("future", "interruptible", "request_id", "timer")

    def __init__(
        self,
        request_id: str,
        future: asyncio.Future[ApprovalRequest],
        timer: asyncio.TimerHandle | None,
        interruptible: bool,
    ) -> None:
        self.request_id = request_id
        self.future = future
        self.timer = timer
        self.interruptible = interruptible


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
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = store or ApprovalStore(redis, keys)
        self.recheck_interval = recheck_interval
        self.batch_size = batch_size
        # Per waited id, its callers' futures (a list: almost always one). A wait costs one
        # future, one timer and a list here: no task, no shield, no wait_for.
        self._futures: dict[str, list[asyncio.Future[ApprovalRequest]]] = {}
        # The futures of `interruptible` waits, failed at once by `interrupt()`.
        self._interruptible: set[asyncio.Future[ApprovalRequest]] = set()
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
        return sum(len(f) for f in self._futures.values())

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
                await self._pubsub.aclose()  # type: ignore[no-untyped-call]
            self._pubsub = None
        for futures in self._futures.values():
            for fut in futures:
                if not fut.done():
                    fut.cancel()
        self._futures.clear()
        self._interruptible.clear()
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
    ) -> ApprovalRequest:
        """The request once it is no longer pending; `ApprovalTimeout` when `timeout` passes
        first, `NotFound` for an unknown id. An `interruptible` wait raises the exception of
        `interrupt()` once that is called (or at once, if it was)."""
        if not self._tasks:
            await self.start()
        watch = self.watch(request_id, timeout, interruptible=interruptible)
        # Registered first, then read: a decision published from now on is heard, one made
        # before is found by this read (batched with other fresh waits).
        self._fresh.add(request_id)
        self._check_wanted.set()
        try:
            return await watch.future
        finally:
            self.unwatch(watch)

    def watch(
        self, request_id: str, timeout: float | None, *, interruptible: bool = False
    ) -> Watch:
        """Register a wait without reading the request: `watch.future` gets the request once
        a decision on it is *published* (or re-read after a reconnect, or on the periodic
        tick), `ApprovalTimeout` after `timeout`. The caller must read the request itself
        after this call (a decision made before it is not published again) and must call
        `unwatch` when done. For callers that read anyway (the HTTP long-poll: its own read
        checks the caller's principal) this saves the Waiter's first read. Needs `start()`."""
        if interruptible and self._interrupted is not None:
            raise self._interrupted()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[ApprovalRequest] = loop.create_future()
        waiters = self._futures.get(request_id)
        if waiters is None:
            self._futures[request_id] = [fut]
        else:
            waiters.append(fut)
        if interruptible:
            self._interruptible.add(fut)
        timer = (
            loop.call_later(timeout, _time_out, fut, request_id, timeout)
            if timeout is not None
            else None
        )
        return Watch(request_id, fut, timer, interruptible)

    def unwatch(self, watch: Watch) -> None:
        """Forget a `watch` (its future is cancelled if it has no outcome yet)."""
        fut = watch.future
        if watch.timer is not None:
            watch.timer.cancel()
        if watch.interruptible:
            self._interruptible.discard(fut)
        waiters = self._futures.get(watch.request_id)
        if waiters is not None:
            with contextlib.suppress(ValueError):
                waiters.remove(fut)
            if not waiters:
                del self._futures[watch.request_id]
        if not fut.done():
            fut.cancel()

    def deliver(self, request: ApprovalRequest) -> None:
        """A decision this process just made (`ApprovalStore.on_decided`: the request as the
        compare-and-set's script left it): settle the callers waiting on it now. The message
        still comes and is ignored when nobody waits any more; a decision made elsewhere takes
        the usual way (message, then a read)."""
        if not request.is_pending and request.id in self._futures:
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
        for fut in list(self._interruptible):
            if not fut.done():
                fut.set_exception(error())
                failed += 1
        return failed

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
                self._request_check(list(self._futures))
            elif kind == "message":
                request_id = message.get("data")
                if isinstance(request_id, str) and request_id in self._futures:
                    self._hinted.add(request_id)
                    self._check_wanted.set()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.recheck_interval)
            if self._futures:
                self._request_check(list(self._futures))

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
                batch = [i for i in chunk if i in self._futures]
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
        for fut in self._futures.get(request_id, ()):
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)  # type: ignore[arg-type]


def _time_out(fut: asyncio.Future[ApprovalRequest], request_id: str, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(ApprovalTimeout(f"no decision on {request_id} within {timeout:g} s"))
