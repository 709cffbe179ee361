"""Benchmark: the floor — what the parts the bot is made of cost by themselves, per complete
approval cycle, beside the bot's own CPU per cycle ("3x fewer bot CPU ms per cycle").

A complete cycle (`bench_e2e.py`) is, on the bot's side: two agent HTTP requests (the create,
the long-poll answered), one signed Slack interaction through slack-bolt (the click), two
Slack Web API calls (chat.postMessage, chat.update), its Redis commands (counted by
`tests/e2e/test_round_trips.py`) and one pub/sub message. Each part is measured alone, in a
spawned child process that does only that part's work, with the uvloop event loop and the
GC settings of `approval-bot serve`; its counterpart runs in this process (or is the Redis
server), so the child's CPU time (`time.process_time()` around the timed operations) is the
part's own:

- **aiohttp server**: `POST` of a create's JSON body answered 201 with JSON, and a `GET`
  answered with an approval object (the long-poll's answer), over `--concurrency`
  keep-alive connections (`bench.common.LeanHttp`, whose own CPU stays in this process).
- **slack-bolt on aiohttp**: a signed `block_actions` POST carrying a real request message
  (`bot.slack.render.request_message.request_message`), dispatched as the bot does
  (`bot.slack.bolt_requests`, the
  app's `async_dispatch`, bolt's aiohttp response), to one action listener that acks.
- **aiohttp client**: a JSON POST of a real request message (`bot.slack.client.json_body`),
  its JSON answer read (`MaskingWebClient.post_json`'s calls), answered by a bare asyncio
  server in this process.
- **redis-py**: EVALSHA of a script that returns a request-sized hash, and HGETALL of that
  hash, on the bot's own pool (`approvals._internal.store.connection.connect`: hiredis, C packing).
- **pub/sub**: a message read by a redis-py subscriber with the Waiter's read loop.

The floor is their sum for one cycle; nothing of the bot's own work (policy, models, the
store's scripts, masking, rendering, the dispatcher) is in it. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from approvals._internal.store.connection import connect
from approvals.approval import approval_json
from approvals.models import ApprovalEvent, ApprovalRequest
from bench.common import (
    LeanHttp,
    add_redis_arguments,
    free_port,
    machine,
    recv,
    run_against_redis,
    spawn,
    table,
)
from bot.slack import action_ids as ids
from bot.slack.client import json_body
from bot.slack.render import request_message as blocks
from tests.support.credentials import BOT_TOKEN
from tests.support.e2e import CHANNEL, SIGNING_SECRET, click_payload, sign

#: The bot's client commands per complete cycle as `tests/e2e/test_round_trips.py` counts
#: them (EVALSHA 4, HGETALL 3, XREADGROUP 2, XACK 2, HGET 1, SET 1): `--commands`.
CYCLE_COMMANDS = 13

_REQUEST = ApprovalRequest(
    event=ApprovalEvent(
        tool_name="deploy",
        arguments={"service": "api", "env": "prod", "version": "2026.12.1", "replicas": 3},
        agent="agent-7",
        session_id="bench-session",
    ),
    channel=CHANNEL,
)
_POSTED = {"ok": True, "channel": CHANNEL, "ts": "1764633600.000100", "message": {"text": "x"}}


def _message() -> dict[str, Any]:
    message = dict(blocks.request_message(_REQUEST))
    message["ts"] = _POSTED["ts"]
    return message


def _click_form() -> str:
    user = {"id": "U0BENCH", "username": "bench", "name": "bench", "team_id": "T0EMULATED"}
    payload = click_payload(
        user, _message(), CHANNEL, ids.APPROVE, "http://127.0.0.1:9/actions/bench"
    )
    return urlencode({"payload": json.dumps(payload)})


# -- the child: one part, its CPU clock read on request -----------------------------------


def _child(conn: Connection, part: str, arg: Any) -> None:
    from bot.cli.serve import event_loop_factory, tune_gc_for_serving

    body = _CHILDREN[part]
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        tune_gc_for_serving()
        runner.run(body(conn, arg))


async def _marks(conn: Connection) -> None:
    """Answer "mark" with this process's CPU seconds until "stop"."""
    while True:
        what = await recv(conn, 600)
        if what == "stop":
            return
        conn.send(time.process_time())


async def _serve(conn: Connection, app: web.Application) -> None:
    port = free_port()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    conn.send(port)
    try:
        await _marks(conn)
    finally:
        await runner.cleanup()


async def _server_child(conn: Connection, _: Any) -> None:
    answer = approval_json(_REQUEST)  # written once: serialising is the bot's own work

    async def create(request: web.Request) -> web.Response:
        await request.json()
        return web.json_response(text=answer, status=201)

    async def get(request: web.Request) -> web.Response:
        return web.json_response(text=answer)

    app = web.Application()
    app.router.add_post("/v1/approvals", create)
    app.router.add_get("/v1/approvals/{id}", get)
    await _serve(conn, app)


async def _bolt_child(conn: Connection, _: Any) -> None:
    from slack_bolt.adapter.aiohttp import to_aiohttp_response
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.authorization import AuthorizeResult

    from bot.slack.bolt_requests import to_bolt_request

    async def authorize(**_: Any) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=None, team_id="T0BENCH", bot_token=BOT_TOKEN, bot_user_id="U0BOT"
        )

    bolt = AsyncApp(signing_secret=SIGNING_SECRET, authorize=authorize)

    @bolt.action(ids.APPROVE)
    async def approve(ack: Callable[[], Awaitable[None]]) -> None:
        await ack()

    async def events(request: web.Request) -> web.Response:
        response = await bolt.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    app = web.Application()
    app.router.add_post("/slack/events", events)
    await _serve(conn, app)


async def _timed(
    conn: Connection, n: int, concurrency: int, op: Callable[[], Awaitable[Any]]
) -> None:
    """Run `op` n times, `concurrency` at a time, and send the CPU seconds it took."""
    left = iter(range(n))

    async def lane() -> None:
        for _ in left:
            await op()

    for _ in range(min(n, 200)):  # warm-up
        await op()
    started = time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    conn.send(time.process_time() - started)


async def _client_child(conn: Connection, arg: tuple[int, int, int]) -> None:
    port, n, concurrency = arg
    data = json.dumps(json_body({"channel": CHANNEL}, blocks.request_message(_REQUEST)))
    url = f"http://127.0.0.1:{port}/api/chat.postMessage"
    headers = {
        "Content-Type": "application/json;charset=utf-8",
        "Authorization": f"Bearer {BOT_TOKEN}",
    }
    timeout = aiohttp.ClientTimeout(total=30)

    async with aiohttp.ClientSession() as session:

        async def post() -> None:
            async with session.post(
                url, data=data.encode(), headers=headers, timeout=timeout
            ) as res:
                await res.json()

        await _timed(conn, n, concurrency, post)


async def _redis_child(conn: Connection, arg: tuple[str, str, int, int]) -> None:
    url, key, n, concurrency = arg
    redis = connect(url, client_name="bench-floor")
    script = redis.register_script("return redis.call('HGETALL', KEYS[1])")
    turn = [0]

    async def command() -> None:
        turn[0] += 1
        if turn[0] % 2:
            await script(keys=[key], args=["a", "b", "c", "d", "e", "f", "g", "h"])
        else:
            await redis.hgetall(key)

    try:
        await _timed(conn, n, concurrency, command)
    finally:
        await redis.aclose()


async def _pubsub_child(conn: Connection, arg: tuple[str, str]) -> None:
    url, channel = arg
    redis = connect(url, max_connections=2, client_name="bench-floor-sub")
    pubsub = redis.pubsub()
    await pubsub.subscribe(channel)
    got = 0

    async def listen() -> None:
        nonlocal got
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "message":
                got += 1

    task = asyncio.create_task(listen())
    conn.send("subscribed")
    try:
        await _marks(conn)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        conn.send(got)
        await pubsub.aclose()
        await redis.aclose()


_CHILDREN: dict[str, Callable[[Connection, Any], Awaitable[None]]] = {
    "server": _server_child,
    "bolt": _bolt_child,
    "client": _client_child,
    "redis": _redis_child,
    "pubsub": _pubsub_child,
}


# -- this process: the counterparts ------------------------------------------------------


async def _drive(
    port: int, n: int, concurrency: int, send: Callable[[LeanHttp], Awaitable[None]]
) -> None:
    lanes = [LeanHttp("127.0.0.1", port, {}) for _ in range(concurrency)]
    left = iter(range(n))

    async def lane(http: LeanHttp) -> None:
        for _ in left:
            await send(http)

    try:
        await asyncio.gather(*(lane(h) for h in lanes))
    finally:
        for h in lanes:
            h.close()


async def _server_side(
    conn: Connection,
    n: int,
    concurrency: int,
    sends: dict[str, Callable[[LeanHttp], Awaitable[None]]],
) -> dict[str, float]:
    """CPU µs per request of the child's server, one figure per kind of request."""
    port = await recv(conn, 60)
    out = {}
    for name, send in sends.items():
        await _drive(port, min(n, 200), concurrency, send)  # warm-up
        conn.send("mark")
        before = await recv(conn, 60)
        await _drive(port, n, concurrency, send)
        conn.send("mark")
        out[name] = (await recv(conn, 60) - before) / n * 1e6
    conn.send("stop")
    return out


async def _measure_server(n: int, concurrency: int) -> dict[str, float]:
    proc, conn = spawn(_child, "server", None)
    create = _REQUEST.event.model_dump(mode="json", exclude_none=True)

    async def post(http: LeanHttp) -> None:
        status, _ = await http.request("POST", "/v1/approvals", create)
        assert status == 201, status

    async def get(http: LeanHttp) -> None:
        status, _ = await http.request("GET", "/v1/approvals/apr_bench")
        assert status == 200, status

    try:
        return await _server_side(conn, n, concurrency, {"create": post, "get": get})
    finally:
        proc.join(10)


async def _measure_bolt(n: int, concurrency: int) -> float:
    proc, conn = spawn(_child, "bolt", None)
    form = _click_form()

    async def click(http: LeanHttp) -> None:
        status, _ = await http.request("POST", "/slack/events", form=(form, sign(form)))
        assert status == 200, status

    try:
        return (await _server_side(conn, n, concurrency, {"click": click}))["click"]
    finally:
        proc.join(10)


async def _measure_client(n: int, concurrency: int) -> float:
    answer = json.dumps(_POSTED).encode()
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
        b"Content-Length: " + str(len(answer)).encode() + b"\r\n\r\n" + answer
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(response)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc, conn = spawn(_child, "client", (port, n, concurrency))
    try:
        return float(await recv(conn, 600)) / n * 1e6
    finally:
        proc.join(10)
        server.close()


async def _measure_redis(url: str, n: int, concurrency: int) -> float:
    redis = connect(url, client_name="bench-floor-setup")
    key = f"bench-floor-{time.time_ns()}"
    fields = {
        "data": _REQUEST.model_dump_json(),
        "status": "pending",
        "route": "default",
        "channel": CHANNEL,
        "deadline": "1764637200.0",
        "quorum": "1",
        "reviewers": "[]",
        "escalations": "0",
        "message": json.dumps({"channel": CHANNEL, "ts": _POSTED["ts"]}),
    }
    await redis.hset(key, mapping=fields)
    await redis.expire(key, 600)
    proc, conn = spawn(_child, "redis", (url, key, n, concurrency))
    try:
        return float(await recv(conn, 600)) / n * 1e6
    finally:
        proc.join(10)
        await redis.delete(key)
        await redis.aclose()


async def _measure_pubsub(url: str, n: int) -> float:
    channel = f"bench-floor-{time.time_ns()}"
    proc, conn = spawn(_child, "pubsub", (url, channel))
    redis = connect(url, client_name="bench-floor-pub")
    try:
        assert await recv(conn, 60) == "subscribed"
        conn.send("mark")
        before = await recv(conn, 60)
        started = time.perf_counter()
        for k in range(n):  # 1,000 a second, each alone: the cost of one wake-up
            await redis.publish(channel, f"apr_{k}")
            delay = started + (k + 1) / 1000 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await asyncio.sleep(0.2)
        conn.send("mark")
        cpu = await recv(conn, 60) - before
        conn.send("stop")
        got = await recv(conn, 60)
        if got < n:
            raise RuntimeError(f"the subscriber got {got} of {n} messages")
        return float(cpu) / n * 1e6
    finally:
        proc.join(10)
        await redis.aclose()


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    n, k = args.requests, args.concurrency
    if args.redis_only:
        return {
            "bench": "floor",
            **machine(),
            "requests": n,
            "concurrency": k,
            "redis_command_us": round(await _measure_redis(url, n, k), 1),
        }
    server = await _measure_server(n, k)
    parts = {
        "server_create_us": server["create"],
        "server_get_us": server["get"],
        "bolt_click_us": await _measure_bolt(n, k),
        "client_call_us": await _measure_client(n, k),
        "redis_command_us": await _measure_redis(url, n, k),
        "pubsub_message_us": await _measure_pubsub(url, min(n, 3000)),
    }
    per_cycle = {
        "agent HTTP (create + long-poll answered)": parts["server_create_us"]
        + parts["server_get_us"],
        "Slack interaction through slack-bolt (click)": parts["bolt_click_us"],
        "Slack Web API calls (post + update)": 2 * parts["client_call_us"],
        f"Redis commands ({args.commands})": args.commands * parts["redis_command_us"],
        "pub/sub message (the wake)": parts["pubsub_message_us"],
    }
    floor_ms = sum(per_cycle.values()) / 1000
    return {
        "bench": "floor",
        **machine(),
        "requests": n,
        "concurrency": k,
        "parts_us": {name: round(v, 1) for name, v in parts.items()},
        "per_cycle_us": {name: round(v, 1) for name, v in per_cycle.items()},
        "floor_ms_per_cycle": round(floor_ms, 3),
        "bot_ms_per_cycle": args.bot_ms,
        "baseline_ms_per_cycle": args.baseline_ms,
    }


def print_report(r: dict[str, Any]) -> None:
    if "parts_us" not in r:
        print(f"\nRedis command (EVALSHA / HGETALL): {r['redis_command_us']:.1f} CPU µs each")
        return
    print(
        f"\nthe bot's parts alone · Python {r['python']} · {r['cpus']} CPUs · "
        f"load {r['loadavg_1m']} · {r['requests']:,} each, {r['concurrency']} at a time"
    )
    print("CPU µs per operation of the part's own process (uvloop, serve's GC settings)\n")
    rows = [[name, f"{us:,.1f}"] for name, us in r["per_cycle_us"].items()]
    rows.append(["floor: one complete cycle", f"{r['floor_ms_per_cycle'] * 1000:,.1f}"])
    print(table(["per complete cycle", "CPU µs"], rows))
    parts = r["parts_us"]
    print(
        f"\n  one each: create {parts['server_create_us']:.1f}, GET {parts['server_get_us']:.1f},"
        f" click {parts['bolt_click_us']:.1f}, Web API call {parts['client_call_us']:.1f},"
        f" Redis command {parts['redis_command_us']:.1f}, pub/sub message"
        f" {parts['pubsub_message_us']:.1f} µs"
    )
    floor = r["floor_ms_per_cycle"]
    if r["bot_ms_per_cycle"]:
        bot = r["bot_ms_per_cycle"]
        print(
            f"  the bot (--bot-ms, bench_e2e's bot process CPU ms/cycle): {bot:.2f} ms ="
            f" {bot / floor:.1f}x the floor; its own work above the parts: {bot - floor:.2f} ms"
        )
    if r["baseline_ms_per_cycle"]:
        target = r["baseline_ms_per_cycle"] / 3
        print(
            f"  the target (--baseline-ms / 3): {target:.2f} ms per cycle ="
            f" {target / floor:.2f}x the floor"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="What the bot's parts cost alone, per cycle.")
    p.add_argument("--requests", type=int, default=5000, help="operations per part (5,000)")
    p.add_argument("--concurrency", type=int, default=50, help="at a time (50, as bench_e2e)")
    p.add_argument(
        "--commands",
        type=int,
        default=CYCLE_COMMANDS,
        help=f"the bot's client Redis commands per cycle ({CYCLE_COMMANDS})",
    )
    p.add_argument("--bot-ms", type=float, help="the bot's CPU ms per cycle, to compare")
    p.add_argument("--baseline-ms", type=float, help="the baseline's, to place its ÷3 target")
    p.add_argument("--redis-only", action="store_true", help="measure the Redis part alone")
    add_redis_arguments(p)
    args = p.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1:
        p.error("--requests and --concurrency must be ≥ 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, run)
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
