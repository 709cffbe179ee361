"""Long-polls parked outside aiohttp (bot/http/parked.py): a real bot (`Bot`, aiohttp served as
`serve` does), real Redis, real clients over loopback, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import ssl
import tempfile
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from approvals._internal.service import Actor
from approvals._internal.store.keys import Keys
from bot.core.app import Bot
from bot.core.context import BotContext
from bot.http import parked
from bot.http.api import PARKING, add_routes, error_middleware
from bot.http.parked import Parking
from bot.http.principals import derived_name
from tests.support import eventually
from tests.support.credentials import API_TOKEN
from tests.support.e2e import bot_config
from tests.support.redis_proxy import RedisProxy

TOKEN = API_TOKEN
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop] | None] = {
    "asyncio": None,
    "uvloop": uvloop.new_event_loop,
}


def on_each_loop(test: Callable[..., Awaitable[None]]) -> Any:
    """Run the async `test(redis_url, keys)` on asyncio's event loop and on uvloop's (serve's)."""

    @pytest.mark.parametrize("loop", sorted(LOOPS))
    def run(loop: str, redis_url: str, keys: Keys) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(test(redis_url, keys))

    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


@contextlib.asynccontextmanager
async def running_bot(redis_url: str, keys: Keys, **kw: Any) -> AsyncIterator[Bot]:
    bot = Bot(bot_config(redis_url, keys, None, **kw))
    await bot.start()
    try:
        yield bot
    finally:
        await bot.stop()


def parking(bot: Bot) -> Parking:
    assert bot.web is not None
    return bot.web[PARKING]


def gauge(ctx: BotContext) -> float:
    return ctx.metrics.registry.get_sample_value("approvals_long_polls_parked", {"via": "api"}) or 0


async def create(ctx: BotContext, n: int = 1) -> list[str]:
    from approvals.models import ApprovalEvent

    made = await asyncio.gather(
        *(
            ctx.service.create(
                ApprovalEvent(tool_name="deploy", arguments={"n": i}), principal=derived_name(TOKEN)
            )
            for i in range(n)
        )
    )
    return [m.request.id for m in made]


class Raw:
    """A long-poll on a raw socket: one response read at a time, then what follows."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def poll(cls, port: int, rid: str, wait: float = 30, headers: str = "") -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        await raw.get(rid, wait, headers)
        return raw

    async def get(self, rid: str, wait: float = 0, headers: str = "") -> None:
        self.writer.write(
            f"GET /v1/approvals/{rid}?wait={wait:g} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {TOKEN}\r\n{headers}\r\n".encode()
        )
        await self.writer.drain()

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next response: status, headers (lower-case names), body."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 20)
        lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        assert lines[0].startswith("HTTP/1.")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"header {name} twice"
            headers[name.lower()] = value.strip()
        body = await self.reader.readexactly(int(headers["content-length"]))
        return int(lines[0].split()[1]), headers, body

    async def rest(self) -> bytes:
        """Everything else, until the server closes the connection."""
        data = await asyncio.wait_for(self.reader.read(), 20)
        self.writer.close()
        return data


# -- the installed aiohttp ----------------------------------------------------------------------


def test_the_installed_aiohttp_is_one_detaching_was_checked_on() -> None:
    """Another aiohttp version parks inside aiohttp (10 KiB more per long-poll): re-read its
    web_protocol.py against `Parking.park`, run these tests, then add it."""
    assert parked.DETACHABLE, f"aiohttp {aiohttp.__version__} is not in DETACHABLE_AIOHTTP"


# -- answers -------------------------------------------------------------------------------------


@on_each_loop
async def test_detached_long_polls_get_the_answer_aiohttp_would_have_written(
    redis_url: str, keys: Keys
) -> None:
    """Approve, deny, cancel and the wait's end each answer the detached long-poll with what
    an undetached GET answers (status, headers, JSON), and the connection is aiohttp's again
    (keep-alive: the next request on it is answered); a client that said `Connection: close`
    is answered so and the connection closed."""
    async with running_bot(redis_url, keys) as bot:
        ctx, port = bot.ctx, bot.port
        assert ctx is not None and port is not None
        approve, deny, cancel, timeout, closing = await create(ctx, 5)
        polls = {rid: await Raw.poll(port, rid) for rid in (approve, deny, cancel)}
        polls[timeout] = await Raw.poll(port, timeout, wait=0.5)
        polls[closing] = await Raw.poll(port, closing, headers="Connection: close\r\n")
        await eventually(lambda: parking(bot).parked == 5, what="five detached")
        assert gauge(ctx) == 5 and ctx.waiter.waiting == 5
        await ctx.service.decide(approve, "approve", Actor("U1"))
        await ctx.service.decide(deny, "deny", Actor("U1"), reason="not now")
        await ctx.service.cancel(cancel, by="agent", reason="moot", via="api")
        expected = {approve: "approved", deny: "denied", cancel: "cancelled", timeout: "pending"}
        async with aiohttp.ClientSession() as http:
            for rid, status in expected.items():
                code, headers, body = await polls[rid].answer()
                assert (code, json.loads(body)["status"]) == (200, status)
                # Kept alive: aiohttp answers the next request on the same connection.
                await polls[rid].get(rid)
                again = await polls[rid].answer()
                assert (again[0], json.loads(again[2])) == (200, json.loads(body))
                polls[rid].writer.close()
                # The same request read without a wait, through aiohttp: the same answer.
                async with http.get(
                    f"http://127.0.0.1:{port}/v1/approvals/{rid}", headers=AUTH
                ) as r:
                    assert json.loads(body) == await r.json()
                    theirs = {k.lower(): v for k, v in r.headers.items()}
                assert set(theirs) == set(headers) == set(again[1])
                for name in ("content-type", "server"):
                    assert headers[name] == theirs[name]
        await ctx.service.decide(closing, "approve", Actor("U1"))
        code, headers, body = await polls[closing].answer()
        assert (code, json.loads(body)["status"]) == (200, "approved")
        assert headers["connection"] == "close"
        assert await polls[closing].rest() == b"", "closed after the answer"
        assert parking(bot).parked == 0 and gauge(ctx) == 0 and ctx.waiter.waiting == 0


@on_each_loop
async def test_a_decision_made_here_answers_the_long_poll_before_its_call_returns(
    redis_url: str, keys: Keys
) -> None:
    """A click (a vote) decided in this process writes the parked long-poll's answer as the
    vote lands (`Watch.on_settle`), not a turn of the event loop after the rest of the
    decider's code: by the time `decide` returns, the long-poll is answered and unparked."""
    async with running_bot(redis_url, keys) as bot:
        ctx, port = bot.ctx, bot.port
        assert ctx is not None and port is not None
        (rid,) = await create(ctx)
        poll = await Raw.poll(port, rid)
        await eventually(lambda: parking(bot).parked == 1, what="detached")
        result = await ctx.service.decide(rid, "approve", Actor("U1"))
        assert result.status == "decided"
        assert parking(bot).parked == 0 and gauge(ctx) == 0 and ctx.waiter.waiting == 0
        code, _, body = await poll.answer()
        assert (code, json.loads(body)["status"]) == (200, "approved")
        poll.writer.close()


@on_each_loop
async def test_many_parked_long_polls_decided_at_once_each_get_their_own_decision(
    redis_url: str, keys: Keys
) -> None:
    async with running_bot(redis_url, keys) as bot:
        ctx = bot.ctx
        assert ctx is not None
        rids = await create(ctx, 300)
        base = f"http://127.0.0.1:{bot.port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

            async def poll(rid: str) -> tuple[str, Any]:
                async with http.get(f"{base}/v1/approvals/{rid}?wait=30", headers=AUTH) as r:
                    assert r.status == 200
                    return rid, await r.json()

            polls = [asyncio.create_task(poll(rid)) for rid in rids]
            await eventually(lambda: parking(bot).parked == 300, within=30, what="300 detached")
            await asyncio.gather(
                *(
                    ctx.service.decide(rid, "approve" if i % 2 else "deny", Actor("U1"))
                    for i, rid in enumerate(rids)
                )
            )
            answers = dict(await asyncio.gather(*polls))
            # The next call (on a connection kept alive).
            async with http.get(f"{base}/v1/approvals/{rids[0]}", headers=AUTH) as r:
                assert (await r.json())["status"] == "denied"
        for i, rid in enumerate(rids):
            assert answers[rid]["id"] == rid
            assert answers[rid]["status"] == ("approved" if i % 2 else "denied")
        assert parking(bot).parked == 0 and gauge(ctx) == 0 and ctx.waiter.waiting == 0


# -- the client, shutdown, the store ---------------------------------------------------------------


@on_each_loop
async def test_a_client_gone_while_detached_ends_its_watch_and_the_gauge(
    redis_url: str, keys: Keys
) -> None:
    """The socket closing ends the watch from the protocol's `connection_lost`, not from the
    Waiter's transport scan (the detached watch gives it no transport to look at)."""
    async with running_bot(redis_url, keys) as bot:
        ctx = bot.ctx
        assert ctx is not None and bot.port is not None
        gone, stays = await create(ctx, 2)
        polls = [await Raw.poll(bot.port, rid) for rid in (gone, stays)]
        await eventually(lambda: parking(bot).parked == 2, what="two detached")
        assert ctx.waiter._with_transport == 0, "detached watches are not scanned"
        polls[0].writer.close()
        await eventually(lambda: parking(bot).parked == 1, what="the gone one released")
        assert gauge(ctx) == 1 and ctx.waiter.waiting == 1
        await ctx.service.decide(stays, "approve", Actor("U1"))
        code, _, body = await polls[1].answer()
        assert (code, json.loads(body)["status"]) == (200, "approved")
        polls[1].writer.close()
        assert gauge(ctx) == 0 and ctx.waiter.waiting == 0


@on_each_loop
async def test_shutdown_answers_detached_long_polls_503_shutting_down(
    redis_url: str, keys: Keys
) -> None:
    """`Bot.drain` answers them as it answers long-polls parked in aiohttp; a bot stopped
    without a drain (the Waiter's watches cancelled) answers them the same, never hangs."""
    for drained in (True, False):
        async with running_bot(redis_url, keys) as bot:
            ctx = bot.ctx
            assert ctx is not None and bot.port is not None
            polls = [await Raw.poll(bot.port, rid) for rid in await create(ctx, 5)]
            await eventually(lambda: parking(bot).parked == 5, what="five detached")
            if drained:
                await bot.drain(0.5)
        for poll in polls:
            code, headers, body = await poll.answer()
            assert code == 503, drained
            assert await poll.rest() == b"", "closed after the answer"
            assert json.loads(body)["error"]["code"] == "shutting_down"
            assert headers["retry-after"] == "1" and headers["connection"] == "close"


@on_each_loop
async def test_a_store_failure_after_the_wait_answers_503_store_unavailable(
    redis_url: str, keys: Keys
) -> None:
    """Redis unreachable when the wait ends (the re-read fails): the detached long-poll is
    answered the API's 503 `store_unavailable`, which an agent reads and retries."""
    proxy = RedisProxy(redis_url)
    async with proxy as proxied, running_bot(proxied, keys) as bot:
        ctx = bot.ctx
        assert ctx is not None and bot.port is not None
        (rid,) = await create(ctx)
        poll = await Raw.poll(bot.port, rid, wait=1)
        await eventually(lambda: parking(bot).parked == 1, what="detached")
        proxy.cut()
        code, _, body = await poll.answer()
        poll.writer.close()
        proxy.restore()
        assert (code, json.loads(body)["error"]["code"]) == (503, "store_unavailable")
        assert parking(bot).parked == 0 and gauge(ctx) == 0


# -- hostile clients ---------------------------------------------------------------------------


@on_each_loop
async def test_bytes_sent_while_detached_go_to_aiohttp_after_the_answer_or_nowhere(
    redis_url: str, keys: Keys
) -> None:
    """Pipelined requests and garbage (one piece an approval-looking response, as if from the
    server) sent while parked cannot change the long-poll's answer: it answers its own
    request's decision (a deny, or pending at the wait's end) first; then aiohttp gets those
    bytes, as it would have without detaching (a pipelined cancel of the denied request is
    answered 409, garbage 400 and the close). A flood past `MAX_PIPELINED` is dropped: the answer,
    then the close, nothing else."""
    async with running_bot(redis_url, keys) as bot:
        ctx = bot.ctx
        assert ctx is not None and bot.port is not None
        denied, waited, flooded = await create(ctx, 3)
        polls = {rid: await Raw.poll(bot.port, rid, wait=30) for rid in (denied, flooded)}
        polls[waited] = await Raw.poll(bot.port, waited, wait=1)
        await eventually(lambda: parking(bot).parked == 3, what="three detached")
        garbage = (
            'HTTP/1.1 200 OK\r\nContent-Length: 21\r\n\r\n{"status":"approved"}'
            "\x00\xff garbage \r\n\r\n"
        ).encode("latin-1")
        polls[denied].writer.write(
            f"POST /v1/approvals/{denied}/cancel HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        polls[waited].writer.write(garbage)
        for _ in range(64):
            polls[flooded].writer.write(b"\x16\x03\x01" + bytes(range(256)) * 64)
        await asyncio.gather(*(p.writer.drain() for p in polls.values()))
        await eventually(lambda: parking(bot).parked == 3, what="still three (no answer yet)")
        await ctx.service.decide(denied, "deny", Actor("U1"), reason="no")
        await ctx.service.decide(flooded, "deny", Actor("U1"), reason="no")
        for rid, status in ((denied, "denied"), (waited, "pending"), (flooded, "denied")):
            code, _, body = await polls[rid].answer()
            assert (code, json.loads(body)["status"]) == (200, status), rid
        cancel = await polls[denied].answer()
        assert (cancel[0], json.loads(cancel[2])["error"]["code"]) == (409, "already_decided")
        polls[denied].writer.close()
        rest = await polls[waited].rest()
        assert rest.startswith(b"HTTP/1.0 400 Bad Request\r\n")  # aiohttp's, on garbage
        assert b"approved" not in rest
        assert await polls[flooded].rest() == b"", "the flood: never answered"
        got = await ctx.store.get(denied)
        assert got.status == "denied" and got.decision is not None
        assert got.decision.decided_by == "U1"
        assert (await ctx.store.get(waited)).status == "pending"
        assert parking(bot).parked == 0 and ctx.waiter.waiting == 0


# -- aiohttp lets go -------------------------------------------------------------------------------


@on_each_loop
async def test_aiohttp_keeps_nothing_of_a_detached_long_poll(redis_url: str, keys: Keys) -> None:
    """While parked, aiohttp's request, its `RequestHandler` (protocol, parser, timers) and the
    handler's task are garbage; a long-poll aiohttp keeps (HTTP/1.0: not detached) shows the
    check can fail."""
    seen: list[tuple[int, weakref.ref[Any], int]] = []  # RequestHandler: no weak refs

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append((request.version.minor, weakref.ref(request), id(request.protocol)))
        return await handler(request)

    async with running_bot(redis_url, keys) as bot, _site(bot, [record]) as (app, port):
        ctx = bot.ctx
        assert ctx is not None
        await _no_leftovers(ctx, app, port, seen)


@contextlib.asynccontextmanager
async def _site(
    bot: Bot, middlewares: list[Any], ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[web.Application, int]]:
    """The API of `bot` on a site of its own (with `middlewares`, TLS), as serve runs it."""
    assert bot.ctx is not None
    app = web.Application(middlewares=[*middlewares, error_middleware])
    add_routes(app, bot.ctx)
    runner = web.AppRunner(app)  # as serve: handler_cancellation off
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    try:
        yield app, runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _no_leftovers(
    ctx: BotContext, app: web.Application, port: int, seen: list[tuple[int, Any, int]]
) -> None:
    raws: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        rids = await create(ctx, 4)
        for i, rid in enumerate(rids):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            version = "1.0" if i == 3 else "1.1"
            writer.write(
                f"GET /v1/approvals/{rid}?wait=30 HTTP/{version}\r\nHost: x\r\n"
                f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            raws.append((reader, writer))
        # A long-poll is watched before it is read and detached: wait for the three
        # detachments and for their handlers' tasks to end (a busy loop may lag behind).
        await eventually(
            lambda: ctx.waiter.waiting == 4 and app[PARKING].parked == 3,
            what="four parked, three of them detached",
        )

        def handler_tasks() -> list[asyncio.Task[Any]]:
            return [t for t in asyncio.all_tasks() if "_handle_request" in repr(t.get_coro())]

        await eventually(
            lambda: len(handler_tasks()) == 1, what="only the HTTP/1.0 one has a handler task"
        )
        assert app[PARKING].parked == 3
        gc.collect()
        handlers = {id(o) for o in gc.get_objects() if type(o) is RequestHandler}
        detached = [(req(), proto in handlers) for minor, req, proto in seen if minor == 1]
        kept = [(req(), proto in handlers) for minor, req, proto in seen if minor == 0]
        assert detached == [(None, False)] * 3
        assert kept[0][0] is not None and kept[0][1]
        del kept
        for rid in rids:
            await ctx.service.decide(rid, "approve", Actor("U1"))
        for reader, writer in raws:
            _, _, body = await Raw(reader, writer).answer()
            assert json.loads(body)["status"] == "approved"
        assert ctx.waiter.waiting == 0 and app[PARKING].parked == 0
    finally:
        for _, writer in raws:
            writer.close()


@on_each_loop
async def test_tls_long_polls_detach_and_answer(redis_url: str, keys: Keys) -> None:
    """`serve` listens without TLS, but the API behind an aiohttp TLS site detaches too: the
    answer goes out through the TLS transport."""
    with tempfile.TemporaryDirectory() as where:
        cert, key = _self_signed(Path(where))
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        client_ssl = ssl.create_default_context(cafile=str(cert))
    async with running_bot(redis_url, keys) as bot, _site(bot, [], server_ssl) as (app, port):
        ctx = bot.ctx
        assert ctx is not None
        rids = await create(ctx, 2)
        async with aiohttp.ClientSession() as http:

            async def poll(rid: str) -> Any:
                url = f"https://localhost:{port}/v1/approvals/{rid}?wait=30"
                async with http.get(url, headers=AUTH, ssl=client_ssl) as r:
                    return await r.json()

            polls = [asyncio.create_task(poll(rid)) for rid in rids]
            await eventually(lambda: app[PARKING].parked == 2, what="two detached over TLS")
            await ctx.service.decide(rids[0], "approve", Actor("U1"))
            await ctx.service.decide(rids[1], "deny", Actor("U1"))
            got = await asyncio.gather(*polls)
        assert [g["status"] for g in got] == ["approved", "denied"]


def _self_signed(where: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = where / "cert.pem", where / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_an_answer_that_fails_is_a_500_the_agent_reads(
    redis_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: building the answer of a detached long-poll fails (here the serializer)
    → the API's 500 `internal`, not a socket left open until the client gives up."""
    from bot.http import api

    def broken(request: Any) -> Any:
        raise RuntimeError("serializer broke")

    async def scenario() -> None:
        async with running_bot(redis_url, keys) as bot:
            ctx = bot.ctx
            assert ctx is not None and bot.port is not None
            (rid,) = await create(ctx)
            poll = await Raw.poll(bot.port, rid)
            await eventually(lambda: parking(bot).parked == 1, what="detached")
            monkeypatch.setattr(api, "approval_json", broken)
            await ctx.service.decide(rid, "approve", Actor("U1"))
            code, _, body = await poll.answer()
            assert (code, json.loads(body)["error"]["code"]) == (500, "internal")
            poll.writer.close()
            assert parking(bot).parked == 0 and gauge(ctx) == 0

    with asyncio.Runner() as runner:
        runner.run(scenario())
