"""Helpers shared by the tests and the benchmarks (importable as `tests.support`)."""

from __future__ import annotations

from redis.asyncio import Redis

from approvals.keys import Keys


async def delete_prefix(redis: Redis, keys: Keys) -> int:
    """Delete every key under `keys.prefix` (never FLUSHALL a shared server)."""
    deleted = 0
    batch: list[str] = []
    async for key in redis.scan_iter(match=keys.pattern(), count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += await redis.delete(*batch)
            batch.clear()
    if batch:
        deleted += await redis.delete(*batch)
    return deleted
