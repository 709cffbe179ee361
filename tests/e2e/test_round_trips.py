"""Counts, not timings: Redis commands and round trips of one complete cycle
(create → post → click → resume → update) and of the click path, on the private server.

The cycle is watched with MONITOR, which names every command the server runs: a client's
(`tcp`) and those run inside a Lua script (`lua`). Only commands on this test's key prefix
count, so another test's leftovers cannot add to them."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from approvals._internal.service import Actor
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support.e2e import BotFactory, Reviewer, posted_message
from tests.support.slack_emulator import SlackEmulator

#: The targets.
MAX_CLIENT_COMMANDS_PER_CYCLE = 15
MAX_CLICK_ROUND_TRIPS = 3

_counting: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "round_trips", default=None
)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[int]]:
    """Counts the packets a task (and what it awaits) sends to Redis: one per round trip,
    a pipeline being one. Other tasks (the dispatcher, the Waiter) are not counted."""
    original = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        box = _counting.get()
        if box is not None:
            box[0] += 1
        await original(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)

    def start() -> list[int]:
        box = [0]
        _counting.set(box)
        return box

    return start


class Watch:
    """MONITOR on its own connection: the commands that touch `prefix`, by kind."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.client: Redis = connect(redis_url, max_connections=1, client_name="round-trips")
        self.prefix = prefix
        self.seen: list[tuple[str, str]] = []  # (client_type, COMMAND)
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def _run(self) -> None:
        async with self.client.monitor() as monitor:
            self._ready.set()
            while True:
                info = await monitor.next_command()
                command = str(info["command"])
                if self.prefix in command:
                    self.seen.append((info["client_type"], command.split(" ", 1)[0].upper()))

    async def __aenter__(self) -> Watch:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.client.aclose()

    def take(self) -> tuple[Counter[str], Counter[str]]:
        """(client commands, commands inside scripts) since the last take."""
        seen, self.seen = self.seen, []
        client = Counter(c for t, c in seen if t != "lua" and c not in _OURS)
        lua = Counter(c for t, c in seen if t == "lua")
        return client, lua


@pytest.fixture
async def watch(redis_url: str, keys: Keys) -> AsyncIterator[Watch]:
    async with Watch(redis_url, keys.prefix) as w:
        yield w


#: What the test itself sends (the bot sends neither as a client): left out of the counts.
_OURS = ("HEXISTS", "XPENDING")


async def _cycle(bot: Bot, slack: SlackEmulator, alice: Reviewer, n: int) -> None:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="deploy", arguments={"n": n}, agent="agent-7")
    )
    waiting = asyncio.create_task(bot.ctx.waiter.wait(request.id, timeout=15))
    await slack.wait_until(lambda: _posted(slack, request.id), 5, "the post")
    channel, message = posted_message(slack, request.id)
    for _ in range(500):  # the message's ts is written just after Slack answers
        if await bot.ctx.redis.hexists(bot.ctx.keys.request(request.id), "message"):
            break
        await asyncio.sleep(0.01)
    assert await alice.click(bot, message, channel, ids.APPROVE) == 200
    assert (await waiting).status == "approved"
    await slack.wait_for("chat.update", n)
    await _quiet(bot)


def _posted(slack: SlackEmulator, request_id: str) -> bool:
    try:
        posted_message(slack, request_id)
    except AssertionError:
        return False
    return True


async def _quiet(bot: Bot) -> None:
    """Until the dispatcher has acknowledged everything it read."""
    assert bot.ctx is not None
    for _ in range(200):
        info = await bot.ctx.redis.xpending(bot.ctx.keys.outbox, "bot")
        if not info or not info.get("pending"):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("outbox entries still pending")


async def test_a_complete_cycle_takes_at_most_15_client_commands_and_no_expire_storm(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, watch: Watch
) -> None:
    bot = await make_bot()
    alice: Reviewer = reviewer("U0ALICE")
    await _cycle(bot, slack, alice, 1)  # the first write refreshes the shared streams' TTLs
    counts = []
    for n in (2, 3, 4):
        watch.take()
        await _cycle(bot, slack, alice, n)
        counts.append(watch.take())
    # Background loops (the dispatcher's blocking read, heartbeats) may add a command to a
    # cycle; the fewest seen is the cycle's own.
    client, lua = min(counts, key=lambda c: sum(c[0].values()))
    total = sum(client.values())
    assert total <= MAX_CLIENT_COMMANDS_PER_CYCLE, f"{total} client commands: {dict(client)}"
    assert client["EVALSHA"] == 4, dict(client)  # create, begin_post, record_message, vote
    assert client["EXPIRE"] == 0, dict(client)
    # TTLs where keys are written: the request hash on create and on its decision, the
    # pending and deadline indexes on create (they vanish with their last member), the
    # call-id key with SET EX; the shared streams only once a minute, not per request.
    assert lua["EXPIRE"] <= 4, dict(lua)


async def test_the_click_path_is_at_most_3_round_trips(
    make_bot: BotFactory, slack: SlackEmulator, round_trips: Callable[[], list[int]]
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, agent="agent-7")
    )
    await slack.wait_until(lambda: _posted(slack, request.id), 5, "the post")

    async def click() -> tuple[int, str]:
        box = round_trips()
        assert bot.ctx is not None
        result = await bot.ctx.service.decide(request.id, "approve", Actor("U0ALICE", via="slack"))
        return box[0], result.status

    trips, status = await asyncio.create_task(click())
    assert status == "decided"
    assert 1 <= trips <= MAX_CLICK_ROUND_TRIPS, f"{trips} round trips"
