"""Calls to Slack's Web API for the dispatcher: per-channel pacing, 429s, and what a failure means.

HTTP 429 waits `Retry-After` and tries again (nothing was done). A permanent
`ok:false` error raises `Permanent`. Anything else (5xx, a transient error, a
timeout, a dropped connection) may or may not have been done by Slack: an
idempotent call is retried a few times with backoff, and then, as a call made
`once` (chat.postMessage) is at once, raised as `Unsure`.

Every `chat.update` (request messages, their copies, escalation notes, digests) shares
one workspace-wide budget per process, `UPDATE_PACE` (Slack's Tier 3, about 50 a
minute, bursts tolerated), apart from the channels' post pacing: an update never waits
behind paced posts, and a 429 on an update holds back updates, not the channel's posts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals._internal.store.connection import wait_until_done
from approvals.models import SlackMessage
from bot.core.context import BotContext
from bot.masking.masker import Masked

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Slack errors (with HTTP 200) that a later attempt can get past. Every other `ok:false`
#: error (channel_not_found, not_in_channel, invalid_auth, …) is permanent: a post that
#: fails with one ends its request as an `error`.
TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)


#: The pace key of `chat.update`: one budget for the whole workspace (Tier 3).
UPDATE_PACE = "workspace:chat.update"

#: Methods sent as one JSON POST by the client's `post_json` (bot/slack/client.py), by their
#: slack_sdk names: the two calls every request makes.
JSON_METHODS = {"chat_postMessage": "chat.postMessage", "chat_update": "chat.update"}


class Permanent(Exception):
    """Slack refused the call and will refuse it again (`error` is Slack's code)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class Unsure(Exception):
    """The call failed in a way that does not say whether Slack did it."""


class ChannelPace:
    """A token bucket per channel: `burst` tokens, one back every `interval` seconds."""

    def __init__(self, interval: float, burst: int) -> None:
        self.interval = interval
        self.burst = burst
        self.tokens = float(burst)
        self.updated = time.monotonic()
        self.blocked_until = 0.0
        #: Callers waiting with priority (a digest message, bot/slack/delivery/digests.py): while
        # any waits,
        #: the dispatcher lists new requests in the digest rather than queue their posts.
        self.priority_waiters = 0

    def wait(self, posts: int = 1) -> float:
        """Seconds until `posts` more posts may have gone (0: now), taking no token."""
        now = time.monotonic()
        # After a 429 (`block_for`), `updated` is the end of the block and one token is left.
        start = max(now, self.updated, self.blocked_until)
        tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) / self.interval)
        return (start - now) + max(0.0, posts - tokens) * self.interval

    async def acquire(self, *, priority: bool = False) -> None:
        if priority:
            self.priority_waiters += 1
        try:
            while True:
                now = time.monotonic()
                if now < self.blocked_until:
                    await asyncio.sleep(self.blocked_until - now)
                    continue
                self.tokens = min(
                    self.burst, self.tokens + max(0.0, now - self.updated) / self.interval
                )
                self.updated = max(now, self.updated)
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) * self.interval)
        finally:
            if priority:
                self.priority_waiters -= 1

    def block_for(self, seconds: float) -> None:
        """Slack said 429: nothing until `Retry-After` has passed, then one post, no burst."""
        self.blocked_until = max(self.blocked_until, time.monotonic() + seconds)
        self.tokens = 1
        self.updated = self.blocked_until


def _without_retries(client: Any) -> Any:
    """The same client minus slack_sdk's own retry on a dropped connection: that retry would
    send chat.postMessage again when Slack may already have posted it."""
    if not isinstance(client, AsyncWebClient):
        return client
    return type(client)(  # the same class: e.g. bot/slack/client.py's masking client
        token=client.token,
        base_url=client.base_url,
        timeout=client.timeout,
        session=client.session,
        retry_handlers=[],
        logger=client.logger,
    )


class SlackCaller:
    """Makes Web API calls through `ctx.slack` with pacing, Retry-After and retries."""

    def __init__(
        self,
        ctx: BotContext,
        *,
        post_interval: float,
        burst: int,
        pacing: bool,
        max_attempts: int,
        backoff_base: float,
        backoff_max: float,
        update_interval: float = 1.2,
        update_burst: int = 3,
    ) -> None:
        self.ctx = ctx
        self.client = _without_retries(ctx.slack)
        self.post_interval = post_interval
        self.burst = burst
        self.pacing = pacing
        self.max_attempts = max(1, max_attempts)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._paces: dict[str, ChannelPace] = {}
        self._paces[UPDATE_PACE] = ChannelPace(update_interval, update_burst)
        self._bot_id: str | None = None
        self._units: set[asyncio.Task[Any]] = set()  # `whole` units under way

    def pace(self, channel: str) -> ChannelPace:
        pace = self._paces.get(channel)
        if pace is None:
            pace = self._paces[channel] = ChannelPace(self.post_interval, self.burst)
        return pace

    def add_pace(self, key: str, interval: float, burst: int) -> ChannelPace:
        """A pace of its own under `key` (e.g. a workspace-wide budget for one method)."""
        pace = self._paces[key] = ChannelPace(interval, burst)
        return pace

    async def bot_id(self) -> str:
        """This bot's `bot_id` (auth.test, asked once): its messages carry it."""
        if self._bot_id is None:
            try:
                answer = await self.call("-", "auth_test")
                self._bot_id = str(answer.get("bot_id") or "")
            except Permanent:
                self._bot_id = ""
        return self._bot_id

    async def permalink(self, message: SlackMessage) -> str | None:
        """The message's permalink (chat.getPermalink); None (logged) when Slack gives none."""
        try:
            answer = await self.call(
                message.channel,
                "chat_getPermalink",
                channel=message.channel,
                message_ts=message.ts,
            )
        except (Permanent, Unsure) as e:
            log.warning("no permalink channel=%s error=%s", message.channel, e)
            return None
        return str(answer.get("permalink") or "") or None

    async def dm_each(self, users: Iterable[str], text: str) -> None:
        """One paced DM to each user, once each, in order; a user who cannot be reached is
        logged and the others still get theirs."""
        for user in dict.fromkeys(users):
            try:
                await self.dm(user, text)
            except (Permanent, Unsure) as e:
                log.warning("could not DM reviewer user=%s error=%s", user, e)

    async def dm(self, user: str, text: str, *, once: bool = False) -> None:
        """One paced DM to `user` (conversations.open, then chat.postMessage); raises as
        `call` does, and `once` is `call`'s."""
        opened = await self.call(user, "conversations_open", users=user)
        dm = str(opened["channel"]["id"])
        await self.call(dm, "chat_postMessage", channel=dm, paced=True, once=once, text=text)

    async def dm_owed(
        self, users: Iterable[str], text: str, sent: Callable[[str], Awaitable[None]]
    ) -> None:
        """`dm_each`, for DMs recorded as owed: each DM and then `sent(user)` (its record
        deleted) are one unit that cancelling the caller does not cut in two — cut between
        them, whoever takes the work over would send that DM again. A stop waits for a unit
        under way (`settle`)."""
        for user in dict.fromkeys(users):
            await self.whole(self._dm_then(user, text, sent))

    async def whole(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`'s result, `work` run to its end even if the caller is cancelled (a Slack
        call and the record of it, which cut in two would be made again by whoever takes the
        work over); `settle` waits for those under way."""
        task = asyncio.ensure_future(work)
        self._units.add(task)
        task.add_done_callback(self._unit_done)
        return await asyncio.shield(task)

    async def _dm_then(self, user: str, text: str, sent: Callable[[str], Awaitable[None]]) -> None:
        await self.dm_each([user], text)
        await sent(user)

    def _unit_done(self, task: asyncio.Task[Any]) -> None:
        self._units.discard(task)
        if not task.cancelled():
            task.exception()  # seen (its caller, if still there, has it raised)

    async def settle(self) -> None:
        """Wait for the `whole` units under way; cancelled (a stop is bounded), cancel them."""
        await wait_until_done(self._units)

    async def call(
        self,
        pace_key: str,
        method: str,
        /,
        *,
        paced: bool | None = None,
        once: bool = False,
        message: Masked | None = None,
        **kwargs: Any,
    ) -> Any:
        """`paced` (default: only chat.update) takes a token of the pace first; a
        chat.update always counts against `UPDATE_PACE`, whatever `pace_key` says (pass
        `paced=False` when the caller took the token itself). `message`: a message
        `bot.slack.render.request_message` drew (its `text` and `blocks`), sent beside `kwargs` as
        it is."""
        if method == "chat_update":
            pace_key = UPDATE_PACE
            paced = True if paced is None else paced
        pace = self.pace(pace_key)
        attempt = 0
        while True:
            if paced and self.pacing:
                await pace.acquire()
            elif time.monotonic() < pace.blocked_until:
                await asyncio.sleep(pace.blocked_until - time.monotonic())
            m = self.ctx.metrics
            label = m.method(method.replace("_", "."))
            started = time.monotonic()
            try:
                answer = await self._send(method, kwargs, message)
                m.slack_api_seconds.labels(method=label).observe(time.monotonic() - started)
                return answer
            except SlackApiError as e:
                m.slack_api_seconds.labels(method=label).observe(time.monotonic() - started)
                status = e.response.status_code
                error = str(e.response.get("error", "")) if e.response else ""
                code = "ratelimited" if status == 429 else (error or f"http_{status}")
                m.slack_api_errors.labels(method=label, error=m.error_code(code)).inc()
                if status == 429:
                    retry_after = float(e.response.headers.get("Retry-After", "1") or 1)
                    log.warning(
                        "slack rate limited method=%s channel=%s retry_after=%s",
                        method,
                        pace_key,
                        retry_after,
                    )
                    m.slack_rate_limited.labels(method=label).inc()
                    pace.block_for(retry_after)
                    continue
                if status < 500 and error and error not in TRANSIENT_ERRORS:
                    raise Permanent(error) from e
                reason = f"http {status} {error}".strip()
            except (OSError, TimeoutError, aiohttp.ClientError) as e:
                m.slack_api_seconds.labels(method=label).observe(time.monotonic() - started)
                m.slack_api_errors.labels(method=label, error=m.error_code(type(e).__name__)).inc()
                reason = repr(e)
            attempt += 1
            if once or attempt >= self.max_attempts:
                raise Unsure(f"slack {method} failed ({attempt} tries): {reason}")
            delay = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
            log.warning(
                "slack call failed method=%s reason=%s retry_in=%.1fs", method, reason, delay
            )
            await asyncio.sleep(delay)

    async def _send(self, method: str, kwargs: dict[str, Any], message: Masked | None) -> Any:
        post_json = getattr(self.client, "post_json", None)
        if post_json is not None and method in JSON_METHODS:
            return await post_json(JSON_METHODS[method], kwargs, message)
        if message is not None:
            kwargs = {**kwargs, **message}  # a plain dict now: masked by the client
        return await getattr(self.client, method)(**kwargs)
