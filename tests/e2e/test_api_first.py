"""A burst of agent API calls goes before the dispatcher's Slack calls
(bot/slack/delivery/dispatcher.py
`_after_api`), and the posts follow: once the API is idle, or once the burst's time is up
while it still is not. Nothing is skipped or doubled."""

from __future__ import annotations

import asyncio

from approvals.models import ApprovalEvent
from bot.core.app import Bot
from tests.support import eventually
from tests.support.e2e import BotFactory, fast_dispatcher
from tests.support.slack_emulator import SlackEmulator


def _posts(slack: SlackEmulator) -> int:
    return sum(1 for c in slack.calls if c.method == "chat.postMessage")


async def _held_entry(bot: Bot) -> str:
    """Two API calls in flight (a burst of 2), then a request: its post entry is read and
    waits for them."""
    assert bot.ctx is not None and bot.dispatcher is not None
    dispatcher = bot.dispatcher
    bot.ctx.api_calls.__enter__()
    bot.ctx.api_calls.__enter__()
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments={"n": 1}))
    await eventually(lambda: dispatcher._api_first_until is not None, what="the entry waiting")
    return request.id


async def test_posts_wait_for_a_burst_of_api_calls_and_follow_it(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot(dispatcher=fast_dispatcher(api_burst=2, api_first=60.0))
    assert bot.ctx is not None
    await _held_entry(bot)
    for _ in range(20):  # the dispatcher has every chance to run: it waits
        await asyncio.sleep(0)
    assert _posts(slack) == 0
    bot.ctx.api_calls.__exit__(None, None, None)
    assert _posts(slack) == 0  # one call still being answered
    bot.ctx.api_calls.__exit__(None, None, None)
    await slack.wait_until(lambda: _posts(slack) == 1, what="the post after the burst")
    assert bot.ctx.api_calls.count == 0


async def test_a_burst_that_does_not_end_holds_the_posts_only_so_long(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot(dispatcher=fast_dispatcher(api_burst=2, api_first=0.2))
    assert bot.ctx is not None
    try:
        await _held_entry(bot)
        await slack.wait_until(lambda: _posts(slack) == 1, what="the post within the burst")
        assert bot.ctx.api_calls.count == 2  # the API never went idle
        # Later entries of the same burst do not wait again.
        await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments={"n": 2}))
        await slack.wait_until(lambda: _posts(slack) == 2, what="the next post")
    finally:
        bot.ctx.api_calls.__exit__(None, None, None)
        bot.ctx.api_calls.__exit__(None, None, None)


async def test_steady_api_traffic_below_a_burst_holds_nothing(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot(dispatcher=fast_dispatcher(api_burst=2, api_first=60.0))
    assert bot.ctx is not None and bot.dispatcher is not None
    with bot.ctx.api_calls:  # one call in flight: not a burst
        await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments={"n": 3}))
        await slack.wait_until(lambda: _posts(slack) == 1, what="the post")
    assert bot.dispatcher._api_first_until is None
