"""The bot's dependencies, built once at start-up and handed to every part (no globals)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from approvals._internal.service import ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from bot.ops.metrics import Metrics


class ApiCalls:
    """The agent API calls being answered now (creates, cancels: `bot/http/api.py` `guard`). The
    dispatcher lets a burst of them go first (`bot/slack/delivery/dispatcher.py` `_after_api`):
    under a burst of
    thousands, Slack posts wait a moment rather than take turns with the answers agents
    wait for."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self.count += 1
        self._idle.clear()

    def __exit__(self, *exc: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def idle(self, within: float) -> bool:
        """Until no call is being answered, at most `within` seconds: whether none is."""
        if self.count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), within)
        return not self.count


@dataclass
class BotContext:
    """What the Slack listeners, the HTTP API, the dispatcher and the sweeper share."""

    redis: Redis
    keys: Keys
    store: ApprovalStore
    service: ApprovalService
    waiter: Waiter
    #: Bearer tokens the HTTP API accepts, `name:token` or bare (plain strings; never logged).
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    #: Tokens whose principals may see every principal's requests.
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)
    #: slack_sdk AsyncWebClient, or None when Slack is not configured.
    slack: Any = None
    #: `bot.slack.link.SlackLink` (its `state` is what /healthz says of Slack), once started.
    slack_link: Any = None
    #: `bot.slack.home.HomePublisher` (keeps App Home tabs current), once Slack is configured.
    home: Any = None
    #: `bot.slack.delivery.reminders.Reminders` (reminders, decision notices), once Slack is
    # configured.
    reminders: Any = None
    #: Longest `?wait=` the HTTP API honours, in seconds.
    max_wait_seconds: float = 60.0
    #: Largest request body the HTTP API reads, in bytes (as the hook endpoint: 4 MiB).
    max_body_bytes: int = 4 * 1024 * 1024
    #: This bot's Prometheus metrics (its own registry), served at /metrics.
    metrics: Metrics = field(default_factory=Metrics)
    #: Set when the bot starts shutting down (SIGTERM): no new work is taken and parked
    #: waits are answered (`bot/core/shutdown.py`).
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    #: Agent API calls being answered now (the dispatcher lets them go first).
    api_calls: ApiCalls = field(default_factory=ApiCalls)
