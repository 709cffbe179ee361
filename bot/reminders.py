"""Reminders to reviewers who have not acted, and the requester's notice of the outcome.

A route with `remind_after` (seconds after the request was asked; then every
`remind_every`) reminds the reviewers who have not voted: a DM each, with a link to
the message (`chat.getPermalink`), or (`remind_via: thread`) one reply in the
message's thread mentioning them. A request listed in a digest message (an approval
storm, bot/digests.py) is reminded of with a link to, or in the thread of, that digest;
the requests of one digest due together get one reply, or one DM per reviewer.
Each round is sent once across replicas (a lock per
request, route round and reminder round) and none is sent once the request has ended;
deadlines and escalation are the sweeper's, untouched. Time comes from the store's
clock, so tests pass their own `now`.

A caller of the HTTP API may name a Slack user (`notify`, a user id — never an actor)
to be told the outcome: one DM once the request is decided. Every text is the
rendered, masked fallback of `bot.blocks`, and leaves through `bot.masking.outbound`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from slack_sdk.errors import SlackApiError

from approvals.models import ApprovalRequest, SlackMessage
from approvals.policy import Route
from approvals.slack_ids import is_user, is_user_group
from approvals.store.connection import cancel_and_wait
from bot import blocks
from bot.context import BotContext
from bot.digests import place

log = logging.getLogger(__name__)


class Reminders:
    """Sends due reminders (`remind_due`, run every `interval` s) and decision notices."""

    def __init__(self, ctx: BotContext, interval: float = 5.0) -> None:
        self.ctx = ctx
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

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
            if not await self._once(f"remind:{request.id}:{request.escalations}:{round_}"):
                continue
            if request.message is None:
                listed.setdefault((where.channel, where.ts, request.route), []).append(request)
                continue
            sent += await self._remind(request, route, where)
        for (channel, ts, route_name), requests in listed.items():
            sent += await self._remind_listed(
                requests, routes[route_name], SlackMessage(channel=channel, ts=ts)
            )
        return sent

    async def _remind_listed(
        self, requests: list[ApprovalRequest], route: Route, digest: SlackMessage
    ) -> int:
        """Remind the reviewers of requests listed in one digest message, once for all."""
        if len(requests) == 1:
            return await self._remind(requests[0], route, digest)
        slack = self.ctx.slack
        waiting: dict[str, int] = {}
        for request in requests:
            for user in await self._waiting_on(request):
                waiting[user] = waiting.get(user, 0) + 1
        what = f"{len(requests)} requests listed here are still waiting for a decision."
        if route.remind_via == "thread":
            mentions = " ".join(blocks.who(u) for u in waiting) or "Reviewers"
            await slack.chat_postMessage(
                channel=digest.channel, thread_ts=digest.ts, text=f"⏰ {mentions}: {what}"
            )
            log.info("reminded digest via=thread requests=%d", len(requests))
            return 1
        try:
            answer = await slack.chat_getPermalink(channel=digest.channel, message_ts=digest.ts)
            where = f"<{answer['permalink']}|the list>"
        except SlackApiError as e:
            log.warning("no permalink of a digest error=%s", e.response.get("error"))
            where = blocks.where(digest.channel)
        sent = 0
        for user, count in waiting.items():
            try:
                opened = await slack.conversations_open(users=user)
                await slack.chat_postMessage(
                    channel=opened["channel"]["id"],
                    text=f"⏰ Reminder: {count} requests still need your review in {where}.",
                )
                sent += 1
            except SlackApiError as e:
                log.warning("reminder not sent user=%s error=%s", user, e.response.get("error"))
        log.info("reminded digest via=dm requests=%d users=%d", len(requests), sent)
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
        slack = self.ctx.slack
        users = await self._waiting_on(request)
        summary = blocks.request_message(request)["text"]
        try:
            link = (await slack.chat_getPermalink(channel=message.channel, message_ts=message.ts))[
                "permalink"
            ]
        except SlackApiError as e:
            log.warning("no permalink id=%s error=%s", request.id, e.response.get("error"))
            link = None
        where = f"<{link}|the request>" if link else blocks.where(message.channel)
        if route.remind_via == "thread":
            mentions = " ".join(blocks.who(u) for u in users) or "Reviewers"
            await slack.chat_postMessage(
                channel=message.channel,
                thread_ts=message.ts,
                text=f"⏰ {mentions}: still waiting for a decision. {summary}",
            )
            log.info("reminded id=%s via=thread users=%d", request.id, len(users))
            return 1
        sent = 0
        for user in users:
            try:
                opened = await slack.conversations_open(users=user)
                dm = opened["channel"]["id"]
                await slack.chat_postMessage(
                    channel=dm,
                    text=f"⏰ Reminder: your review is still needed on {where}. {summary}",
                )
                sent += 1
            except SlackApiError as e:
                log.warning("reminder not sent user=%s error=%s", user, e.response.get("error"))
        log.info("reminded id=%s via=dm users=%d", request.id, sent)
        return sent

    async def notify_decided(self, request: ApprovalRequest) -> bool:
        """DM the outcome to the user the caller named (`notify`), once; True if sent."""
        if request.notify is None or request.is_pending or self.ctx.slack is None:
            return False
        if not await self._once(f"notify:{request.id}"):
            return False
        text = blocks.decided_message(request)["text"]
        try:
            opened = await self.ctx.slack.conversations_open(users=request.notify)
            dm = opened["channel"]["id"]
            await self.ctx.slack.chat_postMessage(
                channel=dm, text=f"Your approval request was decided. {text}"
            )
        except SlackApiError as e:
            log.warning("notice not sent id=%s error=%s", request.id, e.response.get("error"))
            return False
        return True
