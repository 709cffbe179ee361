"""Benchmark: the same steps of the bot run back to back and after a pause (code gone cold).

    .venv/bin/python -m bench.bench_cold [--embedded] [--samples 200]

Why one decision's latency is many times the CPU a decision costs under load: a step that
runs right after itself finds its code and data in the CPU's caches; one that runs after
milliseconds of other work or of sleep does not. This times four steps of a decision's path,
each `--samples` times back to back, then with a pause before each one (asleep, and busy in
a loop that touches nothing of the step's): a stored request parsed (`ApprovalStore`'s read,
pydantic), a request message drawn (`bot.slack.render.request_message`, with the masking), one
Redis round trip
(HGETALL through redis-py, hiredis) and a bare PUBLISH → subscriber in this process. p50 µs
of each, and the ratio to back to back. See bench/README.md ("Cold steps").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalEvent, ApprovalRequest
from bench.common import add_redis_arguments, delete_prefix, machine, run_against_redis, table
from bot.slack.render import request_message as blocks

PAUSES_MS = (1.0, 10.0, 50.0)


def _request() -> ApprovalRequest:
    return ApprovalRequest(
        event=ApprovalEvent(
            tool_name="deploy",
            arguments={"service": "api", "env": "prod", "version": "2026.12.1", "replicas": 3},
            agent="agent-7",
            session_id="bench-session",
        ),
        channel="C0BENCH",
    )


async def _pause(ms: float, busy: bool) -> None:
    if busy:  # the CPU stays busy, on code and data of its own
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass
    else:
        await asyncio.sleep(ms / 1000)


async def _timed(
    step: Callable[[], Awaitable[Any]], samples: int, pause_ms: float, busy: bool
) -> float:
    """p50 µs of `step`, each run after a pause of `pause_ms` (0: back to back)."""
    times = []
    for _ in range(samples):
        if pause_ms:
            await _pause(pause_ms, busy)
        began = time.perf_counter()
        await step()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1e6, 1)


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    request = _request()
    stored = request.model_dump_json()
    keys = Keys(f"bench-{uuid.uuid4().hex[:10]}")
    redis = connect(url, max_connections=4, client_name=f"bench-cold-{keys.prefix}")
    subscriber = connect(url, max_connections=2, client_name=f"bench-cold-sub-{keys.prefix}")
    pubsub = subscriber.pubsub()
    channel = f"{keys.prefix}:cold"
    key = keys.request(request.id)
    try:
        await redis.hset(key, mapping={"data": stored, "status": "pending"})
        await redis.expire(key, 600)
        await pubsub.subscribe(channel)
        assert await pubsub.get_message(timeout=5.0)  # the subscribe confirmation

        async def parse() -> None:
            ApprovalRequest.model_validate_json(stored)

        async def draw() -> None:
            json.dumps(blocks.request_message(request))

        async def read() -> None:
            await redis.hgetall(key)

        async def publish() -> None:
            await redis.publish(channel, "x")
            while await pubsub.get_message(timeout=1.0) is None:
                pass

        steps = {
            "parse a stored request (pydantic)": parse,
            "draw a request message (blocks, masking, JSON)": draw,
            "Redis round trip (HGETALL, redis-py)": read,
            "PUBLISH → subscriber (redis-py, one process)": publish,
        }
        out: dict[str, Any] = {"bench": "cold", **machine(), "samples": args.samples, "steps": {}}
        for name, step in steps.items():
            for _ in range(20):  # imported, compiled, connected
                await step()
            row: dict[str, float] = {"back to back": await _timed(step, args.samples, 0, False)}
            for ms in PAUSES_MS:
                row[f"after {ms:g} ms asleep"] = await _timed(step, args.samples, ms, False)
            row[f"after {PAUSES_MS[1]:g} ms busy"] = await _timed(
                step, args.samples, PAUSES_MS[1], True
            )
            out["steps"][name] = row
        return out
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        await delete_prefix(redis, keys)
        await redis.aclose()
        await subscriber.aclose()


def print_report(r: dict[str, Any]) -> None:
    print(
        f"\nsteps of a decision, back to back and after a pause · Python {r['python']} · "
        f"{r['cpus']} CPUs · load {r['loadavg_1m']} · p50 of {r['samples']} each, µs"
    )
    names = list(next(iter(r["steps"].values())))
    rows = []
    for step, row in r["steps"].items():
        base = row["back to back"]
        rows.append(
            [
                step,
                *(
                    f"{row[n]:,.1f}" + ("" if n == names[0] else f" ({row[n] / base:.1f}x)")
                    for n in names
                ),
            ]
        )
    print(table(["step", *names], rows))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Steps of a decision, warm and cold.")
    p.add_argument("--samples", type=int, default=200, help="timings per step and pause (200)")
    add_redis_arguments(p)
    args = p.parse_args(argv)
    if args.samples < 1:
        p.error("--samples must be ≥ 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, main_async)
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
