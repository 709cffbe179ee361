"""The outbox dispatcher: posts and updates Slack messages, paced per channel, never dropping.

Reads `Keys.outbox` in the `bot` consumer group (any replica may take an
entry; a dead replica's entries are claimed after `claim_idle_ms`). Each
channel gets its own worker, so one slow or rate-limited channel does not hold
up the others. HTTP 429 waits `Retry-After` and tries again; 5xx and
connection errors back off and try again; a permanent Slack error on a post
resolves the request as an `error`, so no agent waits on a message that will
never come. An entry is acked only once it is handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from approvals.models import ApprovalRequest, Decision, SlackMessage
from approvals.policy import UNROUTED_CHANNEL
from approvals.slack_ids import is_user, is_user_group
from approvals.store.outbox import Outbox, OutboxEntry
from bot import blocks
from bot.context import BotContext

log = logging.getLogger(__name__)

#: Slack errors (with HTTP 200) that a later attempt can get past: retried with backoff.
#: Every other `ok:false` error (channel_not_found, not_in_channel, invalid_auth, …) is
#: permanent: a post that fails with one ends its request as an `error`.
TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)


#: While one replica posts a request, others leave it alone this long.
POST_LOCK_SECONDS = 300


@dataclass
class DispatcherOptions:
    #: Least time between two posts to one channel (Slack: about 1 message/s per channel).
    post_interval: float = 1.0
    #: Posts allowed back to back before pacing starts (Slack tolerates short bursts).
    burst: int = 3
    pacing: bool = True
    claim_idle_ms: int = 30_000
    read_block_ms: int = 1000
    max_attempts: int = 8
    backoff_base: float = 0.5
    backoff_max: float = 30.0


class _ChannelPace:
    """A token bucket per channel: `burst` tokens, one back every `interval` seconds."""

    def __init__(self, interval: float, burst: int) -> None:
        self.interval = interval
        self.burst = burst
        self.tokens = float(burst)
        self.updated = time.monotonic()
        self.blocked_until = 0.0

    async def acquire(self) -> None:
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

    def block_for(self, seconds: float) -> None:
        """Slack said 429: nothing until `Retry-After` has passed, then one post, no burst."""
        self.blocked_until = max(self.blocked_until, time.monotonic() + seconds)
        self.tokens = 1
        self.updated = self.blocked_until


class Dispatcher:
    """Consumes the outbox and talks to Slack's Web API (`ctx.slack`)."""

    def __init__(
        self, ctx: BotContext, consumer: str, options: DispatcherOptions | None = None
    ) -> None:
        if ctx.slack is None:
            raise ValueError("the dispatcher needs a Slack client")
        self.ctx = ctx
        self.slack = ctx.slack
        self.options = options or DispatcherOptions()
        self.outbox = Outbox(ctx.redis, ctx.keys, consumer)
        self._queues: dict[str, asyncio.Queue[OutboxEntry]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._paces: dict[str, _ChannelPace] = {}
        self._in_flight: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self.outbox.ensure_group()
        self._task = asyncio.create_task(self._run(), name=f"dispatcher-{self.outbox.consumer}")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for t in [self._task, *self._workers.values()] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None
        self._workers.clear()

    # -- reading ---------------------------------------------------------------------

    async def _run(self) -> None:
        last_claim = 0.0
        while not self._stopping:
            try:
                entries: list[OutboxEntry] = []
                if time.monotonic() - last_claim > max(1.0, self.options.claim_idle_ms / 3000):
                    last_claim = time.monotonic()
                    stale = await self.outbox.claim_stale(self.options.claim_idle_ms)
                    entries.extend(e for e in stale if e.entry_id not in self._in_flight)
                entries.extend(await self.outbox.read(block_ms=self.options.read_block_ms))
                if entries:
                    await self._route(entries)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("dispatcher read failed error=%r", e)
                await asyncio.sleep(1.0)

    async def _route(self, entries: list[OutboxEntry]) -> None:
        # Each entry names its channel. Posts and updates of one channel have separate
        # workers: an update (buttons gone) never waits behind paced posts.
        for entry in entries:
            channel = entry.fields.get("channel") or "-"
            kind = "post" if entry.op == "post" else "update"
            self._in_flight.add(entry.entry_id)
            self._queue(f"{kind}:{channel}").put_nowait(entry)

    def _queue(self, name: str) -> asyncio.Queue[OutboxEntry]:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = asyncio.Queue()
            self._workers[name] = asyncio.create_task(self._work(queue), name=f"dispatch-{name}")
        return queue

    async def _work(self, queue: asyncio.Queue[OutboxEntry]) -> None:
        while True:
            entry = await queue.get()
            try:
                await self._handle(entry)
                await self.outbox.ack(entry.entry_id)
            except asyncio.CancelledError:
                raise
            except _Busy:
                log.info(
                    "another replica is posting id=%s; leaving entry=%s for later",
                    entry.request_id,
                    entry.entry_id,
                )
            except Exception:
                # Left unacked: claimed again after claim_idle_ms. Nothing is dropped.
                log.exception(
                    "dispatch failed entry=%s op=%s id=%s",
                    entry.entry_id,
                    entry.op,
                    entry.request_id,
                )
            finally:
                self._in_flight.discard(entry.entry_id)

    # -- handling ----------------------------------------------------------------------

    async def _handle(self, entry: OutboxEntry) -> None:
        # Re-read: the state may have moved on since the entry was routed.
        found = await self.ctx.store.get_many([entry.request_id])
        request = found.get(entry.request_id)
        if request is None:
            log.info("outbox entry for a vanished request id=%s op=%s", entry.request_id, entry.op)
            return
        if entry.op == "post":
            await self._post(request)
        elif entry.op == "update":
            await self._update(request)
        elif entry.op == "escalated":
            await self._mark_escalated(request, entry)
        else:
            log.warning("unknown outbox op=%s id=%s", entry.op, entry.request_id)

    async def _post(self, request: ApprovalRequest) -> None:
        if not request.is_pending:
            log.info("not posting decided request id=%s status=%s", request.id, request.status)
            return
        if request.message is not None:
            log.info("already posted id=%s ts=%s", request.id, request.message.ts)
            return
        if not request.channel or request.channel == UNROUTED_CHANNEL:
            await self._fail(
                request,
                "no Slack channel for this request: set "
                "APPROVALS_DEFAULT_CHANNEL or give the policy route a channel",
            )
            return
        message = blocks.request_message(request)
        # One lock per route the request is posted on: an escalation posts it again.
        lock = self.ctx.keys.lock(f"post:{request.id}:{request.escalations}")
        if not await self.ctx.redis.set(lock, self.outbox.consumer, nx=True, ex=POST_LOCK_SECONDS):
            raise _Busy()
        try:
            response = await self._call(
                request.channel, "chat_postMessage", channel=request.channel, paced=True, **message
            )
        except _Permanent as e:
            await self._fail(request, f"Slack refused the message: {e.error}")
            return
        except BaseException:
            await self.ctx.redis.delete(lock)  # let another attempt post it
            raise
        posted = SlackMessage(channel=str(response["channel"]), ts=str(response["ts"]))
        await self.ctx.store.set_message(request.id, posted)
        self.ctx.count("slack_posts")
        log.info("posted id=%s channel=%s ts=%s", request.id, posted.channel, posted.ts)
        # A decision that landed while we were posting found no message to update: do it now.
        after = await self.ctx.store.get(request.id)
        if not after.is_pending:
            await self._update(after)
        else:
            await self._dm_reviewers(after)

    async def _update(self, request: ApprovalRequest) -> None:
        if request.message is None:
            return
        # The outcome is drawn once, whichever path gets here first (the decision's own
        # outbox entry, or a post that found the request decided as it landed).
        lock = None
        if not request.is_pending:
            lock = self.ctx.keys.lock(f"drawn:{request.id}:{request.message.ts}")
            if not await self.ctx.redis.set(lock, request.status, nx=True, ex=POST_LOCK_SECONDS):
                return
        message = blocks.message_for(request)
        try:
            await self._call(
                request.message.channel,
                "chat_update",
                channel=request.message.channel,
                ts=request.message.ts,
                **message,
            )
            self.ctx.count("slack_updates")
        except _Permanent as e:
            log.warning("could not update message id=%s error=%s", request.id, e.error)
        except BaseException:
            if lock is not None:
                await self.ctx.redis.delete(lock)  # let the retry draw it
            raise

    async def _mark_escalated(self, request: ApprovalRequest, entry: OutboxEntry) -> None:
        raw = entry.fields.get("message")
        if not raw:
            return
        old = SlackMessage.model_validate_json(raw)
        note = blocks.escalated_note(request, entry.fields.get("to") or "")
        try:
            await self._call(old.channel, "chat_update", channel=old.channel, ts=old.ts, **note)
        except _Permanent as e:
            log.warning("could not mark escalation id=%s error=%s", request.id, e.error)

    async def _dm_reviewers(self, request: ApprovalRequest) -> None:
        route = self.ctx.service.policy.routes.get(request.route)
        if route is None or not route.dm_reviewers or request.message is None:
            return
        link = f"<#{request.message.channel}>"
        # The rendered fallback text: masked (secret values, tokens) and escaped, unlike the raw
        # prompt, which holds the arguments as the agent sent them.
        summary = blocks.request_message(request)["text"]
        users = [r for r in request.reviewers if is_user(r)]
        membership = self.ctx.service.membership
        for group in (r for r in request.reviewers if is_user_group(r)):
            users += sorted(await membership(group)) if membership else []
        for user in dict.fromkeys(users):  # each reviewer once, in order
            try:
                opened = await self._call(user, "conversations_open", users=user)
                dm = opened["channel"]["id"]
                await self._call(
                    dm,
                    "chat_postMessage",
                    channel=dm,
                    paced=True,
                    text=f"Your review is needed in {link}. {summary}",
                )
            except _Permanent as e:
                log.warning("could not DM reviewer user=%s error=%s", user, e.error)

    async def _fail(self, request: ApprovalRequest, reason: str) -> None:
        result = await self.ctx.store.resolve(request.id, Decision.error(reason, by="slack"))
        log.error("request failed id=%s reason=%s won=%s", request.id, reason, result.won)

    # -- Slack calls with pacing and retries ----------------------------------------------

    def _pace(self, channel: str) -> _ChannelPace:
        pace = self._paces.get(channel)
        if pace is None:
            pace = self._paces[channel] = _ChannelPace(
                self.options.post_interval, self.options.burst
            )
        return pace

    async def _call(
        self, pace_key: str, method: str, /, *, paced: bool = False, **kwargs: Any
    ) -> Any:
        pace = self._pace(pace_key)
        attempt = 0
        while True:
            if paced and self.options.pacing:
                await pace.acquire()
            elif time.monotonic() < pace.blocked_until:
                await asyncio.sleep(pace.blocked_until - time.monotonic())
            try:
                return await getattr(self.slack, method)(**kwargs)
            except SlackApiError as e:
                status = e.response.status_code
                error = str(e.response.get("error", "")) if e.response else ""
                if status == 429:
                    retry_after = float(e.response.headers.get("Retry-After", "1") or 1)
                    log.warning(
                        "slack rate limited method=%s channel=%s retry_after=%s",
                        method,
                        pace_key,
                        retry_after,
                    )
                    self.ctx.count("slack_rate_limited")
                    pace.block_for(retry_after)
                    continue
                if status < 500 and error and error not in TRANSIENT_ERRORS:
                    raise _Permanent(error) from e
                reason = f"http {status} {error}".strip()
            except (OSError, TimeoutError, aiohttp.ClientError) as e:
                reason = repr(e)
            attempt += 1
            if attempt >= self.options.max_attempts:
                raise RuntimeError(f"slack {method} failed {attempt} times: {reason}")
            delay = min(self.options.backoff_max, self.options.backoff_base * 2 ** (attempt - 1))
            log.warning(
                "slack call failed method=%s reason=%s retry_in=%.1fs", method, reason, delay
            )
            await asyncio.sleep(delay)


class _Busy(Exception):
    """Another replica holds the post lock for this request."""


class _Permanent(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error
