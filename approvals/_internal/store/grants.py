"""Approve-for-session grants in Redis: give, find for a caller, list, revoke — each audited.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A grant is a JSON string (`Keys.grant`) expiring with it, its id in its
caller's bucket (`Keys.grant_bucket`: principal, session, agent, tool) and in
the `Keys.grants` index scored by expiry. Giving and revoking are one MULTI
each; an id whose grant has expired is dropped from the bucket when met.
What a grant allows is `approvals._internal.grant_scopes`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import cast

from redis.asyncio import Redis

from approvals._internal.grant_scopes import Grant
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import OUTBOX_MAXLEN, _guard, ts
from approvals.errors import NotFound
from approvals.models import ApprovalEvent

log = logging.getLogger(__name__)


class GrantStore:
    """The grants under one key prefix, on the store's Redis client."""

    def __init__(self, redis: Redis, keys: Keys, *, command_timeout: float | None = None) -> None:
        self.redis = redis
        self.keys = keys
        #: As `ApprovalStore.command_timeout` (read by `_guard`).
        self.command_timeout = command_timeout

    def _bucket(self, grant: Grant) -> str:
        return self.keys.grant_bucket(
            grant.principal, grant.session_id, grant.agent, grant.tool_name
        )

    def _audit(self, pipe: object, grant: Grant, event: str, by: str | None, at: datetime) -> None:
        pipe.xadd(  # type: ignore[attr-defined]
            self.keys.audit,
            {
                "id": grant.request_id,
                "event": event,
                "status": grant.scope,
                "by": by or "",
                "via": "grant",
                "at": ts(at),
                "reason": f"grant {grant.id}: {grant.label} (session {grant.session_id})",
                "route": grant.route,
            },
            maxlen=OUTBOX_MAXLEN,
            approximate=True,
        )

    @_guard
    async def give(self, grant: Grant) -> Grant:
        """Store `grant` until its `expires_at`; audited as `granted`."""
        ttl = max(1, int((grant.expires_at - grant.granted_at).total_seconds()))
        bucket = self._bucket(grant)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.grant(grant.id), grant.model_dump_json(), ex=ttl)
            pipe.sadd(bucket, grant.id)
            pipe.expire(bucket, ttl)
            pipe.zadd(self.keys.grants, {grant.id: grant.expires_at.timestamp()})
            pipe.expire(self.keys.grants, self.keys.retention_seconds)
            self._audit(pipe, grant, "granted", grant.decided_by, grant.granted_at)
            await pipe.execute()
        log.info(
            "grant given id=%s scope=%s session=%s tool=%s request=%s",
            grant.id,
            grant.scope,
            grant.session_id,
            grant.tool_name,
            grant.request_id,
        )
        return grant

    @_guard
    async def find(self, principal: str | None, event: ApprovalEvent, route: str) -> Grant | None:
        """A live grant given to this caller for this tool, on `route`, that allows `event`."""
        if not event.session_id:
            return None
        bucket = self.keys.grant_bucket(principal, event.session_id, event.agent, event.tool_name)
        ids = sorted(cast(set[str], await self.redis.smembers(bucket)))
        if not ids:
            return None
        rows = await self.redis.mget([self.keys.grant(i) for i in ids])
        gone = [i for i, row in zip(ids, rows, strict=True) if row is None]
        if gone:
            await self.redis.srem(bucket, *gone)
        for row in rows:
            if row is None:
                continue
            grant = Grant.model_validate_json(row)
            if grant.route == route and grant.allows(event):
                return grant
        return None

    @_guard
    async def get(self, grant_id: str) -> Grant:
        raw = await self.redis.get(self.keys.grant(grant_id))
        if raw is None:
            raise NotFound(f"no live grant with id {grant_id!r}")
        return Grant.model_validate_json(raw)

    @_guard
    async def list(self, now: datetime | None = None) -> list[Grant]:
        """Live grants, soonest to expire first."""
        moment = (now or datetime.now(UTC)).timestamp()
        await self.redis.zremrangebyscore(self.keys.grants, "-inf", moment)
        ids = cast(list[str], await self.redis.zrange(self.keys.grants, 0, -1))
        if not ids:
            return []
        rows = await self.redis.mget([self.keys.grant(i) for i in ids])
        return [Grant.model_validate_json(row) for row in rows if row is not None]

    @_guard
    async def revoke(self, grant_id: str, *, by: str, now: datetime | None = None) -> Grant:
        """End a grant now (`NotFound` if it is unknown or expired); audited as `revoked`."""
        grant = await self.get(grant_id)
        at = now or datetime.now(UTC)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.grant(grant.id))
            pipe.srem(self._bucket(grant), grant.id)
            pipe.zrem(self.keys.grants, grant.id)
            self._audit(pipe, grant, "grant_revoked", by, at)
            deleted = (await pipe.execute())[0]
        if not deleted:  # revoked (or expired) in between
            raise NotFound(f"no live grant with id {grant_id!r}")
        log.info("grant revoked id=%s by=%s", grant.id, by)
        return grant


def expiry(granted_at: datetime, ttl_seconds: float) -> datetime:
    return granted_at + timedelta(seconds=max(1.0, ttl_seconds))
