"""The outbox stream: work for Slack (post / update / escalated), read in a consumer group.

Internal to approval-bot (not a stable API); agents import from `approvals`.

`Outbox` is the consumer-group machinery of any such work stream (the webhook deliveries use
it too): read, ack once handled, take again what is owed (`owed`, `take_again`, or
`claim_stale`), heartbeat, and `reap` a gone replica's entries (lua/reap.lua). How entries stay
owed: docs/ARCHITECTURE.md, "The outbox and replicas".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from approvals._internal.store.keys import Keys
from approvals._internal.store.store import load_script_source

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


@dataclass(frozen=True)
class Owed:
    """An entry in this consumer's pending list: how long since it was last handed out, and
    how many times it has been (1 = never retried)."""

    entry_id: str
    idle_ms: int
    deliveries: int


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
        token: str = "",
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.consumer = consumer
        self.group = group
        self.stream = stream or keys.outbox
        #: This run of the consumer (a restart under the same name is another run).
        self.token = token or uuid.uuid4().hex[:12]
        self._reap = redis.register_script(load_script_source("reap"))

    @property
    def holder(self) -> str:
        """How this run names itself in locks it takes: "consumer token"."""
        return f"{self.consumer} {self.token}"

    async def ensure_group(self) -> None:
        """Create the stream and group if missing (from the start: nothing queued is skipped)."""
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        await self.redis.expire(self.stream, self.keys.retention_seconds)

    # -- liveness ---------------------------------------------------------------------

    async def heartbeat(self, ttl_ms: int) -> None:
        """Say this replica is alive for the next `ttl_ms`."""
        await self.redis.set(self.keys.replica(self.consumer), self.token, px=ttl_ms)

    async def leave(self) -> None:
        """Stop the heartbeat now (a clean stop): others take this consumer's entries at once."""
        key = self.keys.replica(self.consumer)
        if await self.redis.get(key) == self.token:
            await self.redis.delete(key)

    async def holder_alive(self, holder: str) -> bool:
        """Whether the run named `holder` (see `holder`) is still heartbeating."""
        consumer, _, token = holder.partition(" ")
        return bool(token) and await self.redis.get(self.keys.replica(consumer)) == token

    async def reap(self, gone_after_ms: int, count: int = 1000) -> int:
        """Take the entries of consumers that are gone (no heartbeat, and idle at least
        `gone_after_ms`) and remove those consumers from the group. Returns entries taken."""
        try:
            consumers = await self.redis.xinfo_consumers(self.stream, self.group)
        except ResponseError as e:
            if "NOGROUP" not in str(e) and "no such key" not in str(e):
                raise
            return 0
        taken = 0
        for info in consumers:
            name = str(info["name"])
            if name == self.consumer or int(info.get("idle", 0)) < gone_after_ms:
                continue
            heartbeat = self.keys.replica(name)
            removed = 0
            while not removed:
                result = await self._reap(
                    keys=[self.stream, heartbeat],
                    args=[self.group, name, self.consumer, count],
                )
                if int(result[0]) < 0:
                    break  # alive after all (a slow reader)
                taken += int(result[0])
                removed = int(result[1])
            if removed:
                log.warning(
                    "replica gone: took its outbox entries consumer=%s by=%s",
                    name,
                    self.consumer,
                )
        return taken

    # -- reading ----------------------------------------------------------------------

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

    async def owed(self, count: int = 1000) -> list[Owed]:
        """This consumer's entries not yet acked (oldest first, at most `count`)."""
        try:
            rows = await self.redis.xpending_range(
                self.stream,
                self.group,
                min="-",
                max="+",
                count=count,
                consumername=self.consumer,
            )
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            return []
        return [
            Owed(str(r["message_id"]), int(r["time_since_delivered"]), int(r["times_delivered"]))
            for r in rows
        ]

    async def take_again(self, entry_ids: Sequence[str]) -> list[OutboxEntry]:
        """Hand this consumer's own owed entries to it again (their delivery count goes up,
        so the next backoff is longer). Entries trimmed from the stream meanwhile are dropped
        from the pending list by Redis and not returned."""
        if not entry_ids:
            return []
        rows = await self.redis.xclaim(
            self.stream,
            self.group,
            self.consumer,
            min_idle_time=0,
            message_ids=list[Any](entry_ids),
        )
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
