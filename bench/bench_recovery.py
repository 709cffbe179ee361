"""Benchmark: recovery after a crash — a replica SIGKILLed with posts owed, a survivor takes
over. How long until the dead replica's entries are taken, until every request is posted,
the survivor's post rate against Slack's pacing, and copies per request.

    .venv/bin/python -m bench.bench_recovery [--requests 40] [--kill-after 6] [--redis-url URL]

The victim is a real `approval-bot serve` subprocess (so the kill is real); the
survivor is a `Bot` in this process, running from the start like any other
replica. Both talk to the Slack emulator, which answers each post after
`--latency` seconds and enforces Slack's 1 post/s per channel (burst 3) with
429 + Retry-After; the bots pace themselves at the same rate. Everything goes to
one channel, so the rate limit is the bound. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any

from approvals._internal.policy_file import default_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.models import ApprovalEvent
from bench.common import (
    add_redis_arguments,
    delete_prefix,
    free_port,
    machine,
    redis_server,
    table,
)
from bot.core.app import Bot, BotConfig
from tests.support.credentials import BOT_TOKEN
from tests.support.e2e import CHANNEL, SIGNING_SECRET
from tests.support.slack_emulator import SlackEmulator


async def run(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    keys = Keys(f"bench-recovery-{uuid.uuid4().hex[:8]}")
    redis = connect(redis_url, max_connections=8)
    slack = await SlackEmulator(channels={CHANNEL}).start()
    slack.set_latency(args.latency, "chat.postMessage")
    slack.enforce_rate(per_channel_per_second=1.0, burst=3)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))},
        "REDIS_URL": redis_url,
        "APPROVALS_PREFIX": keys.prefix,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "PORT": str(free_port()),
        "APPROVALS_DEFAULT_CHANNEL": CHANNEL,
        "LOG_LEVEL": "WARNING",
    }
    victim = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "serve", env=env, stderr=asyncio.subprocess.DEVNULL
    )
    survivor = Bot(
        BotConfig(
            redis_url=redis_url,
            prefix=keys.prefix,
            host="127.0.0.1",
            port=0,
            slack_bot_token=BOT_TOKEN,
            slack_signing_secret=SIGNING_SECRET,
            slack_api_url=slack.api_url,
            default_channel=CHANNEL,
            consumer=f"survivor-{uuid.uuid4().hex[:6]}",
        )
    )
    try:
        # Requests are created once the victim has joined the group, so both replicas share them.
        for _ in range(200):
            if await redis.exists(keys.outbox) and await redis.xinfo_consumers(keys.outbox, "bot"):
                break
            await asyncio.sleep(0.05)
        await survivor.start()
        service = ApprovalService(ApprovalStore(redis, keys), default_policy(CHANNEL))
        rids = []
        for i in range(args.requests):
            event = ApprovalEvent(tool_name=f"tool{i}", arguments={"i": i})
            rids.append((await service.submit(event)).id)
        await slack.wait_until(
            lambda: len(slack.calls_to("chat.postMessage", ok=True)) >= args.kill_after, 120
        )
        # Kill while a post is in flight (Slack still working on it), when one is.
        in_flight = 0
        for _ in range(40):
            in_flight = slack.arrived("chat.postMessage") - len(slack.calls_to("chat.postMessage"))
            if in_flight:
                break
            await asyncio.sleep(0.05)
        consumers = {c["name"]: c for c in await redis.xinfo_consumers(keys.outbox, "bot")}
        victim_name = next(n for n in consumers if n != survivor.config.consumer)
        owed_by_victim = int(consumers[victim_name]["pending"])
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        killed = time.monotonic()
        taken_at = None
        while True:
            names = {c["name"] for c in await redis.xinfo_consumers(keys.outbox, "bot")}
            if taken_at is None and victim_name not in names:
                taken_at = time.monotonic()
            found = await survivor.ctx.store.get_many(rids)  # type: ignore[union-attr]
            if all(r.message is not None for r in found.values()):
                break
            if time.monotonic() - killed > 600:
                raise SystemExit("not every request was posted within 10 minutes")
            await asyncio.sleep(0.05)
        done = time.monotonic()
        after = [c for c in slack.calls_to("chat.postMessage", ok=True) if c.at >= killed]
        span = (after[-1].at - after[0].at) if len(after) > 1 else 0.0
        copies: dict[str, int] = {rid: 0 for rid in rids}
        for message in slack.messages.values():
            text = json.dumps(message.get("blocks", []))
            for rid in rids:
                if rid in text:
                    copies[rid] += 1
        return {
            "requests": args.requests,
            "owed_by_victim_at_kill": owed_by_victim,
            "posts_in_flight_at_kill": in_flight,
            "taken_after_kill_s": round((taken_at or done) - killed, 2),
            "all_posted_after_kill_s": round(done - killed, 2),
            "posts_after_kill": len(after),
            "posts_per_s_after_kill": round((len(after) - 1) / span, 2) if span else None,
            "slack_pacing_per_s": 1.0,
            "rate_limited_429": len(
                [c for c in slack.calls_to("chat.postMessage") if c.status == 429]
            ),
            "history_lookups": len(slack.calls_to("conversations.history")),
            "max_copies_per_request": max(copies.values()),
            "requests_without_message": sum(1 for n in copies.values() if n == 0),
        }
    finally:
        if victim.returncode is None:
            victim.kill()
            await victim.wait()
        if survivor.ctx is not None:
            await survivor.stop()
        await slack.stop()
        await delete_prefix(redis, keys)
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--kill-after", type=int, default=6, help="posts made before the kill")
    parser.add_argument("--latency", type=float, default=1.0, help="Slack's time per post (s)")
    add_redis_arguments(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with redis_server(args.redis_url, embedded=args.embedded) as url:
        result = asyncio.run(run(args, url))
    print(table(["figure", "value"], [[k, v] for k, v in result.items()]))
    print(json.dumps({"bench": "recovery", **result, "machine": machine()}))


if __name__ == "__main__":
    main()
