"""Benchmark: an approval storm — many requests for one channel within a second — against
Slack's pacing: how long until every request has a visible, actionable place.

    .venv/bin/python -m bench.bench_storm [--requests 100] [--embedded] [--no-digests]

The real `Bot` runs in this process with Slack pacing ON (production
`DispatcherOptions`) against the Slack emulator enforcing Slack-like limits:
chat.postMessage 1 per second per channel after a burst (`--post-burst`, 3),
chat.update 50 a minute across the workspace after a burst (`--update-burst`, 5);
over a limit it answers 429 with Retry-After, which the bot must wait out.
`--requests` requests are submitted at once (within one second) for one
channel. A request is *actionable* once a message in the channel (its own, or a
digest row) shows a live button for it: the time is when the emulator took the
call that drew it, from the first submit. Then every request is decided (as a
reviewer's click would, through `ApprovalService.decide`) and the bench waits
until no live button is left in the channel: "updated on every decision".

`--no-digests` turns digest messages off: the dispatcher as it was before (one
paced message per request), for the before/after comparison in one run window.
Prints tables and PASS/MISS, then one JSON line. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from typing import Any

from approvals._internal.service import Actor
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalEvent
from bench.common import (
    add_redis_arguments,
    delete_prefix,
    machine,
    run_against_redis,
    summarize_ms,
    table,
    verdict,
)
from bot.core.app import Bot, BotConfig
from bot.slack import action_ids as ids
from bot.slack.delivery.dispatcher import DispatcherOptions
from tests.support.credentials import API_TOKEN
from tests.support.e2e import CHANNEL, SIGNING_SECRET
from tests.support.slack_emulator import Call, SlackEmulator

TARGET_SECONDS = 10.0
REVIEWER = Actor("U0BENCHREVIEWER", via="slack")


def live_in(call: Call) -> set[str]:
    """Request ids with a live button in the blocks this call drew (post or update)."""
    blocks = call.body.get("blocks")
    if isinstance(blocks, str):
        try:
            blocks = json.loads(blocks)
        except ValueError:
            return set()
    found: set[str] = set()
    for block in blocks if isinstance(blocks, list) else []:
        if block.get("type") == "actions":
            for element in block.get("elements", []):
                if element.get("action_id") in ids.BUTTON_ACTIONS and element.get("value"):
                    found.add(str(element["value"]).split("@")[0])
        accessory = block.get("accessory") or {}
        if accessory.get("action_id") == ids.REVIEW:
            found.add(ids.read_review_value(str(accessory.get("value", "")))[0])
    return found


def live_now(slack: SlackEmulator) -> Counter[str]:
    """Request id → live sets of buttons across every message of the channel now."""
    live: Counter[str] = Counter()
    for message in slack.messages_in(CHANNEL):
        live.update(live_in(Call("-", {"blocks": message.get("blocks", [])}, {}, 0.0)))
    return live


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    keys = Keys(prefix=f"bench-{run_id}")
    admin = connect(url)
    options = DispatcherOptions(pacing=True, digests=not args.no_digests)
    result: dict[str, Any] = {
        "machine": machine(),
        "requests": args.requests,
        "digests": not args.no_digests,
        "limits": {
            "chat.postMessage": f"1/s per channel, burst {args.post_burst}",
            "chat.update": f"50/min per workspace, burst {args.update_burst}",
        },
    }
    try:
        async with SlackEmulator(channels={CHANNEL}) as slack:
            slack.enforce_rate(per_channel_per_second=1.0, burst=args.post_burst)
            slack.enforce_method_rate("chat.update", per_minute=50, burst=args.update_burst)
            config = BotConfig(
                redis_url=url,
                prefix=keys.prefix,
                host="127.0.0.1",
                port=0,
                slack_bot_token=slack.token,
                slack_signing_secret=SIGNING_SECRET,
                slack_api_url=slack.api_url,
                api_tokens=(API_TOKEN,),
                default_channel=CHANNEL,
                consumer=f"bench-{run_id}",
                dispatcher=options,
            )
            bot = Bot(config)
            await bot.start()
            try:
                result |= await storm(bot, slack, args)
            finally:
                await bot.stop()
    finally:
        await delete_prefix(admin, keys)
        await admin.aclose()
    return result


async def storm(bot: Bot, slack: SlackEmulator, args: argparse.Namespace) -> dict[str, Any]:
    assert bot.ctx is not None
    service = bot.ctx.service
    start = time.monotonic()
    created = await asyncio.gather(
        *(
            service.submit(ApprovalEvent(tool_name="deploy", arguments={"service": f"svc-{i}"}))
            for i in range(args.requests)
        )
    )
    submitted = time.monotonic() - start
    rids = {r.id for r in created}
    actionable: dict[str, float] = {}
    seen = 0

    def follow() -> bool:
        nonlocal seen
        calls = slack.calls
        while seen < len(calls):
            call = calls[seen]
            seen += 1
            if call.ok and call.method in ("chat.postMessage", "chat.update"):
                for rid in live_in(call) & rids:
                    actionable.setdefault(rid, call.at - start)
        return len(actionable) == len(rids)

    timed_out = False
    try:
        await slack.wait_until(follow, args.timeout, "every request actionable")
    except AssertionError:
        timed_out = True
    placed_at = time.monotonic() - start
    await asyncio.sleep(args.settle)
    live = live_now(slack)
    one_each = all(live[r] == 1 for r in rids)
    calls_placing = Counter(c.method for c in slack.calls)
    limited_placing = Counter(c.method for c in slack.calls if c.status == 429)
    times = sorted(actionable.values())
    all_within = not timed_out and bool(times) and times[-1] <= TARGET_SECONDS

    # Every request decided (as clicks would): each place must lose its buttons.
    decided_in = None
    if not timed_out and not args.no_decide:
        before = len(slack.calls)
        decide_start = time.monotonic()
        await asyncio.gather(*(service.decide(r, "approve", REVIEWER) for r in rids))
        try:
            await slack.wait_until(
                lambda: not any(live_now(slack)[r] for r in rids),
                args.timeout,
                "every place shows its outcome",
            )
            decided_in = time.monotonic() - decide_start
        except AssertionError:
            decided_in = None
        decide_calls = Counter(c.method for c in slack.calls[before:])
        decide_limited = Counter(c.method for c in slack.calls[before:] if c.status == 429)
    else:
        decide_calls, decide_limited = Counter(), Counter()
    metadata = [(m.get("metadata") or {}).get("event_type") for m in slack.messages_in(CHANNEL)]
    return {
        "submitted_s": round(submitted, 3),
        "actionable": summarize_ms(times),
        "actionable_count": len(actionable),
        "all_actionable_s": round(times[-1], 3) if times and not timed_out else None,
        "placing_wall_s": round(placed_at, 3),
        "timed_out": timed_out,
        "one_live_set_each": one_each,
        "messages": len(metadata),
        "digest_messages": metadata.count("approval_digest"),
        "calls_placing": dict(calls_placing),
        "rate_limited_placing": dict(limited_placing),
        "all_updated_s": round(decided_in, 3) if decided_in is not None else None,
        "calls_deciding": dict(decide_calls),
        "rate_limited_deciding": dict(decide_limited),
        "target": {
            "all_actionable_within_10s": verdict(all_within),
            "one_live_set_of_buttons_each": verdict(one_each),
        },
    }


def print_report(r: dict[str, Any]) -> None:
    m = r["machine"]
    mode = "digests ON" if r["digests"] else "digests OFF (one message per request, as before)"
    print(
        f"# approval storm: {r['requests']} requests for one channel, {mode}; "
        f"python {m['python']}, {m['cpus']} cpus, load {m['loadavg_1m']}"
    )
    print(f"# Slack limits enforced by the emulator: {r['limits']}")
    a = r["actionable"]
    rows = [
        ["submitted (all requests)", f"{r['submitted_s']:.2f} s"],
        ["actionable p50", _s(a["p50_ms"])],
        ["actionable p99", _s(a["p99_ms"])],
        ["actionable max", _s(a["max_ms"])],
        ["actionable count", f"{r['actionable_count']} / {r['requests']}"],
        ["messages in the channel", f"{r['messages']} ({r['digest_messages']} digests)"],
        [
            "all decided → all updated",
            _s(r["all_updated_s"] * 1000 if r["all_updated_s"] else None),
        ],
    ]
    print(table(["figure", "value"], rows))
    methods = sorted(set(r["calls_placing"]) | set(r["calls_deciding"]))
    print(
        table(
            [
                "Slack method",
                "calls (placing)",
                "429s (placing)",
                "calls (deciding)",
                "429s (deciding)",
            ],
            [
                [
                    method,
                    r["calls_placing"].get(method, 0),
                    r["rate_limited_placing"].get(method, 0),
                    r["calls_deciding"].get(method, 0),
                    r["rate_limited_deciding"].get(method, 0),
                ]
                for method in methods
            ],
        )
    )
    updates = r["calls_deciding"].get("chat.update", 0)
    limited = r["rate_limited_deciding"].get("chat.update", 0)
    print(
        f"decision phase: {updates} chat.update calls, {limited} answered 429 "
        f"(Slack's Tier 3: ~50/min per workspace)"
    )
    for name, value in r["target"].items():
        print(f"{value}  {name.replace('_', ' ')}")


def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f} s"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="An approval storm against Slack's pacing.")
    p.add_argument("--requests", type=int, default=100, help="requests at once (default 100)")
    p.add_argument("--post-burst", type=int, default=3, help="chat.postMessage burst (default 3)")
    p.add_argument("--update-burst", type=int, default=5, help="chat.update burst (default 5)")
    p.add_argument(
        "--no-digests", action="store_true", help="one message per request (the bot before)"
    )
    p.add_argument("--no-decide", action="store_true", help="skip the decision phase")
    p.add_argument("--timeout", type=float, default=180.0, help="give up after (default 180 s)")
    p.add_argument("--settle", type=float, default=1.0, help="seconds before counting (default 1)")
    add_redis_arguments(p)
    args = p.parse_args(argv)
    if args.requests < 1:
        p.error("--requests must be ≥ 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, run, logging.ERROR)
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
