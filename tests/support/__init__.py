"""Helpers shared by the tests and the benchmarks: `delete_prefix`, `decide_next` here; the Slack
Web API emulator (`slack_emulator`), a fault-injecting Redis proxy (`redis_proxy`) and the
end-to-end harness (`e2e`, registered as a pytest plugin in `tests/conftest.py`)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, Literal

import aiohttp
from redis.asyncio import Redis

from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalRequest

#: The Slack reviewer `decide_next` decides as.
REVIEWER = Actor("U0REVIEWER", via="slack")


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


async def decide_next(
    service: ApprovalService,
    tool: str,
    outcome: Literal["approve", "deny"] = "approve",
    *,
    within: float = 10.0,
    **decision: Any,
) -> ApprovalRequest:
    """Wait (at most `within` s) for a pending request for `tool`, then decide it as
    `REVIEWER` would in Slack; `decision`: reason, input, selection, for_session."""
    async with asyncio.timeout(within):
        while True:
            found = [r for r in await service.store.list_pending() if r.event.tool_name == tool]
            if found:
                break
            await asyncio.sleep(0.02)
    result = await service.decide(found[0].id, outcome, REVIEWER, **decision)
    assert result.status == "decided", result
    return result.request


async def eventually(
    check: Callable[[], Any], *, within: float = 10.0, what: str = "the condition"
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy and return that; fail
    after `within` s. For "it has started" preconditions, instead of a fixed sleep that a
    loaded machine may outlast."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        await asyncio.sleep(0.01)


async def wait_healthy(port: int, within: float = 30) -> dict[str, Any]:
    """Poll a local `serve`'s `/healthz` until it answers 200; return its JSON."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return dict(await resp.json())
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("serve never became healthy")
