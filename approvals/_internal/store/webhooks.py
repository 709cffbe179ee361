"""Webhook deliveries and signing secrets in Redis: the state behind `bot/workers/webhooks.py`.

A decided request's id is queued on `Keys.webhook_queue` by the script that decides it; a
`Delivery` (one per request, its id the `webhook-id`) records every attempt and ends delivered,
with a retry in `Keys.webhook_retries` (re-queued by `lua/webhook_due.lua`), or failed. Each
principal has a Standard Webhooks secret (`whsec_…`); after a rotation the previous one still
signs for a grace period. How: docs/ARCHITECTURE.md, "Decision webhooks".
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from approvals._internal.store.keys import Keys
from approvals._internal.store.outbox import Outbox
from approvals._internal.store.store import load_script_source
from approvals.errors import NotFound

DeliveryStatus = Literal["pending", "retrying", "delivered", "failed"]

#: The consumer group of `Keys.webhook_queue`.
GROUP = "webhooks"
#: Whose secret signs a request that has no principal.
DEFAULT_PRINCIPAL = "default"
#: After a rotation the previous secret keeps signing this long (receivers catch up).
ROTATION_GRACE_SECONDS = 24 * 3600
#: A secret unused this long is forgotten (every key has a TTL); each use renews it.
SECRET_TTL_SECONDS = 400 * 24 * 3600
#: Attempts kept per delivery (the oldest are dropped past it).
MAX_ATTEMPTS_KEPT = 200
#: Deliveries listed (the index keeps the newest this many).
MAX_INDEXED = 10_000
QUEUE_MAXLEN = 100_000


def webhook_id(request_id: str) -> str:
    """The `webhook-id` of a request's decision: the same on every attempt and every retry."""
    return f"msg_{request_id}"


def request_id_of(delivery_id: str) -> str:
    """The request id a delivery id (or a request id) names."""
    return delivery_id[4:] if delivery_id.startswith("msg_") else delivery_id


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class Attempt(BaseModel):
    """One try at delivering: when, the HTTP status (None: no response), what went wrong."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    status: int | None = None
    error: str | None = None
    duration_ms: float = 0.0
    outcome: Literal["delivered", "retry", "failed"]


class Delivery(BaseModel):
    """A request's decision webhook (`Keys.webhook`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    request_id: str
    principal: str
    url: str
    status: DeliveryStatus = "pending"
    attempts: int = 0
    created_at: datetime
    #: Retries stop this long after it (reset by `Deliveries.retry`).
    window_start: datetime
    next_at: datetime | None = None
    delivered_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None
    #: The signed body, the same on every attempt (left out of `summary`).
    body: str = Field(default="", exclude=True, repr=False)

    def summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def after(self, attempt: Attempt, next_at: datetime | None) -> Delivery:
        """This delivery as `Deliveries.record` leaves it."""
        return self.model_copy(
            update={
                "status": _STATUS_AFTER[attempt.outcome],
                "attempts": self.attempts + 1,
                "last_status": attempt.status,
                "last_error": attempt.error,
                "next_at": next_at if attempt.outcome == "retry" else None,
                "delivered_at": attempt.at if attempt.outcome == "delivered" else None,
            }
        )


_STATUS_AFTER: dict[str, DeliveryStatus] = {
    "delivered": "delivered",
    "failed": "failed",
    "retry": "retrying",
}


def _ts(dt: datetime) -> str:
    return f"{dt.timestamp():.6f}"


def _dt(text: str | None) -> datetime | None:
    return datetime.fromtimestamp(float(text), UTC) if text else None


class WebhookSecrets:
    """Per-principal signing secrets (`Keys.webhook_secret`)."""

    def __init__(self, redis: Redis, keys: Keys, *, clock: Callable[[], float] = time.time):
        self.redis = redis
        self.keys = keys
        self.clock = clock

    async def current(self, principal: str) -> str:
        """The principal's secret, made on first use."""
        key = self.keys.webhook_secret(principal)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "current", new_secret())
            pipe.hget(key, "current")
            pipe.expire(key, SECRET_TTL_SECONDS)
            _, secret, _ = await pipe.execute()
        return str(secret)

    async def signing(self, principal: str) -> list[str]:
        """The secrets a webhook is signed with: the current one, and the previous one while
        its rotation grace lasts (each gives one signature in `webhook-signature`)."""
        key = self.keys.webhook_secret(principal)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "current", new_secret())
            pipe.expire(key, SECRET_TTL_SECONDS)
            pipe.hmget(key, ["current", "previous", "previous_until"])
            _, _, (current, previous, until) = await pipe.execute()
        if previous and until and float(until) > self.clock():
            return [str(current), str(previous)]
        return [str(current)]

    async def rotate(self, principal: str, grace_seconds: float = ROTATION_GRACE_SECONDS) -> str:
        """A new current secret; the old one still signs for `grace_seconds`."""
        key = self.keys.webhook_secret(principal)
        old = await self.current(principal)
        fresh = new_secret()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                key,
                mapping={
                    "current": fresh,
                    "previous": old,
                    "previous_until": f"{self.clock() + grace_seconds:.3f}",
                },
            )
            pipe.expire(key, SECRET_TTL_SECONDS)
            await pipe.execute()
        return fresh


class Deliveries:
    """Reading and writing deliveries, and their work stream, for one consumer."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        consumer: str = "cli",
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.clock = clock
        self.queue = Outbox(redis, keys, consumer, group=GROUP, stream=keys.webhook_queue)
        self._due: AsyncScript = redis.register_script(load_script_source("webhook_due"))

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    # -- reading --------------------------------------------------------------------------

    def _from_hash(self, row: dict[str, str]) -> Delivery:
        return Delivery(
            id=row["id"],
            request_id=row["request_id"],
            principal=row.get("principal", DEFAULT_PRINCIPAL),
            url=row["url"],
            status=cast(DeliveryStatus, row.get("status", "pending")),
            attempts=int(row.get("attempts", "0")),
            created_at=_dt(row["created_at"]) or self.now(),
            window_start=_dt(row.get("window_start") or row["created_at"]) or self.now(),
            next_at=_dt(row.get("next_at")),
            delivered_at=_dt(row.get("delivered_at")),
            last_status=int(row["last_status"]) if row.get("last_status") else None,
            last_error=row.get("last_error") or None,
            body=row.get("body", ""),
        )

    async def get(self, delivery_id: str) -> Delivery | None:
        key = self.keys.webhook(webhook_id(request_id_of(delivery_id)))
        row = cast(dict[str, str], await self.redis.hgetall(key))
        return self._from_hash(row) if row.get("id") else None

    async def attempts(self, delivery_id: str) -> list[Attempt]:
        rows = await self.redis.lrange(self.keys.webhook_attempts(delivery_id), 0, -1)
        return [Attempt.model_validate_json(r) for r in rows]

    async def list(self, *, failed: bool = False, limit: int = 100) -> list[Delivery]:
        """The newest deliveries first; `failed`: only those that gave up."""
        ids = await self.redis.zrevrange(self.keys.webhook_index, 0, MAX_INDEXED)
        out: list[Delivery] = []
        for start in range(0, len(ids), 200):
            async with self.redis.pipeline(transaction=False) as pipe:
                for delivery_id in ids[start : start + 200]:
                    pipe.hgetall(self.keys.webhook(str(delivery_id)))
                rows = await pipe.execute()
            for row in rows:
                if not row.get("id"):
                    continue
                delivery = self._from_hash(row)
                if failed and delivery.status != "failed":
                    continue
                out.append(delivery)
                if len(out) >= limit:
                    return out
        return out

    # -- writing --------------------------------------------------------------------------

    async def open(self, request_id: str, *, principal: str, url: str, body: str) -> Delivery:
        """The request's delivery, made now if it is new (the first caller's body wins)."""
        delivery_id = webhook_id(request_id)
        key = self.keys.webhook(delivery_id)
        now = _ts(self.now())
        fields = {
            "id": delivery_id,
            "request_id": request_id,
            "principal": principal,
            "url": url,
            "body": body,
            "status": "pending",
            "attempts": "0",
            "created_at": now,
            "window_start": now,
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            for name, value in fields.items():
                pipe.hsetnx(key, name, value)
            pipe.expire(key, self.keys.retention_seconds)
            pipe.zadd(self.keys.webhook_index, {delivery_id: float(now)}, nx=True)
            pipe.zremrangebyrank(self.keys.webhook_index, 0, -MAX_INDEXED - 1)
            pipe.expire(self.keys.webhook_index, self.keys.retention_seconds)
            pipe.hgetall(key)
            result = await pipe.execute()
        return self._from_hash(result[-1])

    async def record(
        self,
        delivery: Delivery,
        attempt: Attempt,
        *,
        next_at: datetime | None = None,
        entry_id: str | None = None,
        unlock: str | None = None,
    ) -> Delivery:
        """Record one attempt and its consequence in one transaction: delivered, failed, or a
        retry due at `next_at`; the stream entry that asked for it is acked, and the lock
        key `unlock` deleted, in the same step."""
        key = self.keys.webhook(delivery.id)
        status = _STATUS_AFTER[attempt.outcome]
        fields: dict[Any, Any] = {
            "status": status,
            "last_status": "" if attempt.status is None else str(attempt.status),
            "last_error": attempt.error or "",
            "next_at": _ts(next_at) if next_at and attempt.outcome == "retry" else "",
        }
        if attempt.outcome == "delivered":
            fields["delivered_at"] = _ts(attempt.at)
        attempts_key = self.keys.webhook_attempts(delivery.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.hincrby(key, "attempts", 1)
            pipe.expire(key, self.keys.retention_seconds)
            pipe.rpush(attempts_key, attempt.model_dump_json())
            pipe.ltrim(attempts_key, -MAX_ATTEMPTS_KEPT, -1)
            pipe.expire(attempts_key, self.keys.retention_seconds)
            if attempt.outcome == "retry" and next_at is not None:
                pipe.zadd(self.keys.webhook_retries, {delivery.id: next_at.timestamp()})
                pipe.expire(self.keys.webhook_retries, self.keys.retention_seconds)
            if entry_id is not None:
                pipe.xack(self.keys.webhook_queue, GROUP, entry_id)
            if unlock is not None:
                pipe.delete(unlock)
            await pipe.execute()
        return delivery.after(attempt, next_at)

    async def retry(self, delivery_id: str) -> Delivery:
        """Operator: deliver again now, with a fresh retry window (same `webhook-id`)."""
        delivery = await self.get(delivery_id)
        if delivery is None:
            raise NotFound(f"no webhook delivery {delivery_id!r}")
        key = self.keys.webhook(delivery.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                key,
                mapping={"status": "pending", "window_start": _ts(self.now()), "next_at": ""},
            )
            pipe.zrem(self.keys.webhook_retries, delivery.id)
            pipe.xadd(
                self.keys.webhook_queue,
                {"op": "retry", "id": delivery.request_id},
                maxlen=QUEUE_MAXLEN,
                approximate=True,
            )
            pipe.expire(self.keys.webhook_queue, self.keys.retention_seconds)
            await pipe.execute()
        return await self.get(delivery.id) or delivery

    async def move_due(self, limit: int = 100) -> int:
        """Put retries whose time has come back on the stream; returns how many moved.
        Safe on every replica at once (one script: each is moved once)."""
        moved = await self._due(
            keys=[self.keys.webhook_retries, self.keys.webhook_queue],
            args=[f"{self.clock():.6f}", limit, QUEUE_MAXLEN, self.keys.retention_seconds],
        )
        return int(moved)

    async def lag(self) -> dict[str, int]:
        """Queue entries not yet acked and retries waiting (for /metrics and `doctor`)."""
        try:
            pending = await self.queue.pending_count()
        except Exception:
            pending = 0
        retrying = int(await self.redis.zcard(self.keys.webhook_retries))
        return {"queued": pending, "retrying": retrying}


def envelope(approval: dict[str, Any], decided_at: datetime | None) -> str:
    """The webhook body (Standard Webhooks' recommended shape): `type`, `timestamp`, and the
    approval object as `data`. Compact JSON; signed exactly as sent."""
    return json.dumps(
        {
            "type": "approval.decided",
            "timestamp": (decided_at or datetime.now(UTC)).isoformat(),
            "data": approval,
        },
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
