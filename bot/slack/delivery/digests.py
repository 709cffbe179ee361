"""Drawing digest messages: the Slack side of approval storms
(approvals/_internal/store/digests.py).

`DigestDrawer` (one per dispatcher, on every replica) draws the dirty digests that are due,
under each digest's draw lock (`digest_begin.lua`): it posts a digest's message once, ahead
of the channel's queued posts, adopting or retiring copies an unseen attempt left, then
updates it with chat.update at most once per `digest_interval`, and records what it drew
(`digest_drawn.lua`). Why it is built so: docs/ARCHITECTURE.md, "Approval storms".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from approvals._internal.store.connection import cancel_and_wait
from approvals._internal.store.digests import Digest, Digests, Recheck, placements
from approvals._internal.store.outbox import Outbox
from approvals.models import ApprovalRequest, Decision, SlackMessage
from bot.core.context import BotContext
from bot.slack.delivery import copies
from bot.slack.delivery.calls import UPDATE_PACE, Permanent, SlackCaller
from bot.slack.directory import review_dms
from bot.slack.render import digest_message as digest_blocks

log = logging.getLogger(__name__)

#: While one replica draws a digest, others leave it alone this long (a replica that is gone
#: — no heartbeat — loses it at once).
DRAW_LOCK_SECONDS = 120

#: Metadata event type of a retired second copy of a digest (see `DigestDrawer._retire`).
RETIRED_EVENT_TYPE = "approval_digest_retired"


@dataclass(frozen=True)
class DigestOptions:
    """The drawer's timing (bot/slack/delivery/dispatcher.py `DispatcherOptions` digest_*
    fields)."""

    interval: float = 1.0
    poll: float = 2.0
    backoff: float = 1.0
    #: After posting (or adopting) a digest whose earlier attempt nobody saw the outcome of,
    #: look in the channel's history once more this many seconds later: that attempt may
    #: land after the look (Slack finishing a gone replica's call), a second live copy.
    recheck: float = 60.0


class DigestDrawer:
    """Draws the dirty digests that are due, woken by this process or by a slow poll."""

    def __init__(
        self,
        ctx: BotContext,
        digests: Digests,
        slack: SlackCaller,
        outbox: Outbox,
        options: DigestOptions,
    ) -> None:
        self.ctx = ctx
        self.digests = digests
        self.slack = slack
        self.outbox = outbox
        self.options = options
        self._wake = asyncio.Event()
        self._drawing: dict[str, asyncio.Task[None]] = {}
        self._skip_until: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"digests-{self.outbox.consumer}")

    async def stop(self) -> None:
        await cancel_and_wait([t for t in (self._task, *self._drawing.values()) if t])
        self._task = None
        self._drawing.clear()

    async def drain(self, grace: float) -> None:
        """Let draws in hand finish (a digest post on its way) for up to `grace` seconds."""
        busy = [t for t in self._drawing.values() if not t.done()]
        if busy and grace > 0:
            await asyncio.wait(busy, timeout=grace)

    def wake(self) -> None:
        self._wake.set()

    async def touch(self, row: dict[str, str]) -> None:
        """A request changed: redraw every digest that lists it (`row`: its hash)."""
        found = [digest_id for _round, digest_id in placements(row)]
        if found:
            await self.digests.touch(found, time.time())
            self.wake()

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        o = self.options
        while True:
            timeout = o.poll
            try:
                now, mono = time.time(), time.monotonic()
                due, next_at = await self.digests.due(now)
                for digest_id in due:
                    if digest_id in self._drawing or self._skip_until.get(digest_id, 0) > mono:
                        continue
                    self._skip_until.pop(digest_id, None)
                    self._drawing[digest_id] = asyncio.create_task(
                        self._draw(digest_id), name=f"digest-{digest_id}"
                    )
                if next_at is not None:
                    # Something is dirty: look again soon (a draw that ends wakes us too).
                    soon = next_at - now if next_at > now else o.interval / 4
                    timeout = max(0.01, min(timeout, soon))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("digest poll failed error=%r", e)
                self.ctx.metrics.redis_errors.labels(component="digests").inc()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _draw(self, digest_id: str) -> None:
        try:
            await self._draw_once(digest_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("digest draw failed digest=%s error=%r", digest_id, e)
        finally:
            self._drawing.pop(digest_id, None)
            self.wake()

    async def _draw_once(self, digest_id: str) -> None:
        o = self.options
        holder = self.outbox.holder
        kwargs: dict[str, Any] = {"holder": holder, "lock_seconds": DRAW_LOCK_SECONDS}
        begin = await self.digests.begin(digest_id, now=time.time(), **kwargs)
        if begin.state == "busy":
            if await self.outbox.holder_alive(begin.holder):
                self._skip_until[digest_id] = time.monotonic() + o.interval
                return
            log.warning("taking over a digest from a gone replica digest=%s", digest_id)
            begin = await self.digests.begin(
                digest_id, now=time.time(), gone_holder=begin.holder, **kwargs
            )
            if begin.state == "busy":
                self._skip_until[digest_id] = time.monotonic() + o.interval
                return
        if begin.state == "gone":
            await self.digests.drawn(
                digest_id, version=0, ts="", now=time.time(), next_in=0, holder=holder
            )
            return
        channel, ts, posted = begin.channel, begin.ts, ""
        drew: int | None = None
        # The reviewers to DM about the message posted or adopted now: recorded as owed with
        # it, sent by the next draw (under the draw lock, so by one replica, once each).
        dms: list[str] = []
        next_in = o.interval
        # Second copies of the message to retire: those an earlier draw could not, and those
        # found now. Each is recorded until it is retired, and retried on the next draw.
        strays: list[str] = list(begin.strays)
        recheck: Recheck | Literal["done"] | None = None
        try:
            if not ts and begin.earlier_at is not None:
                # An earlier attempt may have landed, or may still land after this one: look
                # now, and once more when it can no longer be under way (`recheck`).
                recheck = Recheck(time.time() + o.recheck, begin.earlier_at)
                found = await self._find(channel, digest_id, begin.earlier_at)
                if found:
                    log.warning(
                        "adopting a digest posted by an earlier attempt digest=%s copies=%d",
                        digest_id,
                        len(found),
                    )
                    # Several attempts whose outcomes nobody saw may each have landed: the
                    # oldest copy is the digest's message, every other one is retired below
                    # (its Review buttons would be a second live set for every row).
                    ts = posted = found[0].ts
                    strays += [m.ts for m in found[1:] if m.ts not in strays]
            if not ts:
                await self.slack.pace(channel).acquire(priority=True)
                digest, message, requests = await self._render(digest_id)
                if digest is None:
                    return
                dms = await self._dm_users(digest_id, requests)
                try:
                    answer = await self.slack.call(
                        channel, "chat_postMessage", channel=channel, once=True, **message
                    )
                except Permanent as e:
                    await self._fail_rows(digest, f"Slack refused the digest message: {e.error}")
                    drew = digest.version
                    return
                ts = posted = str(answer["ts"])
                drew = digest.version
                self.ctx.metrics.slack_posts.labels(how="digest").inc()
                log.info(
                    "posted digest digest=%s channel=%s ts=%s rows=%d",
                    digest_id,
                    channel,
                    ts,
                    len(digest.rows),
                )
            elif begin.version > begin.drawn or posted:
                await self.slack.pace(UPDATE_PACE).acquire()
                digest, message, requests = await self._render(digest_id)
                if digest is None:
                    return
                if posted:  # adopted: nobody has told its reviewers yet
                    dms = await self._dm_users(digest_id, requests)
                try:
                    await self.slack.call(  # the token was taken before the render
                        UPDATE_PACE, "chat_update", paced=False, channel=channel, ts=ts, **message
                    )
                    self.ctx.metrics.slack_updates.inc()
                except Permanent as e:
                    log.warning("could not update digest digest=%s error=%s", digest_id, e.error)
                drew = digest.version
            else:
                drew = begin.drawn  # drawn already: here only for its copies
            if begin.recheck is not None and begin.recheck.at <= time.time():
                late = await self._find(channel, digest_id, begin.recheck.since)
                strays += [m.ts for m in late if m.ts != ts and m.ts not in strays]
                if len(late) > 1:
                    log.warning(
                        "a copy of a digest landed late digest=%s copies=%d", digest_id, len(late)
                    )
                recheck = "done"
            kept = SlackMessage(channel=channel, ts=ts)
            left = []
            for stray in strays:
                if not await self._retire(SlackMessage(channel=channel, ts=stray), kept):
                    left.append(stray)
            strays = left
            if strays:
                next_in = max(o.backoff, o.interval)
            if begin.dms:
                await self._dm_reviewers(digest_id, begin.dms, channel)
        except asyncio.CancelledError:
            # Stopped mid-draw: as a failed draw, it keeps the lock and stays owed (a DM of
            # it may still be under way, finishing while the bot stops: `SlackCaller.settle`).
            drew = None
            raise
        except Exception as e:
            log.warning("digest draw owed, will retry digest=%s error=%s", digest_id, e)
            next_in = max(o.backoff, o.interval)
            raise
        finally:
            await asyncio.shield(
                self.digests.drawn(
                    digest_id,
                    version=drew,
                    ts=posted,
                    now=time.time(),
                    next_in=next_in,
                    holder=holder,
                    strays=strays,
                    recheck=recheck,
                    dms=dms,
                )
            )
        if self.ctx.home is not None:
            self.ctx.home.changed()

    async def _retire(self, stray: SlackMessage, kept: SlackMessage) -> bool:
        """A second copy of a digest (an earlier attempt landed unseen): replace it with a
        pointer to the kept message, without buttons and without the digest metadata (so no
        later search takes it for the digest). False: not done, try again later (Slack
        unavailable); a copy Slack refuses to change (deleted, …) is done."""
        try:
            link = await self.slack.permalink(kept)
            text = "This list was posted twice; it continues in " + (
                f"<{link}|the other message>" if link else "the other message of this list"
            )
            await self.slack.pace(UPDATE_PACE).acquire()
            await self.slack.call(
                UPDATE_PACE,
                "chat_update",
                paced=False,
                channel=stray.channel,
                ts=stray.ts,
                text=text,
                blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
                metadata={"event_type": RETIRED_EVENT_TYPE, "event_payload": {"ts": kept.ts}},
            )
            self.ctx.metrics.slack_updates.inc()
            log.warning("retired a second copy of a digest ts=%s kept=%s", stray.ts, kept.ts)
        except Permanent as e:
            log.warning("could not retire a digest copy ts=%s error=%s", stray.ts, e.error)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("digest copy not retired, will retry ts=%s error=%r", stray.ts, e)
            return False
        return True

    async def _render(
        self, digest_id: str
    ) -> tuple[Digest | None, dict[str, Any], dict[str, ApprovalRequest]]:
        """The digest, its message, and its rows' requests as read for it."""
        digest = await self.digests.get(digest_id)
        if digest is None:
            return None, {}, {}
        requests = await self.ctx.store.get_many(r.request_id for r in digest.rows)
        message = digest_blocks.digest_message(digest, requests)
        return digest, message | {"metadata": copies.digest_metadata(digest_id)}, requests

    async def _find(self, channel: str, digest_id: str, since: float) -> list[SlackMessage]:
        bot_id = await self.slack.bot_id()

        async def history(method: str, **kwargs: Any) -> Any:
            return await self.slack.call(kwargs["channel"], method, **kwargs)

        try:
            return await copies.find_matching(
                history,
                channel,
                lambda m: copies.is_digest_copy(m, digest_id, bot_id),
                since=since,
            )
        except Permanent as e:
            log.warning(
                "cannot read channel history for a digest (%s) channel=%s", e.error, channel
            )
            return []

    async def _fail_rows(self, digest: Digest, reason: str) -> None:
        """The digest cannot be posted: its waiting requests end as errors (no agent waits on
        a message that will never come)."""
        for row in digest.rows:
            result = await self.ctx.store.resolve(
                row.request_id, Decision.error(reason, by="slack")
            )
            log.error("request failed id=%s reason=%s won=%s", row.request_id, reason, result.won)

    async def _dm_users(self, digest_id: str, requests: dict[str, ApprovalRequest]) -> list[str]:
        """The reviewers of the digest's waiting `requests` to DM (`review_dms`), each once:
        one DM per digest, not one per request."""
        service = self.ctx.service
        users: list[str] = []
        try:
            for request in requests.values():
                if request.is_pending:
                    users += await review_dms(request, service.policy.routes, service.membership)
        except Exception as e:  # the digest is posted whatever the directory says
            log.warning("no digest DMs: cannot list the reviewers digest=%s error=%r", digest_id, e)
            return []
        return list(dict.fromkeys(users))

    async def _dm_reviewers(self, digest_id: str, users: tuple[str, ...], channel: str) -> None:
        """DM each of `users` (owed since the digest was posted), each marked sent once done
        (or given up: a DM Slack refused, or whose outcome nobody saw, is not sent twice)."""
        text = (
            f"Your review is needed in <#{channel}>: many approval requests arrived at once "
            "and are listed in one message there."
        )

        async def sent(user: str) -> None:
            await self.digests.dm_sent(digest_id, user)

        await self.slack.dm_owed(users, text, sent)


async def place(ctx: BotContext, request: ApprovalRequest) -> SlackMessage | None:
    """Where a request can be found in Slack this round: its message, or its digest's."""
    if request.message is not None:
        return request.message
    digest_id = await ctx.redis.hget(ctx.keys.request(request.id), f"digest:{request.escalations}")
    if not digest_id:
        return None
    digests = Digests(ctx.redis, ctx.keys)
    return await digests.message(digest_id.decode() if isinstance(digest_id, bytes) else digest_id)
