"""The webhook worker: delivers signed decision callbacks, at least once, guarded against SSRF.

`WebhookWorker` reads `Keys.webhook_queue` in the `webhooks` consumer group
(`approvals/_internal/store/webhooks.py`), signs each request's body per Standard Webhooks with
its principal's secret and POSTs it: 2xx delivered; a timeout, connection error, 5xx or 429
retried with backoff until `give_up_after`; anything else failed at once. It acks an entry
only with the record of its outcome. `GuardedResolver` connects only to addresses the policy
allows. The rules and why: docs/ARCHITECTURE.md, "Decision webhooks".
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from standardwebhooks import Webhook
from yarl import URL

from approvals._internal.store.outbox import OutboxEntry
from approvals._internal.store.webhooks import (
    DEFAULT_PRINCIPAL,
    Attempt,
    Deliveries,
    Delivery,
    WebhookSecrets,
    envelope,
    webhook_id,
)
from approvals.errors import NotFound
from approvals.models import ApprovalRequest
from approvals.webhooks import CallbackPolicy, parse_ip
from bot.core.context import BotContext
from bot.http.schemas import approval_object

log = logging.getLogger(__name__)

USER_AGENT = "approval-bot-webhooks/1"


@dataclass
class WebhookOptions:
    #: One attempt's time limit (connect + send + response headers), seconds.
    timeout: float = 10.0
    #: Entries read but not acked this long are taken over by another worker.
    claim_idle_ms: int = 60_000
    read_block_ms: int = 1000
    #: Deliveries attempted at once by one process.
    concurrency: int = 32
    #: The first retry waits about this long; each further one twice as long ...
    backoff_base: float = 5.0
    #: ... up to this long.
    backoff_max: float = 3600.0
    #: A delivery still failing this long after its first attempt is given up.
    give_up_after: float = 24 * 3600.0
    #: How often due retries are put back on the queue.
    retry_poll_interval: float = 1.0


class CallbackRefused(Exception):
    """The callback's address or host is not allowed: never retried."""


def principal_of(request: ApprovalRequest) -> str:
    """Whose secret signs `request`'s webhook: the API token's principal that asked, or
    `default` for a trusted caller without one (Redis transport, in-process)."""
    return request.principal or DEFAULT_PRINCIPAL


class GuardedResolver(AbstractResolver):
    """Resolves through `inner`, then refuses the whole answer if any address is not allowed
    by the current policy (a mixed public/private answer is a rebinding trick)."""

    def __init__(
        self,
        policy: Callable[[], CallbackPolicy],
        inner: AbstractResolver | None = None,
    ) -> None:
        self.policy = policy
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        policy = self.policy()
        for result in results:
            if not policy.address_allowed(result["host"]):
                raise CallbackRefused(
                    f"{host} resolves to {result['host']}, a private, loopback or link-local "
                    "address that callbacks.allowed_hosts does not allow"
                )
        return results

    async def close(self) -> None:
        await self.inner.close()


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """`Retry-After` as seconds (delta-seconds or an HTTP date); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def backoff(attempt: int, options: WebhookOptions, rng: random.Random) -> float:
    """Exponential backoff with jitter: half the step fixed, half random ("equal jitter")."""
    step = min(options.backoff_max, options.backoff_base * 2 ** max(0, attempt - 1))
    return float(step / 2 + rng.uniform(0, step / 2))


class WebhookWorker:
    """Consumes the webhook queue and moves due retries back onto it."""

    def __init__(
        self,
        ctx: BotContext,
        consumer: str,
        options: WebhookOptions | None = None,
        *,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.ctx = ctx
        self.options = options or WebhookOptions()
        self.deliveries = Deliveries(ctx.redis, ctx.keys, consumer)
        self.secrets = WebhookSecrets(ctx.redis, ctx.keys)
        self._resolver = GuardedResolver(lambda: self.ctx.service.policy.callbacks, resolver)
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(self.options.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: set[str] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._rng = random.Random()

    async def start(self) -> None:
        await self.deliveries.queue.ensure_group()
        # No DNS cache: every connection's addresses are resolved and checked against the
        # policy as it is then (a SIGHUP may have narrowed it).
        connector = aiohttp.TCPConnector(
            resolver=self._resolver, limit=self.options.concurrency, use_dns_cache=False
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.options.timeout),
            trust_env=False,  # never through a proxy from the environment
            headers={"User-Agent": USER_AGENT},
        )
        consumer = self.deliveries.queue.consumer
        self._loops = [
            asyncio.create_task(self._read_loop(), name=f"webhooks-{consumer}"),
            asyncio.create_task(self._retry_loop(), name=f"webhook-retries-{consumer}"),
        ]

    async def stop(self) -> None:
        """Stop reading; let attempts under way finish (up to one timeout), so a restart does
        not leave them to be claimed a minute later; then cancel what is left."""
        for task in self._loops:
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.options.timeout + 1)
        tasks = [*self._loops, *self._tasks]
        for task in tasks:
            task.cancel()
        if tasks:  # bounded: stopping never hangs on a task slow to unwind
            done, stuck = await asyncio.wait(tasks, timeout=5.0)
            for task in done:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
            if stuck:
                log.warning("webhook worker stopped with %d tasks still unwinding", len(stuck))
        self._loops = []
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- loops ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        queue = self.deliveries.queue
        last_claim = 0.0
        while True:
            try:
                free = self.options.concurrency - len(self._tasks)
                if free <= 0:
                    await asyncio.sleep(0.05)
                    continue
                entries: list[OutboxEntry] = []
                if time.monotonic() - last_claim > max(1.0, self.options.claim_idle_ms / 3000):
                    last_claim = time.monotonic()
                    stale = await queue.claim_stale(self.options.claim_idle_ms, count=free)
                    entries += [e for e in stale if e.entry_id not in self._in_flight]
                if len(entries) < free:
                    entries += await queue.read(
                        count=free - len(entries), block_ms=self.options.read_block_ms
                    )
                for entry in entries:
                    self._in_flight.add(entry.entry_id)
                    task = asyncio.create_task(self._handle(entry))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("webhook queue read failed error=%r", e)
                self.ctx.metrics.redis_errors.labels(component="webhooks").inc()
                await asyncio.sleep(1.0)

    async def _retry_loop(self) -> None:
        while True:
            try:
                while await self.deliveries.move_due() >= 100:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("webhook retry scan failed error=%r", e)
                self.ctx.metrics.redis_errors.labels(component="webhooks").inc()
            await asyncio.sleep(self.options.retry_poll_interval)

    async def _handle(self, entry: OutboxEntry) -> None:
        try:
            async with self._slots:
                await self.deliver(
                    entry.request_id, entry_id=entry.entry_id, fresh=entry.op == "decided"
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            # Left unacked: claimed again after claim_idle_ms. Nothing is dropped.
            log.exception(
                "webhook delivery failed entry=%s id=%s", entry.entry_id, entry.request_id
            )
        finally:
            self._in_flight.discard(entry.entry_id)

    # -- one delivery ------------------------------------------------------------------------

    async def deliver(
        self, request_id: str, *, entry_id: str | None = None, fresh: bool = False
    ) -> Delivery | None:
        """Attempt the request's webhook once and record the outcome (acking `entry_id`)."""
        delivery = await self._open(request_id, entry_id, fresh)
        if delivery is None:
            return None
        if delivery.status in ("delivered", "failed"):
            if entry_id is not None:
                await self.deliveries.queue.ack(entry_id)  # a duplicate entry: already settled
            return delivery
        lock = self.ctx.keys.lock(f"webhook:{delivery.id}")
        lease = int(self.options.timeout) + 1  # an attempt never outlives it
        if not await self.ctx.redis.set(lock, self.deliveries.queue.consumer, nx=True, ex=lease):
            log.info("webhook being attempted elsewhere id=%s", delivery.id)
            return delivery  # left unacked: if that attempt dies, this entry comes back
        try:
            attempt, next_at = await self._attempt(delivery)
        except BaseException:
            await self.ctx.redis.delete(lock)
            raise
        after = await self.deliveries.record(
            delivery, attempt, next_at=next_at, entry_id=entry_id, unlock=lock
        )
        self._count(attempt)
        log.info(
            "webhook attempt id=%s url_host=%s outcome=%s status=%s error=%s",
            delivery.id,
            URL(delivery.url).host,
            attempt.outcome,
            attempt.status,
            attempt.error,
        )
        return after

    async def _open(self, request_id: str, entry_id: str | None, fresh: bool) -> Delivery | None:
        """The request's delivery; `fresh` (the decision's own entry): opened from the request
        (`Deliveries.open` returns an existing one unchanged)."""
        if not fresh:
            existing = await self.deliveries.get(webhook_id(request_id))
            if existing is not None:
                return existing
        try:
            request = await self.ctx.store.get(request_id)
        except NotFound:
            log.warning("webhook for a vanished request id=%s", request_id)
            if entry_id is not None:
                await self.deliveries.queue.ack(entry_id)
            return None
        if request.callback is None or request.is_pending:
            log.warning("webhook entry without a decided callback id=%s", request_id)
            if entry_id is not None:
                await self.deliveries.queue.ack(entry_id)
            return None
        data = approval_object(request)
        decided_at = request.decision.decided_at if request.decision else None
        return await self.deliveries.open(
            request_id,
            principal=principal_of(request),
            url=request.callback.url,
            body=envelope(data, decided_at),
        )

    async def _attempt(self, delivery: Delivery) -> tuple[Attempt, datetime | None]:
        started = time.monotonic()
        now = datetime.now(UTC)
        status: int | None = None
        retry_after: float | None = None
        try:
            self._check_target(delivery.url)
            body = delivery.body
            headers = await self._sign(delivery, body, now)
            assert self._session is not None, "the worker is not started"
            async with self._session.post(
                delivery.url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                retry_after = retry_after_seconds(response.headers.get("Retry-After"), time.time())
            error = None if 200 <= status < 300 else f"HTTP {status}"
            retryable = status == 429 or status >= 500
        except CallbackRefused as e:
            error, retryable = f"refused: {e}", False
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            error, retryable = f"{type(e).__name__}: {e}"[:500] or type(e).__name__, True
        duration_ms = (time.monotonic() - started) * 1000
        if error is None:
            done = Attempt(at=now, status=status, duration_ms=duration_ms, outcome="delivered")
            return done, None
        next_at = None
        if retryable:
            delay = backoff(delivery.attempts + 1, self.options, self._rng)
            if retry_after is not None:
                delay = max(retry_after, 0.0)
            next_at = now + timedelta(seconds=delay)
            deadline = delivery.window_start + timedelta(seconds=self.options.give_up_after)
            if next_at > deadline:
                retryable = False
                error += f"; gave up after {self.options.give_up_after / 3600:g} h of retries"
        attempt = Attempt(
            at=now,
            status=status,
            error=error,
            duration_ms=duration_ms,
            outcome="retry" if retryable else "failed",
        )
        return attempt, next_at if retryable else None

    def _check_target(self, url: str) -> None:
        """The policy as it is now: the host must still be allowed; an address literal is
        checked here (aiohttp does not resolve one, so `GuardedResolver` never sees it)."""
        policy = self.ctx.service.policy.callbacks
        reason = policy.refusal(url)
        if reason:
            raise CallbackRefused(reason)
        host = URL(url).raw_host or ""
        ip = parse_ip(host)
        if ip is not None and not policy.address_allowed(ip):
            raise CallbackRefused(f"{host} is a private, loopback or link-local address")

    async def _sign(self, delivery: Delivery, body: str, now: datetime) -> dict[str, str]:
        secrets = await self.secrets.signing(delivery.principal)
        signatures = [Webhook(s).sign(delivery.id, now, body) for s in secrets]
        return {
            "webhook-id": delivery.id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": " ".join(signatures),
            "Content-Type": "application/json",
        }

    def _count(self, attempt: Attempt) -> None:
        m = self.ctx.metrics
        m.webhook_attempts.inc()
        m.webhook_attempt_seconds.observe(attempt.duration_ms / 1000)
        if attempt.outcome == "delivered":
            m.webhook_delivered.inc()
        else:
            m.webhook_attempt_failures.inc()
        if attempt.outcome == "failed":
            m.webhook_failed.inc()
