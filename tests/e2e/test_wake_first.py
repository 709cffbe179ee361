"""A decision made in another process reaches this bot two ways: the Waiter's pub/sub hint
(then a read), and the dispatcher's `update` entry (which reads the request to draw it). The
dispatcher hands what it read to the Waiter before it draws (bot/slack/delivery/dispatcher.py
`_handle`), so
a waiting agent is answered before the message's `chat.update`, and is answered even when the
hint never comes."""

from __future__ import annotations

import asyncio

import pytest

from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from approvals.models import ApprovalEvent, Decision
from tests.support.e2e import BotFactory, posted_message
from tests.support.slack_emulator import SlackEmulator


async def test_the_dispatchers_read_wakes_the_waiter_before_the_draw(
    make_bot: BotFactory, slack: SlackEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Waiter hears no hints: only the dispatcher's read (or the 10 s re-check) can wake it.
    real_listen = Waiter._listen

    async def deaf(self: Waiter) -> None:
        assert self._pubsub is not None
        original = self._pubsub.get_message

        async def no_messages(**kw: object) -> dict[str, object] | None:
            message = await original(**kw)  # type: ignore[arg-type]
            if message is not None and message.get("type") == "message":
                return None
            return message

        self._pubsub.get_message = no_messages  # type: ignore[method-assign]
        await real_listen(self)

    monkeypatch.setattr(Waiter, "_listen", deaf)
    bot = await make_bot()
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments={"n": 1}))
    await slack.wait_for("chat.postMessage", 1)
    posted_message(slack, request.id)
    waiter = bot.ctx.waiter
    watch = waiter.watch(request.id, 30.0)
    updates_at_wake: list[int] = []
    watch.add_done_callback(
        lambda _: updates_at_wake.append(sum(1 for a in slack.arrivals if a[0] == "chat.update"))
    )
    try:
        # Another process's store: its decision is not delivered in-process.
        elsewhere = ApprovalStore(bot.ctx.redis, bot.ctx.keys)
        result = await elsewhere.resolve(request.id, Decision(outcome="approve", decided_by="U1"))
        assert result.won
        decided = await asyncio.wait_for(watch, 5.0)  # well before the 10 s re-check
        assert decided.status == "approved"
        await slack.wait_until(
            lambda: any(c.method == "chat.update" for c in slack.calls), what="the update"
        )
        assert updates_at_wake == [0]  # woken before the draw reached Slack
    finally:
        waiter.unwatch(watch)
