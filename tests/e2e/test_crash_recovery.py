"""A bot process SIGKILLed with posts in flight against a slow Slack: after another replica
recovers its work, each request has exactly one live message. `approval-bot serve` runs
as a real subprocess so the kill is real."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from approvals._internal.service import Actor
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalEvent
from tests.support.credentials import API_TOKEN, BOT_TOKEN
from tests.support.e2e import CHANNEL, SIGNING_SECRET, BotFactory, has_actions
from tests.support.slack_emulator import SlackEmulator

REQUESTS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def serve_process(
    redis_url: str, keys: Keys, slack: SlackEmulator
) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))},
        "REDIS_URL": redis_url,
        "APPROVALS_PREFIX": keys.prefix,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "PORT": str(free_port()),
        "APPROVALS_API_TOKENS": API_TOKEN,
        "APPROVALS_DEFAULT_CHANNEL": CHANNEL,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli.main",
        "serve",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    yield proc
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def copies_of(slack: SlackEmulator, request_id: str) -> list[dict[str, Any]]:
    return [m for m in slack.messages.values() if request_id in json.dumps(m.get("blocks", []))]


@pytest.mark.slow(reason="a real SIGKILL of `serve`; the dead replica's 5 s heartbeat expires")
async def test_sigkill_with_posts_in_flight_leaves_one_live_message_per_request(
    serve_process: asyncio.subprocess.Process,
    make_bot: BotFactory,
    slack: SlackEmulator,
) -> None:
    # Slack takes 1 s per post, and finishes it even though the client is dead by then.
    slack.set_latency(1.0, "chat.postMessage")
    creator = await make_bot(with_slack=False)
    assert creator.ctx is not None
    rids = [
        (await creator.ctx.service.submit(ApprovalEvent(tool_name=f"t{i}", arguments={"i": i}))).id
        for i in range(REQUESTS)
    ]
    # The subprocess posts the first ones (a burst of 3), paced; kill it mid-flight.
    await slack.wait_until(lambda: slack.arrived("chat.postMessage") >= 3, 20, "posts in flight")
    serve_process.send_signal(signal.SIGKILL)
    await serve_process.wait()
    in_flight = slack.arrived("chat.postMessage")
    # A survivor takes the dead replica's entries (its heartbeat expires in 5 s), adopts the
    # messages Slack finished after the kill and posts the rest.
    survivor = await make_bot()
    assert survivor.ctx is not None

    async def all_recorded() -> bool:
        found = await survivor.ctx.store.get_many(rids)  # type: ignore[union-attr]
        return all(r.message is not None for r in found.values())

    for _ in range(400):
        if await all_recorded():
            break
        await asyncio.sleep(0.05)
    assert await all_recorded(), "every request was posted after the crash"
    await asyncio.sleep(0.5)
    for rid in rids:
        assert len(copies_of(slack, rid)) == 1, f"{rid}: {len(copies_of(slack, rid))} copies"
    assert slack.arrived("chat.postMessage") == REQUESTS, "no post repeated"
    assert in_flight >= 3
    assert slack.calls_to("conversations.history"), "the survivor looked before posting"
    # Decided: every message loses its buttons.
    for rid in rids:
        await survivor.ctx.service.decide(rid, "approve", Actor("cli:ops", via="cli"))
    await slack.wait_for("chat.update", REQUESTS, timeout=10)
    assert not any(has_actions(m) for rid in rids for m in copies_of(slack, rid))
