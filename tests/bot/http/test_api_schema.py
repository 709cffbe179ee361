"""Schemathesis against `/openapi.json` of a live API server: no 5xx, every response per schema.

The schema under test is the one the server serves at `/openapi.json`. The
server runs on 127.0.0.1 (ephemeral port) in a background thread with its
own event loop and its own Redis client, under a unique key prefix removed at
the end. Its policy allows `claude-code` and `codex` calls at once, so the hook
endpoints answer without waiting for a reviewer; `?wait=` is capped at 0.2 s.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from bot.core.context import BotContext
from bot.http.api import add_routes, error_middleware
from bot.http.schemas import openapi_document
from tests.support import delete_prefix
from tests.support.credentials import API_TOKEN

TOKEN = API_TOKEN


class LiveServer:
    """The API on a real port, in a thread of its own."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.keys = Keys(prefix=f"test-schema-{uuid.uuid4().hex[:10]}")
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.url = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="api-schema-server", daemon=True)

    async def _start(self) -> tuple[Any, ...]:
        client = connect(self.redis_url, max_connections=32, client_name="approval-bot-schema")
        store = ApprovalStore(client, self.keys)
        policy = parse_policy(
            {
                "rules": [
                    {
                        "name": "hooks decide at once",
                        "match": {"agent": ["claude-code", "codex"]},
                        "action": "allow",
                    }
                ]
            },
            source="schema test policy",
            default_channel="C0APPROVALS",
        )
        waiter = Waiter(client, self.keys, store=store)
        await waiter.start()
        ctx = BotContext(
            redis=client,
            keys=self.keys,
            store=store,
            service=ApprovalService(store, policy),
            waiter=waiter,
            api_tokens=(TOKEN,),
            max_wait_seconds=0.2,
        )
        app = web.Application(middlewares=[error_middleware])
        add_routes(app, ctx)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return client, waiter, runner

    async def _stop(self, client: Any, waiter: Waiter, runner: web.AppRunner) -> None:
        await runner.cleanup()
        await waiter.stop()
        await delete_prefix(client, self.keys)
        await client.aclose()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            parts = self.loop.run_until_complete(self._start())
        except BaseException as e:  # reported by the fixture
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self._stop(*parts))
            self.loop.close()

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(15) or self.error is not None:
            pytest.fail(f"the API server did not start: {self.error!r}", pytrace=False)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(15)
        assert not self.thread.is_alive(), "the API server thread did not stop"


@pytest.fixture(scope="module")
def live_api(redis_url: str) -> Iterator[str]:
    server = LiveServer(redis_url)
    server.start()
    yield server.url
    server.stop()


# The document is loaded at collection (schemathesis' lazy `from_fixture` loader does not
# work with pytest 9: it sets the removed `Function._nodeid`); the first test checks that
# the live server serves exactly this document.
schema = schemathesis.openapi.from_dict(openapi_document())


def test_the_server_serves_the_document_under_test(live_api: str) -> None:
    with urllib.request.urlopen(f"{live_api}/openapi.json", timeout=5) as resp:
        assert resp.status == 200
        assert json.load(resp) == openapi_document()


@schema.parametrize()
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_api_matches_its_openapi_document(case: Any, live_api: str) -> None:
    case.call_and_validate(
        base_url=live_api,
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
