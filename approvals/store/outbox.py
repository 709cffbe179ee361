"""The outbox stream: work for Slack (post / update / escalated), read in a consumer group.

Internal to approval-bot (not a stable API); agents import from `approvals`.

`Outbox` is the consumer-group machinery for any such work stream: the
webhook deliveries (`Keys.webhook_queue`, group `webhooks`) use it too.

Any replica may take an entry; one that dies holding entries has them claimed
by another after `min_idle_ms` (XAUTOCLAIM). Entries are acked once handled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from approvals.store.keys import Keys

log = logging.getLogger(__name__)

GROUP = "bot"


@dataclass(frozen=True)
class OutboxEntry:
    entry_id: str
    op: str
    request_id: str
    fields: dict[str, str]


def _entries(rows: list[tuple[str, dict[str, str]] | list[object]]) -> list[OutboxEntry]:
    out = []
    for row in rows:
        entry_id, fields = row[0], row[1]
        if not isinstance(fields, dict):  # deleted entry (trimmed) returns None fields
            continue
        out.append(OutboxEntry(str(entry_id), fields.get("op", ""), fields.get("id", ""), fields))
    return out


class Outbox:
    """Consumer-group access to a work stream (default `Keys.outbox`) for one consumer name."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        consumer: str,
        *,
        group: str = GROUP,
        stream: str | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.consumer = consumer
        self.group = group
        self.stream = stream or keys.outbox

    async def ensure_group(self) -> None:
        """Create the stream and group if missing (from the start: nothing queued is skipped)."""
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        await self.redis.expire(self.stream, self.keys.retention_seconds)

    async def read(self, count: int = 50, block_ms: int = 1000) -> list[OutboxEntry]:
        """New entries for this consumer, waiting up to `block_ms`."""
        try:
            result = await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms
            )
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            await self.ensure_group()
            return []
        if not result:
            return []
        rows = result[0][1] if isinstance(result, list) else next(iter(result.values()))[0]
        return _entries(cast(list[tuple[str, dict[str, str]] | list[object]], rows))

    async def claim_stale(self, min_idle_ms: int, count: int = 50) -> list[OutboxEntry]:
        """Take over entries another consumer read but did not ack within `min_idle_ms`."""
        try:
            result = await self.redis.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=min_idle_ms,
                start_id="0-0",
                count=count,
            )
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            await self.ensure_group()
            return []
        entries = _entries(cast(list[tuple[str, dict[str, str]] | list[object]], result[1]))
        if entries:
            log.info("outbox entries claimed consumer=%s count=%d", self.consumer, len(entries))
        return entries

    async def ack(self, *entry_ids: str) -> int:
        if not entry_ids:
            return 0
        return int(await self.redis.xack(self.stream, self.group, *entry_ids))

    async def pending_count(self) -> int:
        info = await self.redis.xpending(self.stream, self.group)
        return int(info["pending"]) if isinstance(info, dict) else int(info[0])
