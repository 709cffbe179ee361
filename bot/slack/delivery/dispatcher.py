"""The outbox dispatcher: posts and updates Slack messages, paced per channel, never dropping.

Reads `Keys.outbox` in the `bot` consumer group, one worker per channel; a 429 waits
`Retry-After`, a permanent error on a post resolves the request as `error`, and an entry is
acked only once handled (an owed one is taken again after a backoff; a dead replica's are
reaped). A post is counted before it is made and recorded after, so an unseen attempt's copy
is adopted (bot/slack/delivery/copies.py); a retry that answers a reviewer's question is
posted in the asked request's thread. Details: docs/ARCHITECTURE.md, "Post" and "The outbox
and replicas".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from approvals._internal.policy import UNROUTED_CHANNEL
from approvals._internal.questions import thread_of
from approvals._internal.store.connection import cancel_and_wait
from approvals._internal.store.digests import Digests
from approvals._internal.store.outbox import Outbox, OutboxEntry
from approvals._internal.store.posting import Posting
from approvals.errors import NotFound
from approvals.models import Answered, ApprovalRequest, Decision, SlackMessage
from bot.core.context import BotContext
from bot.masking.masker import LARGE_REQUEST_CHARS, Masked, payload_chars
from bot.slack.delivery import copies
from bot.slack.delivery.calls import Permanent, SlackCaller, Unsure
from bot.slack.delivery.digests import DigestDrawer, DigestOptions
from bot.slack.directory import review_dms
from bot.slack.render import request_message as blocks
from bot.slack.render.digest_message import MAX_ROWS

log = logging.getLogger(__name__)

#: While one replica posts a request, others leave it alone this long (a replica that is
#: gone — no heartbeat — loses it at once).
POST_LOCK_SECONDS = 300


@dataclass
class DispatcherOptions:
    #: Least time between two posts to one channel (Slack: about 1 message/s per channel).
    post_interval: float = 1.0
    #: Posts allowed back to back before pacing starts (Slack tolerates short bursts).
    burst: int = 3
    pacing: bool = True
    read_block_ms: int = 1000
    #: Outbox entries held in memory at once (read, queued or being handled).
    max_in_flight: int = 100
    #: Quick retries of an idempotent call (chat.update, …) before the entry is left owed.
    max_attempts: int = 4
    #: Backoff of quick retries and of owed entries: base * 2^n, at most backoff_max.
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    #: Heartbeat refresh, and how long it lasts: a replica silent this long is gone.
    heartbeat_interval: float = 1.0
    heartbeat_ttl: float = 5.0
    #: How often gone replicas' entries are looked for (gone within ttl + this).
    reap_interval: float = 2.0
    #: Approval storms (bot/slack/delivery/digests.py): a request whose own post would wait longer
    # than
    #: `digest_after` seconds behind the channel's pacing is listed in a digest message.
    digests: bool = True
    digest_after: float = 3.0
    #: Rows per digest message (at most `bot.slack.render.digest_message.MAX_ROWS`, Slack's 50
    # blocks).
    digest_rows: int = MAX_ROWS
    #: A posted digest takes new rows this long; then the next storm request opens a new one.
    digest_open_seconds: float = 30.0
    #: At most one draw (chat.update) per digest per this many seconds: changes coalesce.
    digest_interval: float = 1.0
    #: Every chat.update (request messages, copies, digests), workspace-wide (Slack Tier 3,
    #: ~50/min): one per interval after a burst (bot/slack/delivery/calls.py `UPDATE_PACE`).
    update_interval: float = 1.2
    update_burst: int = 3
    #: How often every replica looks for dirty digests nobody is drawing (a replica gone).
    digest_poll: float = 2.0
    #: A digest posted or adopted after an attempt whose outcome nobody saw: its channel's
    #: history is read once more this many seconds later, for a copy that landed late.
    digest_recheck: float = 60.0
    #: A burst of agent API calls (creates, cancels): at least `api_burst` being answered at
    #: once. Entries then wait until none is, at most `api_first` seconds per burst (then they
    #: go, until the API has been idle once): the answers agents wait for come first, the
    #: posts right after; nothing is skipped. Below it (steady traffic) nothing waits.
    api_burst: int = 64
    api_first: float = 2.0


class Dispatcher:
    """Consumes the outbox and talks to Slack's Web API (`ctx.slack`)."""

    def __init__(
        self, ctx: BotContext, consumer: str, options: DispatcherOptions | None = None
    ) -> None:
        if ctx.slack is None:
            raise ValueError("the dispatcher needs a Slack client")
        self.ctx = ctx
        self.options = options or DispatcherOptions()
        self.outbox = Outbox(ctx.redis, ctx.keys, consumer)
        self.posting = Posting(ctx.redis, ctx.keys)
        o = self.options
        self.slack = SlackCaller(
            ctx,
            post_interval=o.post_interval,
            burst=o.burst,
            pacing=o.pacing,
            max_attempts=o.max_attempts,
            backoff_base=o.backoff_base,
            backoff_max=o.backoff_max,
            update_interval=o.update_interval,
            update_burst=o.update_burst,
        )
        self._queues: dict[str, asyncio.Queue[OutboxEntry]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._in_flight: set[str] = set()
        #: `update` entries routed to a worker and not yet taken, per request: an entry with
        #: a later one queued is superseded (each draws the state it reads, the latest wins).
        self._updates_queued: dict[str, int] = {}
        self._owed: set[str] = set()  # this consumer's entries waiting for a retry
        self._room = asyncio.Event()
        self._owed_check = 0.0  # monotonic time of the next look at owed entries
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.digests = Digests(ctx.redis, ctx.keys)
        drawing = DigestOptions(
            interval=o.digest_interval,
            poll=o.digest_poll,
            backoff=min(o.backoff_max, o.backoff_base * 2),
            recheck=o.digest_recheck,
        )
        self.drawer = DigestDrawer(ctx, self.digests, self.slack, self.outbox, drawing)
        #: monotonic time this process last listed a request of a channel in a digest.
        self._digested: dict[str, float] = {}
        #: Until when (monotonic) entries wait for the API's busy spell; None: not in one.
        self._api_first_until: float | None = None

    async def start(self) -> None:
        await self.outbox.ensure_group()
        await self.outbox.heartbeat(int(self.options.heartbeat_ttl * 1000))
        name = self.outbox.consumer
        self._tasks = [
            asyncio.create_task(self._run(), name=f"dispatcher-{name}"),
            asyncio.create_task(self._keep_alive(), name=f"heartbeat-{name}"),
        ]
        await self.drawer.start()

    async def drain(self, grace: float) -> None:
        """Stop taking entries and let those in hand finish (each acked once handled) for
        up to `grace` seconds. What is left stays in the group's pending list: a replica
        reaps it once this one's heartbeat expires, or this consumer retakes it on restart."""
        self._stopping = True
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        if self._tasks:  # the reader ends after its current read (routing what it got)
            await asyncio.wait({self._tasks[0]}, timeout=max(0.0, end - loop.time()))
        while self._in_flight and loop.time() < end:
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), max(0.0, end - loop.time()))
        await self.drawer.drain(max(0.0, end - loop.time()))
        if self._in_flight:
            log.warning(
                "shutdown: %d outbox entries still in hand after %.0fs; they stay owed",
                len(self._in_flight),
                grace,
            )

    async def stop(self) -> None:
        self._stopping = True
        await self.drawer.stop()
        await cancel_and_wait([*self._tasks, *self._workers.values()])
        self._tasks = []
        self._workers.clear()
        await self.slack.settle()  # a DM under way is sent and recorded, not cut in two
        # Entries still unacked stay in this consumer's pending list; without a heartbeat,
        # another replica takes them at its next reap.
        with contextlib.suppress(Exception):
            await self.outbox.leave()

    # -- liveness ----------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        o = self.options
        next_reap = 0.0
        while True:
            try:
                await self.outbox.heartbeat(int(o.heartbeat_ttl * 1000))
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + o.reap_interval
                    if await self.outbox.reap(int(o.heartbeat_ttl * 1000)):
                        self._owed_check = 0.0  # look at what was taken now
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("heartbeat failed consumer=%s error=%r", self.outbox.consumer, e)
                self.ctx.metrics.redis_errors.labels(component="dispatcher").inc()
            await asyncio.sleep(o.heartbeat_interval)

    # -- reading -----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                room = self.options.max_in_flight - len(self._in_flight)
                if room <= 0:
                    self._room.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._room.wait(), 1.0)
                    continue
                if time.monotonic() >= self._owed_check:
                    entries = await self._due(room)
                    if entries:
                        self._route(entries)
                        continue
                wait = max(0.0, self._owed_check - time.monotonic())
                block_ms = max(1, min(self.options.read_block_ms, int(wait * 1000) or 1))
                self._route(await self.outbox.read(count=room, block_ms=block_ms))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("dispatcher read failed error=%r", e)
                self.ctx.metrics.redis_errors.labels(component="dispatcher").inc()
                await asyncio.sleep(1.0)

    async def _due(self, room: int) -> list[OutboxEntry]:
        """Owed entries of this consumer whose backoff has passed (at most `room`)."""
        o = self.options
        owed = [e for e in await self.outbox.owed() if e.entry_id not in self._in_flight]
        self._owed = {e.entry_id for e in owed}
        self.ctx.metrics.slack_owed.set(len(self._owed))
        due, next_check = [], time.monotonic() + 30.0  # leftovers are looked at twice a minute
        for entry in owed:
            backoff = min(o.backoff_max, o.backoff_base * 2 ** (entry.deliveries - 1))
            left = backoff - entry.idle_ms / 1000
            if left <= 0:
                due.append(entry.entry_id)
            else:
                next_check = min(next_check, time.monotonic() + left)
        if len(due) > room:
            due, next_check = due[:room], time.monotonic()
        self._owed_check = next_check
        return await self.outbox.take_again(due)

    def _route(self, entries: list[OutboxEntry]) -> None:
        # Each entry names its channel. Posts and updates of one channel have separate
        # workers: an update (buttons gone) never waits behind paced posts.
        for entry in entries:
            if entry.entry_id in self._in_flight:
                continue
            channel = entry.fields.get("channel") or "-"
            kind = "post" if entry.op == "post" else "update"
            self._in_flight.add(entry.entry_id)
            if entry.op == "update":
                rid = entry.request_id
                self._updates_queued[rid] = self._updates_queued.get(rid, 0) + 1
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
                await self._after_api()
                if self._superseded(entry):
                    # A later `update` entry of this request is queued: it re-reads the
                    # request and draws whatever is newest then, so this one's draw would
                    # only spend a chat.update (the workspace budget) on a state already old.
                    self.ctx.metrics.slack_updates_coalesced.inc()
                    log.debug("update coalesced id=%s entry=%s", entry.request_id, entry.entry_id)
                else:
                    await self._handle(entry)
                await self.outbox.ack(entry.entry_id)
                self._settled(entry)
            except asyncio.CancelledError:
                raise
            except _Busy:
                # The replica holding the post lock is alive and holds an entry of its own
                # for this post: this one is not needed.
                log.info("another replica is posting id=%s", entry.request_id)
                await self.outbox.ack(entry.entry_id)
                self._settled(entry)
            except Exception as e:
                # Not acked: owed, taken again after a backoff (see _due). Nothing is dropped.
                self.ctx.metrics.slack_owed_retries.inc()
                self._owed.add(entry.entry_id)
                self.ctx.metrics.slack_owed.set(len(self._owed))
                self._owed_check = min(self._owed_check, time.monotonic() + 0.1)
                log.warning(
                    "outbox entry owed, will retry entry=%s op=%s id=%s error=%s",
                    entry.entry_id,
                    entry.op,
                    entry.request_id,
                    e if isinstance(e, Unsure) else repr(e),
                )
            finally:
                self._in_flight.discard(entry.entry_id)
                self._room.set()

    async def _after_api(self) -> None:
        """In a burst of agent API calls (`api_burst` at once), let them go first: wait until
        none is being answered, for at most `api_first` seconds from the start of the burst
        (one burst cannot hold Slack back for longer). The burst ends when the API is seen
        idle, or below `api_burst` once its time is up."""
        calls, o = self.ctx.api_calls, self.options
        now = time.monotonic()
        until = self._api_first_until
        if until is not None and (not calls.count or (now >= until and calls.count < o.api_burst)):
            until = self._api_first_until = None
        if until is None:
            if calls.count < o.api_burst:
                return
            until = self._api_first_until = now + o.api_first
        if until > now and not self._stopping and await calls.idle(until - now):
            self._api_first_until = None

    def _superseded(self, entry: OutboxEntry) -> bool:
        """Take `entry` off the queued count; True when a later `update` entry of the same
        request is still queued (routed after this one, so handled after it is taken)."""
        if entry.op != "update":
            return False
        rid = entry.request_id
        left = self._updates_queued.get(rid, 1) - 1
        if left <= 0:
            self._updates_queued.pop(rid, None)
            return False
        self._updates_queued[rid] = left
        return True

    def _settled(self, entry: OutboxEntry) -> None:
        if entry.entry_id in self._owed:
            self._owed.discard(entry.entry_id)
            self.ctx.metrics.slack_owed.set(len(self._owed))
            log.info("owed outbox entry delivered entry=%s id=%s", entry.entry_id, entry.request_id)

    # -- handling ----------------------------------------------------------------------

    async def _handle(self, entry: OutboxEntry) -> None:
        # Re-read: the state may have moved on since the entry was written.
        found = await self.ctx.store.get_with_row(entry.request_id)
        if found is None:
            log.info("outbox entry for a vanished request id=%s op=%s", entry.request_id, entry.op)
            return
        request, row = found
        if entry.op == "post":
            await self._post(request, row)
        elif entry.op == "update":
            if not request.is_pending:
                # Whoever waits on this decision is answered before the message is drawn:
                # this read is as good as the Waiter's own (which then has nothing to do),
                # and the draw is the costliest step here.
                self.ctx.waiter.deliver(request)
                await asyncio.sleep(0)
            await self._update(request, row)
            await self.drawer.touch(row)  # its digest rows, if it has any
            if not request.is_pending:
                self._decided(request)
        elif entry.op == "escalated":
            await self._mark_escalated(request, entry)
            await self.drawer.touch(row)
        elif entry.op == "answered":
            # An asked request whose question a retry answered in its thread: a redraw of its
            # message ("answered in the thread"), not a decision (nobody waits, nothing counted).
            await self._update(request, row)
            return
        else:
            log.warning("unknown outbox op=%s id=%s", entry.op, entry.request_id)
        if self.ctx.home is not None:  # the App Home tabs that show it are looked at again
            self.ctx.home.changed()
        if self.ctx.reminders is not None and not request.is_pending and request.notify:
            await self.ctx.reminders.notify_decided(request)

    def _decided(self, request: ApprovalRequest) -> None:
        """Count a decision once its outcome is drawn (the entry is handled once)."""
        m = self.ctx.metrics
        route = m.route(request.route)
        m.decisions.labels(
            outcome=request.status, route=route, principal=m.principal(request.principal)
        ).inc()
        decided_at = request.decision.decided_at if request.decision else None
        if decided_at is not None:
            seconds = (decided_at - request.created_at).total_seconds()
            m.time_to_decision.labels(route=route).observe(max(0.0, seconds))

    async def _post(self, request: ApprovalRequest, row: dict[str, str] | None = None) -> None:
        if not request.is_pending:
            log.info("not posting decided request id=%s status=%s", request.id, request.status)
            return
        if request.message is not None:
            log.info("already posted id=%s ts=%s", request.id, request.message.ts)
            # Taken again after a failure (or from a replica gone) between recording a late
            # copy and retiring it, or the message and its reviewers' DMs: finish that now.
            if row is None:
                key = self.ctx.keys.request(request.id)
                row = cast(dict[str, str], await self.ctx.redis.hgetall(key))
            recorded, _ = await self.posting.history(request.id, row)
            for copy in recorded:
                if copy.channel != request.message.channel:  # of another route: an earlier one
                    await self._retire_copy(request, copy, posted_for=None)
            owed = self.posting.dms_owed(row, request.escalations)
            if owed:
                await self._dm_reviewers(request, owed)
            await self._answered(request)  # if a crash came between recording and marking
            return
        channel = request.channel
        if not channel or channel == UNROUTED_CHANNEL:
            await self._fail(
                request,
                "no Slack channel for this request: set "
                "APPROVALS_DEFAULT_CHANNEL or give the policy route a channel",
            )
            return
        rounds = request.escalations
        # A retry answering a reviewer's question goes in the asked request's thread (never
        # a digest row: its place is beside the question).
        thread = thread_of(request)
        if thread is None and self._storming(channel) and await self._to_digest(request, channel):
            return
        begin = await self._begin(request, channel)
        if begin is None:
            return
        thread_ts = thread.ts if thread is not None else None
        if begin.earlier_at is not None:
            # An earlier attempt may have posted without anyone seeing the answer: adopt
            # its message rather than post a second one.
            found = await self._find(channel, request.id, rounds, begin.earlier_at, thread_ts)
            if found:
                log.warning(
                    "adopting a message posted by an earlier attempt id=%s ts=%s copies=%d",
                    request.id,
                    found[0].ts,
                    len(found),
                )
                self.ctx.metrics.slack_posts.labels(how="adopted").inc()
                for copy in found:
                    await self._recorded(request, copy)
                return
        message = await _drawn(request)
        try:
            response = await self.slack.call(
                channel,
                "chat_postMessage",
                channel=channel,
                paced=True,
                once=True,
                message=message,
                metadata=copies.metadata(request),
                thread_ts=thread_ts,
            )
        except Permanent as e:
            await self.posting.release(request.id, rounds)
            await self._fail(request, f"Slack refused the message: {e.error}")
            return
        # On Unsure (and any other failure) the post lock stays: ours until we retry the
        # entry, or until a replica finds us gone and looks for the copy before posting.
        posted = SlackMessage(channel=str(response["channel"]), ts=str(response["ts"]))
        m = self.ctx.metrics
        m.slack_posts.labels(how="posted").inc()
        m.create_to_posted.labels(route=m.route(request.route)).observe(_since(request.created_at))
        log.info(
            "posted id=%s channel=%s ts=%s route=%s principal=%s",
            request.id,
            posted.channel,
            posted.ts,
            request.route,
            request.principal or "-",
        )
        await self._recorded(request, posted)

    def _storming(self, channel: str) -> bool:
        """Whether a post to `channel` now would wait too long behind the channel's pacing
        (its own wait plus the posts queued behind it), or a digest of the channel waits to
        be posted, or this process listed a request of the channel in a digest just now
        while posts still have to wait: then the request goes to the digest."""
        o = self.options
        if not (o.digests and o.pacing):
            return False
        pace = self.slack.pace(channel)
        if pace.priority_waiters:
            return True
        if (
            pace.wait() > 0
            and time.monotonic() - self._digested.get(channel, -1e9) < o.digest_after
        ):
            return True
        queue = self._queues.get(f"post:{channel}")
        behind = queue.qsize() if queue is not None else 0
        return pace.wait(behind + 1) > o.digest_after

    async def _to_digest(self, request: ApprovalRequest, channel: str) -> bool:
        """List the request in the channel's digest; False when it is not for a digest (it
        was decided, moved, posted, or an earlier post attempt may have landed)."""
        o = self.options
        kwargs: dict[str, Any] = {
            "holder": self.outbox.holder,
            "max_rows": max(1, min(o.digest_rows, MAX_ROWS)),
            "open_seconds": o.digest_open_seconds,
            "post_lock": self.posting.lock(request.id, request.escalations),
        }
        added = await self.digests.add(
            request.id, request.escalations, channel, now=time.time(), **kwargs
        )
        if added.state == "busy":
            if await self.outbox.holder_alive(added.holder):
                raise _Busy()
            added = await self.digests.add(
                request.id,
                request.escalations,
                channel,
                now=time.time(),
                gone_holder=added.holder,
                **kwargs,
            )
            if added.state == "busy":
                raise _Busy()
        if added.state not in ("added", "already"):
            return False
        self._digested[channel] = time.monotonic()
        self.drawer.wake()
        m = self.ctx.metrics
        m.slack_posts.labels(how="digest_row").inc()
        log.info(
            "listed in a digest id=%s channel=%s digest=%s route=%s",
            request.id,
            channel,
            added.digest_id,
            request.route,
        )
        return True

    async def _begin(self, request: ApprovalRequest, channel: str) -> Any:
        """Take the post lock and count this attempt; None when there is nothing to post.
        Raises _Busy when a live replica is posting it."""
        kwargs: dict[str, Any] = {
            "holder": self.outbox.holder,
            "lock_seconds": POST_LOCK_SECONDS,
            "now": time.time(),
        }
        begin = await self.posting.begin(request.id, request.escalations, channel, **kwargs)
        if begin.state == "busy":
            if await self.outbox.holder_alive(begin.holder):
                raise _Busy()
            log.warning(
                "taking over a post from a gone replica id=%s from=%s", request.id, begin.holder
            )
            begin = await self.posting.begin(
                request.id, request.escalations, channel, gone_holder=begin.holder, **kwargs
            )
            if begin.state == "busy":
                raise _Busy()
        if begin.state != "go":
            log.info("nothing to post id=%s (%s)", request.id, begin.state)
            return None
        return begin

    async def _find(
        self,
        channel: str,
        request_id: str,
        rounds: int | None,
        since: float,
        thread: str | None = None,
    ) -> list[SlackMessage]:
        """Earlier copies in the channel's history (in the thread rooted at `thread`, for a
        reply); none (with a warning) if the history cannot be read at all (a missing scope):
        then a duplicate is possible, and recorded."""
        try:
            return await copies.find(
                self._history_call,
                channel,
                request_id,
                rounds,
                since=since,
                bot_id=await self.slack.bot_id(),
                thread=thread,
            )
        except Permanent as e:
            log.warning(
                "cannot read channel history to look for an earlier copy (%s) channel=%s: "
                "add the channels:history and groups:history scopes and reinstall the app",
                e.error,
                channel,
            )
            return []

    async def _history_call(self, method: str, **kwargs: Any) -> Any:
        return await self.slack.call(kwargs["channel"], method, **kwargs)

    async def _recorded(self, request: ApprovalRequest, message: SlackMessage) -> None:
        """Record a message posted or found for `request`; with it, its reviewers' DMs as
        owed (sent here, and by whoever takes the entry over if this process dies first)."""
        kind, status, owed = await self.posting.record(
            request.id, request.escalations, message, await self._dm_users(request)
        )
        if kind == "gone":
            return
        if kind == "message":
            await self._answered(request.model_copy(update={"message": message}))
        if kind == "copy":
            log.warning("a second copy of a request message id=%s ts=%s", request.id, message.ts)
        if status != "pending":
            # A decision landed while we were posting: it found no message to update.
            await self._update(await self.ctx.store.get(request.id))
        elif kind == "copy":
            await self._retire_copy(request, message, posted_for=request.escalations)
        elif owed:
            await self._dm_reviewers(request.model_copy(update={"message": message}), owed)

    async def _answered(self, request: ApprovalRequest) -> None:
        """A retry posted in the thread of the question it answers: mark the asked request
        answered (once; `answered.lua` queues the redraw of its message)."""
        if request.answers is None or request.message is None or thread_of(request) is None:
            return
        asked = request.answers.request_id
        if await self.posting.answered(asked, Answered(request_id=request.id)):
            log.info("question answered in its thread asked=%s retry=%s", asked, request.id)

    async def _retire_copy(
        self, shown: ApprovalRequest, copy: SlackMessage, *, posted_for: int | None
    ) -> None:
        """A copy of a pending request's message, posted for a route round the request has
        left (`posted_for`; None: not known, but of an earlier route), e.g. a post that
        landed after an escalation, which found no message to mark: it must not stay a second
        live set of buttons. It says where the request went, as the escalation's own note
        does; decided meanwhile, it shows the outcome (with the other copies). A copy of the
        current round (a duplicate) is left to the decision. A failed redraw fails the entry,
        which is taken again (`_post` retires the copy then)."""
        try:
            now = await self.ctx.store.get(shown.id)
        except NotFound:
            return
        if now.is_pending and now.escalations != posted_for:
            if await self._draw_escalated(shown, copy, now.channel or ""):
                log.info("late copy marked escalated id=%s ts=%s", shown.id, copy.ts)
            now = await self.ctx.store.get(shown.id)
        if not now.is_pending:  # its outcome is drawn on every copy, this one too
            await self._update(now)

    async def _update(self, request: ApprovalRequest, row: dict[str, str] | None = None) -> None:
        """Draw the request on its message(s); `row` is its hash as just read, if at hand."""
        if request.message is None:
            return
        targets = [request.message]
        if not request.is_pending:
            targets += await self._other_copies(request, row)
        failed: Exception | None = None
        unique = {(t.channel, t.ts): t for t in targets}.values()
        for target in unique:
            try:
                await self._draw(request, target)
            except Exception as e:  # draw the others; the entry stays owed for this one
                failed = e
        if failed is not None:
            raise failed

    async def _other_copies(
        self, request: ApprovalRequest, row: dict[str, str] | None = None
    ) -> list[SlackMessage]:
        """Every other copy of a decided request's message: recorded ones, and any in history
        after an attempt whose outcome nobody saw."""
        recorded, attempts = await self.posting.history(request.id, row)
        found = list(recorded)
        answers = request.answers
        for attempt in attempts:
            if attempt.count > 1:
                # The first round of a retry answering a question was posted in its thread.
                thread = answers.thread if answers is not None else None
                in_thread = (
                    thread is not None
                    and attempt.escalations == 0
                    and thread.channel == attempt.channel
                )
                more = await self._find(
                    attempt.channel,
                    request.id,
                    None,
                    attempt.first_at,
                    thread.ts if in_thread and thread is not None else None,
                )
                for message in more:
                    if message not in found and message != request.message:
                        await self.posting.record(request.id, attempt.escalations, message)
                        found.append(message)
        return found

    async def _draw(self, request: ApprovalRequest, target: SlackMessage) -> None:
        # The outcome is drawn once per message, whichever path gets here first (the
        # decision's own outbox entry, or a post that found the request decided as it landed).
        lock = None
        if not request.is_pending:
            # Drawn once per message per state: an asked request is drawn again once answered.
            again = ":answered" if request.answered is not None else ""
            lock = self.ctx.keys.lock(f"drawn:{request.id}:{target.ts}{again}")
            if not await self.ctx.redis.set(lock, request.status, nx=True, ex=POST_LOCK_SECONDS):
                return
        try:
            await self.slack.call(
                target.channel,
                "chat_update",
                channel=target.channel,
                ts=target.ts,
                message=blocks.message_for(request),
                metadata=copies.metadata(request),
            )
            self.ctx.metrics.slack_updates.inc()
        except Permanent as e:
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
        await self._draw_escalated(request, old, entry.fields.get("to") or "")

    async def _draw_escalated(
        self, request: ApprovalRequest, message: SlackMessage, to_channel: str
    ) -> bool:
        """Draw `message` as the note of a request that moved to `to_channel` (no buttons);
        False if Slack refused it for good (logged). Other failures raise: the entry is
        taken again."""
        note = blocks.escalated_note(request, to_channel)
        try:
            await self.slack.call(
                message.channel, "chat_update", channel=message.channel, ts=message.ts, message=note
            )
        except Permanent as e:
            log.warning(
                "could not mark escalation id=%s ts=%s error=%s", request.id, message.ts, e.error
            )
            return False
        return True

    async def _dm_users(self, request: ApprovalRequest) -> list[str]:
        """The reviewers to DM about the request's message (routes with `dm_reviewers`), not
        its requester, who may not decide it (as a digest's DMs)."""
        service = self.ctx.service
        try:
            return await review_dms(request, service.policy.routes, service.membership)
        except Exception as e:  # the message is recorded whatever the directory says
            log.warning("no reviewer DMs: cannot list the reviewers id=%s error=%r", request.id, e)
            return []

    async def _dm_reviewers(self, request: ApprovalRequest, users: list[str]) -> None:
        """DM each of `users` about the request's message, each marked sent once done (or
        given up: a DM Slack refused, or whose outcome nobody saw, is not sent twice)."""
        if request.message is None:
            return
        link = f"<#{request.message.channel}>"
        # The rendered fallback text: masked (secret values, tokens) and escaped, unlike the raw
        # prompt, which holds the arguments as the agent sent them.
        summary = blocks.request_message(request)["text"]

        async def sent(user: str) -> None:
            await self.posting.dm_sent(request.id, request.escalations, user)

        await self.slack.dm_owed(users, f"Your review is needed in {link}. {summary}", sent)

    async def _fail(self, request: ApprovalRequest, reason: str) -> None:
        result = await self.ctx.store.resolve(request.id, Decision.error(reason, by="slack"))
        log.error("request failed id=%s reason=%s won=%s", request.id, reason, result.won)


def _since(moment: datetime) -> float:
    return max(0.0, (datetime.now(UTC) - moment).total_seconds())


class _Busy(Exception):
    """A live replica holds the post lock for this request."""


async def _drawn(request: ApprovalRequest) -> Masked:
    """The request's message; drawn on a worker thread when its texts are large, so that
    masking them (`bot.masking.masker`, which keeps the answers: the update, reminders and
    App Home ask again) does not hold the event loop."""
    size = payload_chars(request.event.arguments) + len(request.prompt)
    size += len(request.event.command or "") + payload_chars(request.event.permissions or {})
    if size <= LARGE_REQUEST_CHARS:
        return blocks.request_message(request)
    return await asyncio.to_thread(blocks.request_message, request)
