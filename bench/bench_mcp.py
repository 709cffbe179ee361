"""Benchmark: MCP. How fast a waiting MCP call resumes after a decision, and what the gating
proxy adds to a call a policy rule allows.

    .venv/bin/python -m bench.bench_mcp [--calls 200] [--concurrency 20] [--redis-url URL]

- `/mcp` (Streamable HTTP inside the real `Bot`, no Slack): `request_approval` calls wait
  for a reviewer; each is decided through the service (what a click does) and the time
  from the decision to the client holding the result is measured.
- `approval-bot mcp` over stdio (a child process on Redis): the same.
- `approval-bot mcp-proxy` in front of the test upstream, an `allow` rule for its reads:
  a `tools/call` round trip through the proxy beside the same call made to the upstream
  directly.

Clients, bot and reviewer share this process's event loop (the stdio server and the proxy
are child processes), so figures are conservative. Prints tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from approvals._internal.policy_file import default_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from bench.common import add_redis_arguments, delete_prefix, machine, redis_server, summarize_ms
from bench.common import table as render
from bot.core.app import Bot
from tests.support.credentials import API_TOKEN
from tests.support.e2e import bot_config
from tests.support.mcp import agent_env, approval_bot

REVIEWER = Actor("U0BENCH", via="slack")


async def decision_to_result(
    client: Client, service: ApprovalService, calls: int, concurrency: int
) -> list[float]:
    """`calls` request_approval calls, `concurrency` at a time; seconds from each decision to
    its result at the client."""
    latencies: list[float] = []
    slots = asyncio.Semaphore(concurrency)

    async def one(k: int) -> None:
        async with slots:
            action = f"bench_{k}"
            call = asyncio.create_task(client.call_tool("request_approval", {"action": action}))
            while True:
                found = [
                    r for r in await service.store.list_pending() if r.event.tool_name == action
                ]
                if found:
                    break
                await asyncio.sleep(0.005)
            decided_at = time.perf_counter()
            await service.decide(found[0].id, "approve", REVIEWER)
            result = await call
            latencies.append(time.perf_counter() - decided_at)
            assert json.loads(result.content[0].text)["approved"] is True  # type: ignore[union-attr]

    await asyncio.gather(*(one(k) for k in range(calls)))
    return latencies


async def round_trips(call: Callable[[], Awaitable[Any]], calls: int) -> list[float]:
    spent = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        spent.append(time.perf_counter() - started)
    return spent


async def run(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    keys = Keys(f"bench-mcp-{uuid.uuid4().hex[:6]}")
    redis = connect(redis_url, client_name="bench-mcp")
    service = ApprovalService(ApprovalStore(redis, keys), default_policy("C0APPROVALS"))
    results: dict[str, Any] = {}
    try:
        bot = Bot(bot_config(redis_url, keys, None))
        await bot.start()
        try:
            url = f"http://127.0.0.1:{bot.port}/mcp"
            headers = {"Authorization": f"Bearer {API_TOKEN}"}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                transport = streamable_http_client(url, http_client=http)
                async with Client(transport, mode="legacy") as client:
                    latencies = await decision_to_result(
                        client, service, args.calls, args.concurrency
                    )
            results["http_decision_to_result"] = summarize_ms(latencies)
        finally:
            await bot.stop()

        env = agent_env(redis_url, keys)
        async with Client(approval_bot("mcp", env=env), mode="legacy") as client:
            latencies = await decision_to_result(client, service, args.calls, args.concurrency)
        results["stdio_decision_to_result"] = summarize_ms(latencies)

        with tempfile.TemporaryDirectory() as tmp:
            policy = Path(tmp) / "policy.yaml"
            policy.write_text(
                "routes:\n  default:\n    channel: C0APPROVALS\nrules:\n"
                "  - name: reads\n    match: {tool: 'mcp__files__read_*'}\n    action: allow\n"
            )
            upstream = (sys.executable, "-m", "tests.support.mcp_upstream")
            env = agent_env(redis_url, keys, APPROVALS_POLICY_FILE=str(policy))
            direct = StdioServerParameters(command=upstream[0], args=list(upstream[1:]), env=env)
            proxied = approval_bot("mcp-proxy", "--name", "files", "--", *upstream, env=env)
            for name, params in (("upstream_direct", direct), ("through_proxy", proxied)):
                async with Client(params, mode="legacy") as client:

                    async def read(client: Client = client) -> Any:
                        return await client.call_tool("read_file", {"path": "README"})

                    await round_trips(read, 10)  # warm up
                    results[f"allowed_call_{name}"] = summarize_ms(
                        await round_trips(read, args.calls)
                    )
    finally:
        await delete_prefix(redis, keys)
        await redis.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    add_redis_arguments(parser)
    args = parser.parse_args()
    with redis_server(args.redis_url, embedded=args.embedded) as redis_url:
        results = asyncio.run(run(args, redis_url))
    rows = [(name, r["n"], r["p50_ms"], r["p99_ms"], r["max_ms"]) for name, r in results.items()]
    print(render(("figure", "n", "p50 ms", "p99 ms", "max ms"), rows))
    print(json.dumps({"bench": "mcp", "machine": machine(), **vars(args), **results}))


if __name__ == "__main__":
    main()
