"""The deadline sweeper: on every replica, expires (or escalates) requests whose time is up.

Runs once at start-up — so requests that fell due while every bot process was
stopped are settled as soon as one starts — and then every `interval`
seconds. The store's compare-and-set makes two replicas sweeping at once
harmless; the Slack messages are updated through the outbox.
"""

from __future__ import annotations

import asyncio
import logging

from approvals._internal.service import ApprovalService, ExpiryResult
from approvals._internal.store.connection import cancel_and_wait

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, service: ApprovalService, interval: float = 1.0) -> None:
        self.service = service
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> list[ExpiryResult]:
        """Settle everything due now; returns what was done."""
        done: list[ExpiryResult] = []
        while True:
            batch = await self.service.expire_due(limit=200)
            done.extend(batch)
            if len(batch) < 200 or all(r.action == "skipped" for r in batch):
                break
        for result in done:
            if result.action != "skipped":
                log.info("deadline passed id=%s action=%s", result.request_id, result.action)
        return done

    async def start(self) -> None:
        await self.sweep()
        self._task = asyncio.create_task(self._run(), name="sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception as e:
                log.warning("sweep failed error=%r", e)
