"""The App Home tab and `/approvals`: what waits for a person and what was decided lately.

`HomeLists.for_user` reads (pending requests the person may decide, newest first; recent
decisions theirs or on their routes) through the same `ApprovalService.may_decide` rule as
a click; the rendering is pure (`home_view`, `slash_list`, `slash_help`) and reuses the
request buttons of `bot.slack.render.request_message`, so a click on the Home tab or in a
`/approvals` reply is
the same click, through the same listener, compare-and-set and reviewer checks, as one in
the channel (whose message the decision's outbox `update` redraws).

`HomePublisher` republishes the tab of each person who opened it (a Redis sorted set,
`Keys.home_viewers`, so any replica's change reaches them) when their view changed:
changes are coalesced for `debounce` seconds, each publish is skipped when the rendered
view is the one last published, and publishes are paced (`min_interval`, well within
`views.publish`'s Tier 4 limit), waiting out a 429's `Retry-After`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from slack_sdk.errors import SlackApiError

from approvals._internal.service import Actor
from approvals._internal.store.connection import cancel_and_wait
from approvals.models import TERMINAL_STATUSES, ApprovalRequest
from bot.core.context import BotContext
from bot.slack import action_ids as ids
from bot.slack.render import call_context, risk_lines
from bot.slack.render import request_message as blocks
from bot.slack.render.request_message import (
    Block,
    _actions,
    _context,
    _section,
    _view,
    clip_escaped,
    who,
)

log = logging.getLogger(__name__)

#: Block Kit: a Home tab holds at most 100 blocks, a message 50.
MAX_HOME_BLOCKS = 100
MAX_MESSAGE_BLOCKS = 50
#: How many recent decisions the Home tab lists.
RECENT = 10
#: How many pending requests (and audit entries, for recent decisions) are looked at.
SCAN = 500
#: A viewer is kept up to date for this long after last opening the tab.
VIEWER_TTL_SECONDS = 24 * 3600

HELP = (
    "*/approvals* — the requests waiting for you, with their buttons\n"
    "*/approvals ID* — one request (`apr_…`), with its buttons\n"
    "*/approvals help* — this help\n"
    "The *Home* tab of this app shows the same list, and what was decided lately."
)


@dataclass(frozen=True)
class Lists:
    waiting: list[ApprovalRequest]
    recent: list[ApprovalRequest]


class HomeLists:
    """Reads what waits for a person and what was decided lately (Redis, the service's rule)."""

    def __init__(self, ctx: BotContext) -> None:
        self.ctx = ctx

    async def may_see(self, request: ApprovalRequest, user: str) -> bool:
        """A person sees a request they may decide, or decided."""
        if request.decision is not None and request.decision.decided_by == user:
            return True
        return await self.ctx.service.may_decide(request, Actor(user)) is None

    async def for_user(self, user: str) -> Lists:
        store = self.ctx.store
        pending = list(reversed(await store.list_pending(SCAN)))  # newest first
        waiting = [r for r in pending if await self.ctx.service.may_decide(r, Actor(user)) is None]
        rows = cast(
            list[tuple[str, dict[str, str]]],
            await store.redis.xrevrange(store.keys.audit, count=SCAN),
        )
        decided_ids: list[str] = []
        for _, fields in rows:
            if fields.get("status", "") in TERMINAL_STATUSES and fields.get("id"):
                decided_ids.append(fields["id"])
        found = await store.get_many(decided_ids)
        recent: list[ApprovalRequest] = []
        for request_id in dict.fromkeys(decided_ids):
            request = found.get(request_id)
            if request is None or request.is_pending or not request.decision:
                continue
            if request.decision.via == "policy":  # never asked of anyone
                continue
            if await self.may_see(request, user):
                recent.append(request)
            if len(recent) >= RECENT:
                break
        return Lists(waiting, recent)


# ---------------------------------------------------------------- rendering (pure)


def _request_blocks(req: ApprovalRequest) -> list[Block]:
    """One waiting request: what it is, and its buttons (an actions block of its own id)."""
    v = _view(req)
    head = f"*{clip_escaped(v.tool, 200)}* · {clip_escaped(req.route, 100)}"
    if req.channel:
        head += f" · {blocks.where(req.channel)}"
    if req.quorum > 1:
        head += f" · {blocks.quorum_progress(req)}"
    if req.proposal is not None:
        head += f" · ✏️ edited by {who(req.proposal.by)}"
    text = head + "\n" + clip_escaped(v.prompt, 1500)
    if req.answers is not None:  # a retry answering a reviewer's question: the question
        question = call_context.collapse(v.mask(req.answers.question), 2, 300)
        text += f"\n❓ *{who(req.answers.asked_by)} asked:* " + clip_escaped(question, 600)
    text += risk_lines.home_text(v)  # one line per risk (the first few)
    context = req.event.context
    if context is not None and not context.empty:
        # The agent's reason and what it changes, collapsed; the whole in Details.
        if context.reason:
            why = call_context.collapse(v.mask(context.reason), 2, 300)
            text += "\n*Why:* " + clip_escaped(why, 600)
        for change in context.files[: call_context.INLINE_FILES]:
            path = call_context.display_path(change.path, req.event.cwd)
            text += f"\n✏️ `{clip_escaped(v.mask(path), 200)}` ({call_context.counts(change)})"
    out: list[Block] = [_section(text)]
    if (context is not None and not context.empty) or req.risks:
        call_context.with_details_button(out, req.id)
    actions = _actions(v)
    for block in actions:
        if block.get("type") == "actions":
            # Unique within the view; `bot.slack.listeners` reads a select's request id from it.
            block["block_id"] = f"{ids.ACTIONS_BLOCK}:{req.id}"
    out += actions
    out.append(
        _context(f"`{clip_escaped(req.id, 200)}` · asked {blocks.slack_date(req.created_at)}")
    )
    return out


def _decided_line(req: ApprovalRequest) -> str:
    d = req.decision
    by = f" by {who(d.decided_by)}" if d and d.decided_by else ""
    at = blocks.slack_date(d.decided_at) if d else ""
    edited = " (with edits)" if d and d.edited_arguments is not None else ""
    return (
        clip_escaped(f"{_view(req).tool}: {req.status}{edited}", 300)
        + f"{by} · {at} · `{clip_escaped(req.id, 100)}`"
    )


def waiting_blocks(waiting: list[ApprovalRequest], budget: int) -> list[Block]:
    """The waiting requests that fit `budget` blocks, then "N more" for the rest."""
    out: list[Block] = []
    for n, req in enumerate(waiting):
        block = _request_blocks(req)
        rest = len(waiting) - n - 1
        if len(out) + len(block) + (1 if rest else 0) > budget:
            more = len(waiting) - n
            out.append(_context(f"… and {more} more waiting: `/approvals ID` shows any one."))
            return out
        out += block
        out.append({"type": "divider"})
    return out


def home_view(lists: Lists) -> dict[str, Any]:
    """The Home tab: "Waiting for you" and "Recently decided" (at most 100 blocks)."""
    recent = [_context(_decided_line(r)) for r in lists.recent] or [
        _context("Nothing decided lately.")
    ]
    head: list[Block] = [
        {"type": "header", "text": blocks._plain(f"Waiting for you ({len(lists.waiting)})", 150)}
    ]
    tail: list[Block] = [
        {"type": "header", "text": blocks._plain("Recently decided", 150)},
        *recent,
    ]
    budget = MAX_HOME_BLOCKS - len(head) - len(tail) - 1
    waiting = waiting_blocks(lists.waiting, budget) or [_context("Nothing waits for you. 🎉")]
    return {"type": "home", "blocks": [*head, *waiting, *tail]}


def slash_list(waiting: list[ApprovalRequest]) -> dict[str, Any]:
    """`/approvals`: the waiting list as an ephemeral reply (at most 50 blocks)."""
    if not waiting:
        return {"response_type": "ephemeral", "text": "Nothing waits for you."}
    head = [_section(f"*Waiting for you ({len(waiting)})*")]
    body = waiting_blocks(waiting, MAX_MESSAGE_BLOCKS - len(head))
    return {
        "response_type": "ephemeral",
        "text": f"{len(waiting)} approval requests wait for you.",
        "blocks": [*head, *body],
    }


def slash_one(req: ApprovalRequest) -> dict[str, Any]:
    """`/approvals ID`: the request as its channel message shows it (with its buttons)."""
    message = blocks.message_for(req)
    return {"response_type": "ephemeral", **message}


def slash_help() -> dict[str, Any]:
    return {"response_type": "ephemeral", "text": HELP}


def view_hash(view: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- publishing


class HomePublisher:
    """Keeps each viewer's Home tab current: debounced, unchanged views skipped, paced."""

    def __init__(
        self,
        ctx: BotContext,
        *,
        debounce: float = 0.5,
        min_interval: float = 0.3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = ctx
        self.lists = HomeLists(ctx)
        self.debounce = debounce
        self.min_interval = min_interval
        self.clock = clock
        self._published: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="home-publisher")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def opened(self, user: str) -> None:
        """`app_home_opened`: remember the viewer and publish their tab now."""
        keys = self.ctx.keys
        await self.ctx.redis.zadd(keys.home_viewers, {user: self.clock()})
        await self.ctx.redis.expire(keys.home_viewers, VIEWER_TTL_SECONDS)
        self._published.pop(user, None)
        await self.publish(user)

    def changed(self) -> None:
        """A request was posted or redrawn: the viewers' tabs are looked at again soon."""
        self._wake.set()

    async def publish(self, user: str) -> bool:
        """Publish `user`'s tab if it differs from the one last published; True if sent."""
        view = home_view(await self.lists.for_user(user))
        digest = view_hash(view)
        if self._published.get(user) == digest:
            return False
        for _ in range(3):
            try:
                await self.ctx.slack.views_publish(user_id=user, view=view)
            except SlackApiError as e:
                if e.response.status_code == 429:
                    await asyncio.sleep(float(e.response.headers.get("Retry-After", "1")))
                    continue
                log.warning("views.publish failed user=%s error=%s", user, e.response.get("error"))
                return False
            self._published[user] = digest
            return True
        return False

    async def _viewers(self) -> list[str]:
        since = self.clock() - VIEWER_TTL_SECONDS
        found = await self.ctx.redis.zrangebyscore(self.ctx.keys.home_viewers, since, "+inf")
        return [str(u) for u in found]

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.debounce)  # coalesce a burst of changes
            self._wake.clear()
            try:
                for user in await self._viewers():
                    if await self.publish(user):
                        await asyncio.sleep(self.min_interval)
            except Exception:  # a Redis or Slack outage: the next change tries again
                log.warning("home publishing failed", exc_info=True)
