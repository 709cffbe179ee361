"""Shared fixtures: a real Redis (REDIS_URL, or a throwaway server), per-test key prefixes,
a BotContext on them and the agent API served from it."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlparse

import pytest
from aiohttp import web
from hypothesis import settings as hypothesis_settings
from redis.asyncio import Redis

from approvals._internal.policy_file import default_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from bot.core.context import BotContext
from bot.http import api
from bot.ops import embedded_redis
from tests.support import delete_prefix
from tests.support.credentials import API_TOKEN

pytest_plugins = ["tests.support.e2e"]

# CI (CI=true) replays the same examples every run, so a red build is reproducible and never
# depends on the draw; local runs keep exploring (and save what they find in .hypothesis/).
# Neither has a per-example deadline: hypothesis' default (200 ms) is a timing assert, and a
# loaded machine (the soak's CPU burners) takes a 0.4 ms example past it.
hypothesis_settings.register_profile("local", deadline=None)
hypothesis_settings.register_profile("ci", derandomize=True, database=None, deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "local")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` run first (otherwise in collection order): on several workers
    (scripts/test runs pytest-xdist) they start at once, spread over the workers, and
    overlap the many short tests instead of trailing the run. Nothing is deselected."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """A test that runs an entry point in-process (`bot.cli.main`) configures logging: a root
    handler on the stderr pytest captured for that test, root and `slack_sdk` levels. Undo
    that, so later tests on the same worker never log into a closed capture ("--- Logging
    error --- ValueError: I/O operation on closed file") or at another level."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    slack_level = logging.getLogger("slack_sdk").level
    yield
    for handler in list(root.handlers):
        # pytest's own capture handlers are subclasses, and come and go with each phase
        if type(handler) is logging.StreamHandler and handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.getLogger("slack_sdk").setLevel(slack_level)


@pytest.fixture(autouse=True)
def _well_known_redis_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """`localhost:6379` (used only when REDIS_URL names it; otherwise only its presence is
    told) points at a port where nothing listens: no test touches this machine's real Redis
    there. A test that wants a stand-in sets `redis_location.LOCALHOST` to its own server."""
    from bot.ops import redis_location
    from tests.support.fresh_machine import NOWHERE

    monkeypatch.setattr(redis_location, "LOCALHOST", NOWHERE)


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "localhost", parsed.port or 6379), timeout=0.5
        ) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
            return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private throwaway server on a free port, so a run never disturbs (or is disturbed
    by) other clients; REDIS_URL, when set explicitly, is used instead and must answer.
    Never skips: with no server available, fails saying exactly what to install."""
    url = os.environ.get("REDIS_URL")
    if url:
        if not _reachable(url):
            pytest.fail(f"REDIS_URL is set but does not answer: {url}", pytrace=False)
        yield url
        return
    try:
        server = embedded_redis.start()
    except embedded_redis.NoRedisServer as e:
        pytest.fail(f"tests need Redis and none could be started: {e}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def keys(redis_url: str) -> AsyncIterator[Keys]:
    """A key prefix of this test's own; whatever was written under it is deleted afterwards
    (by anyone: the test, a bot, a CLI run), so nothing is left on a shared server."""
    prefix = Keys(prefix=f"test-{uuid.uuid4().hex[:10]}")
    yield prefix
    client = connect(redis_url, max_connections=2, client_name="approval-bot-test-cleanup")
    try:
        await delete_prefix(client, prefix)
    finally:
        await client.aclose()


@pytest.fixture
async def redis(redis_url: str, keys: Keys) -> AsyncIterator[Redis]:
    client = connect(redis_url, max_connections=64, client_name="approval-bot-test")
    try:
        await client.ping()
    except Exception as e:  # pragma: no cover - environment problem, reported plainly
        pytest.fail(f"Redis at {redis_url} did not answer: {e}", pytrace=False)
    yield client
    await client.aclose()


@pytest.fixture
def store(redis: Redis, keys: Keys) -> ApprovalStore:
    return ApprovalStore(redis, keys)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def ctx(redis: Redis, keys: Keys, store: ApprovalStore) -> AsyncIterator[BotContext]:
    """A BotContext on real Redis with the default policy (no Slack client)."""
    service = ApprovalService(store, default_policy("C0APPROVALS"))
    waiter = Waiter(redis, keys, store=store)
    await waiter.start()
    context = BotContext(
        redis=redis,
        keys=keys,
        store=store,
        service=service,
        waiter=waiter,
        api_tokens=(API_TOKEN,),
    )
    yield context
    await waiter.stop()


@pytest.fixture
async def api_url(ctx: BotContext) -> AsyncIterator[str]:
    """The real agent API (bot.http.api) on an ephemeral loopback port, sharing `ctx`."""
    app = web.Application(middlewares=[api.error_middleware])
    api.add_routes(app, ctx)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()
