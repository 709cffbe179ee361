"""Reminders to reviewers who have not acted, and the requester's notice of the outcome.

`Reminders` reminds the reviewers of a route with `remind_after` who have not voted (a DM each
or one thread reply; for a request listed in a digest, about the digest), each round once
across replicas and none once the request has ended, through the dispatcher's `SlackCaller`
(bot/slack/delivery/calls.py); `notify_decided` sends the DM a caller asked for with `notify`.
Every text is the rendered, masked fallback of `bot.slack.render.request_message`. The rules:
docs/ARCHITECTURE.md, "Reminders and the requester's notice".
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from approvals._internal.policy import Route
from approvals._internal.questions import thread_of
from approvals._internal.slack_ids import is_user, is_user_group
from approvals._internal.store.connection import cancel_and_wait
from approvals.models import ApprovalRequest, SlackMessage
from bot.core.context import BotContext
from bot.slack.delivery.calls import Permanent, SlackCaller, Unsure
from bot.slack.delivery.digests import place
from bot.slack.render import request_message as blocks

log = logging.getLogger(__name__)

#: A decision notice's key (`notify:<id>`) while the notice is still to send.
OWED = "owed"


class Reminders:
    """Sends due reminders (`remind_due`, run every `interval` s) and decision notices."""

    def __init__(self, ctx: BotContext, interval: float = 5.0) -> None:
        self.ctx = ctx
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._calls: SlackCaller | None = None

    def use(self, calls: SlackCaller) -> None:
        """Send through `calls` (the dispatcher's: one pacing per channel per process)."""
        self._calls = calls

    @property
    def calls(self) -> SlackCaller:
        if self._calls is None:  # no dispatcher (yet): a caller of its own, paced the same
            self._calls = SlackCaller(
                self.ctx,
                post_interval=1.0,
                burst=3,
                pacing=True,
                max_attempts=4,
                backoff_base=0.5,
                backoff_max=30.0,
            )
        return self._calls

    async def _post(self, channel: str, **kwargs: Any) -> None:
        """chat.postMessage, paced on `channel`; a 429 is waited out (nothing was posted)."""
        await self.calls.call(
            channel, "chat_postMessage", paced=True, once=True, channel=channel, **kwargs
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reminders")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.remind_due()
            except Exception:  # a Redis or Slack outage: the next tick tries again
                log.warning("reminders failed", exc_info=True)
            await asyncio.sleep(self.interval)

    async def _once(self, name: str) -> bool:
        """True the first time any replica asks for `name` (kept as long as requests)."""
        key = self.ctx.keys.lock(name)
        return bool(await self.ctx.redis.set(key, "1", nx=True, ex=self.ctx.keys.retention_seconds))

    async def remind_due(self, now: datetime | None = None) -> int:
        """Send every reminder due at `now` (default: the store's clock); how many sent."""
        now = now or self.ctx.store.now()
        routes = self.ctx.service.policy.routes
        after = [r.remind_after for r in routes.values() if r.remind_after is not None]
        if not after:
            return 0  # no route reminds: nothing to read (the scan runs every second)
        # Only requests old enough for the earliest reminder: not every pending one, which
        # under a burst of thousands would be read and parsed every second.
        before = now.timestamp() - min(after)
        sent = 0
        # Requests listed in one digest are reminded of together: one reply in its thread, or
        # one DM per reviewer, not one per request (a storm would flood the channel).
        listed: dict[tuple[str, str, str], list[ApprovalRequest]] = {}
        locks: dict[str, str] = {}  # request id → its round's lock name
        for request in await self.ctx.store.list_pending(1000, created_before=before):
            route = routes.get(request.route)
            if route is None or route.remind_after is None:
                continue
            age = (now - request.created_at).total_seconds() - route.remind_after
            if age < 0:
                continue
            # Its own message, or the digest message that lists it (an approval storm).
            where = await place(self.ctx, request)
            if where is None:
                continue
            round_ = int(age // route.remind_every) if route.remind_every else 0
            lock = f"remind:{request.id}:{request.escalations}:{round_}"
            if not await self._once(lock):
                continue
            locks[request.id] = lock
            if request.message is None:
                listed.setdefault((where.channel, where.ts, request.route), []).append(request)
                continue
            sent += await self._sending([request], locks, self._remind(request, route, where))
        for (channel, ts, route_name), requests in listed.items():
            digest = SlackMessage(channel=channel, ts=ts)
            sending = self._remind_listed(requests, routes[route_name], digest)
            sent += await self._sending(requests, locks, sending)
        return sent

    async def _sending(
        self, requests: list[ApprovalRequest], locks: dict[str, str], sending: Any
    ) -> int:
        """Await one reminder; if Slack did not take it, release its round (the next tick
        sends it) or, refused for good, log and count it."""
        ids = ",".join(r.id for r in requests)
        try:
            result: int = await sending
            return result
        except Permanent as e:
            self.ctx.metrics.reminders_failed.labels(outcome="refused").inc()
            log.error("reminder refused by Slack ids=%s error=%s", ids, e.error)
        except Exception as e:  # Unsure, Redis, …: may pass; the next tick tries again
            self.ctx.metrics.reminders_failed.labels(outcome="retried").inc()
            log.warning("reminder not sent, will retry ids=%s error=%s", ids, e)
            names = [self.ctx.keys.lock(locks[r.id]) for r in requests if r.id in locks]
            if names:
                await self.ctx.redis.delete(*names)
        return 0

    async def _remind_listed(
        self, requests: list[ApprovalRequest], route: Route, digest: SlackMessage
    ) -> int:
        """Remind the reviewers of requests listed in one digest message, once for all."""
        if len(requests) == 1:
            return await self._remind(requests[0], route, digest)
        waiting: dict[str, int] = {}
        for request in requests:
            for user in await self._waiting_on(request):
                waiting[user] = waiting.get(user, 0) + 1
        what = f"{len(requests)} requests listed here are still waiting for a decision."
        if route.remind_via == "thread":
            mentions = " ".join(blocks.who(u) for u in waiting) or "Reviewers"
            await self._post(digest.channel, thread_ts=digest.ts, text=f"⏰ {mentions}: {what}")
            log.info("reminded digest via=thread requests=%d", len(requests))
            return 1
        link = await self.calls.permalink(digest)
        where = f"<{link}|the list>" if link else blocks.where(digest.channel)
        texts = {
            user: f"⏰ Reminder: {count} requests still need your review in {where}."
            for user, count in waiting.items()
        }
        sent = await self._dms(texts)
        log.info("reminded digest via=dm requests=%d users=%d", len(requests), sent)
        return sent

    async def _dms(self, texts: dict[str, str]) -> int:
        """DM each user their text; how many went. A user whose DM failed is logged; if
        none went and any failure may pass, it raises (the round is released, retried)."""
        sent, retry = 0, None
        for user, text in texts.items():
            try:
                await self.calls.dm(user, text, once=True)
                sent += 1
            except Permanent as e:
                self.ctx.metrics.reminders_failed.labels(outcome="refused").inc()
                log.error("reminder refused by Slack user=%s error=%s", user, e.error)
            except Unsure as e:
                log.warning("reminder DM not sent user=%s error=%s", user, e)
                retry = e
        if retry is not None and sent == 0:
            raise retry
        if retry is not None:  # the others have theirs: not sent again to them
            self.ctx.metrics.reminders_failed.labels(outcome="lost").inc()
        return sent

    async def _waiting_on(self, request: ApprovalRequest) -> list[str]:
        """The reviewers (groups expanded) who have not voted, each once."""
        users = [r for r in request.reviewers if is_user(r)]
        membership = self.ctx.service.membership
        for group in (r for r in request.reviewers if is_user_group(r)):
            users += sorted(await membership(group)) if membership else []
        voted = {v.user for v in request.votes}
        return [u for u in dict.fromkeys(users) if u not in voted and u != request.requester]

    async def _remind(self, request: ApprovalRequest, route: Route, message: SlackMessage) -> int:
        users = await self._waiting_on(request)
        summary = blocks.request_message(request)["text"]
        if route.remind_via == "thread":
            mentions = " ".join(blocks.who(u) for u in users) or "Reviewers"
            # A request that is itself a reply (a retry answering a question) is reminded in
            # the thread it is in: Slack threads have one level.
            thread = thread_of(request)
            root = thread.ts if thread is not None and thread.channel == message.channel else None
            await self._post(
                message.channel,
                thread_ts=root or message.ts,
                text=f"⏰ {mentions}: still waiting for a decision. {summary}",
            )
            log.info("reminded id=%s via=thread users=%d", request.id, len(users))
            return 1
        link = await self.calls.permalink(message)
        where = f"<{link}|the request>" if link else blocks.where(message.channel)
        text = f"⏰ Reminder: your review is still needed on {where}. {summary}"
        sent = await self._dms(dict.fromkeys(users, text))
        log.info("reminded id=%s via=dm users=%d", request.id, sent)
        return sent

    async def notify_decided(self, request: ApprovalRequest) -> bool:
        """DM the outcome to the user the caller named (`notify`), once; True if sent now.

        The notice is owed from the first time a decided request's entry is handled (a key
        set to `owed`) until it is sent or given up (`done`): a replica that dies before
        sending it leaves it to the one that handles the entry again. The DM and the record
        of it are one unit a stop waits for (`SlackCaller.whole`)."""
        if request.notify is None or request.is_pending or self.ctx.slack is None:
            return False
        key = self.ctx.keys.lock(f"notify:{request.id}")
        ttl = self.ctx.keys.retention_seconds
        redis = self.ctx.redis
        if not await redis.set(key, OWED, nx=True, ex=ttl) and await redis.get(key) != OWED:
            return False  # told already (or given up)
        user, text = request.notify, blocks.decided_message(request)["text"]

        async def notice() -> bool:
            try:
                await self.calls.dm(user, f"Your approval request was decided. {text}", once=True)
                told = True
            except (Permanent, Unsure) as e:
                log.warning("notice not sent id=%s error=%s", request.id, e)
                told = False
            await redis.set(key, "done", ex=ttl)
            return told

        return await self.calls.whole(notice())
