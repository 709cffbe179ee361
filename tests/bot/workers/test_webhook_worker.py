"""Decision webhooks end to end on real Redis and real HTTP: enqueued atomically with the
decision, signed per Standard Webhooks (verified with the spec's own library), retried with
the same webhook-id, never retried on a 4xx, recorded, guarded against SSRF."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks import Webhook, WebhookVerificationError

from approvals._internal.policy import Policy
from approvals._internal.policy_file import default_policy, parse_policy
from approvals._internal.store.webhooks import (
    DEFAULT_PRINCIPAL,
    Deliveries,
    Delivery,
    WebhookSecrets,
)
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision
from approvals.webhooks import Callback
from bot.core.app import build_web_app
from bot.core.context import BotContext
from bot.workers.webhooks import (
    CallbackRefused,
    GuardedResolver,
    WebhookOptions,
    WebhookWorker,
    backoff,
    retry_after_seconds,
)
from tests.support.credentials import API_TOKEN, APP_TOKEN, BOT_TOKEN, OTHER_API_TOKEN
from tests.support.webhook_receiver import Reply, WebhookReceiver

FAST = WebhookOptions(
    timeout=1.0,
    claim_idle_ms=1000,
    read_block_ms=100,
    backoff_base=0.05,
    backoff_max=0.2,
    retry_poll_interval=0.05,
)


def callback_policy(*hosts: str) -> Policy:
    return parse_policy(
        {"callbacks": {"allowed_hosts": list(hosts)}}, source="test", default_channel="C0APPROVALS"
    )


class StubDNS(AbstractResolver):
    """Answers from a table (one list of addresses per call, the last repeated)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls.append(host)
        queue = self.answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in addresses
        ]

    async def close(self) -> None:
        pass


Start = Callable[..., Awaitable[WebhookWorker]]


@pytest.fixture
async def start_worker(ctx: BotContext) -> AsyncIterator[Start]:
    ctx.service.policy = callback_policy("127.0.0.1")
    workers: list[WebhookWorker] = []

    async def start(
        options: WebhookOptions = FAST, resolver: AbstractResolver | None = None, name: str = "w1"
    ) -> WebhookWorker:
        worker = WebhookWorker(ctx, name, options, resolver=resolver)
        await worker.start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        await worker.stop()


async def ask(ctx: BotContext, url: str, **metadata: Any) -> ApprovalRequest:
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"})
    callback = Callback(url=url, metadata=metadata)
    return await ctx.service.submit(event, ApprovalConfig(), callback=callback)


async def approve(ctx: BotContext, request: ApprovalRequest) -> None:
    result = await ctx.store.resolve(request.id, Decision.approve(by="U0REVIEWER", via="cli"))
    assert result.won


async def settled(
    ctx: BotContext,
    request_id: str,
    *statuses: str,
    timeout: float = 10.0,  # noqa: ASYNC109
) -> Delivery:
    deliveries = Deliveries(ctx.redis, ctx.keys)
    end = time.monotonic() + timeout
    delivery = None
    while time.monotonic() < end:
        delivery = await deliveries.get(request_id)
        if delivery is not None and delivery.status in statuses:
            return delivery
        await asyncio.sleep(0.02)
    raise AssertionError(f"delivery of {request_id} did not reach {statuses}: {delivery}")


# -- enqueued with the decision ------------------------------------------------------------------


async def test_every_way_out_of_pending_queues_a_delivery_in_the_same_script(
    ctx: BotContext,
) -> None:
    ctx.service.policy = parse_policy(
        {
            "callbacks": {"allowed_hosts": ["127.0.0.1"]},
            "rules": [{"name": "reads", "match": {"tool": "read_*"}, "action": "allow"}],
        },
        source="t",
        default_channel="C0APPROVALS",
    )
    queue = ctx.keys.webhook_queue
    url = "http://127.0.0.1:9/hook"
    # no callback: nothing queued
    plain = await ctx.service.submit(ApprovalEvent(tool_name="deploy"))
    await approve(ctx, plain)
    assert await ctx.redis.xlen(queue) == 0
    # resolve (CLI / API / dispatcher error), vote (Slack), expiry (sweeper), cancel, policy
    resolved = await ask(ctx, url)
    await approve(ctx, resolved)
    voted = await ask(ctx, url)
    await ctx.store.vote(voted.id, "U0REVIEWER", "deny", reason="no")
    expiring = await ctx.service.submit(
        ApprovalEvent(tool_name="deploy"),
        ApprovalConfig(deadline_seconds=0.01),
        callback=Callback(url=url),
    )
    await asyncio.sleep(0.05)
    assert [r.action for r in await ctx.service.expire_due()] == ["expired"]
    cancelled = await ask(ctx, url)
    await ctx.service.cancel(cancelled.id)
    by_policy = await ctx.service.submit(
        ApprovalEvent(tool_name="read_file"), callback=Callback(url=url)
    )
    assert by_policy.status == "approved"
    failed = await ask(ctx, url)  # the dispatcher's end for a post Slack refused
    await ctx.store.resolve(failed.id, Decision.error("Slack refused the message", by="slack"))
    assert (await ctx.store.get(failed.id)).status == "error"
    entries = await ctx.redis.xrange(queue)
    assert [f["id"] for _, f in entries] == [
        resolved.id,
        voted.id,
        expiring.id,
        cancelled.id,
        by_policy.id,
        failed.id,
    ]
    # a vote short of the quorum queues nothing; a lost race queues nothing more
    two = ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy"), quorum=2, callback=Callback(url=url)
    )
    await ctx.store.create(two)
    assert (await ctx.store.vote(two.id, "U0ONE", "approve")).status == "recorded"
    assert not (await ctx.store.resolve(resolved.id, Decision.deny("late", by="U1"))).won
    assert await ctx.redis.xlen(queue) == 6
    assert (await ctx.store.vote(two.id, "U0TWO", "approve")).status == "decided"
    assert await ctx.redis.xlen(queue) == 7


# -- signing ---------------------------------------------------------------------------------------


async def test_webhook_is_signed_per_standard_webhooks_and_carries_the_approval(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver() as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url, workflow_id="wf-7")
        await approve(ctx, request)
        (got,) = await receiver.wait_for(1)
        secret = await WebhookSecrets(ctx.redis, ctx.keys).current(DEFAULT_PRINCIPAL)
        assert secret.startswith("whsec_")
        payload = Webhook(secret).verify(got.body, got.headers)
        assert got.headers["webhook-id"] == f"msg_{request.id}"
        assert got.headers["Content-Type"] == "application/json"
        assert payload["type"] == "approval.decided"
        data = payload["data"]
        assert data["id"] == request.id
        assert data["status"] == "approved"
        assert data["decision"] == "approve"
        assert data["decided_by"] == "U0REVIEWER"
        assert data["callback"]["metadata"] == {"workflow_id": "wf-7"}
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "A" * 44).verify(got.body, got.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(got.body.replace(b"approved", b"denied!!"), got.headers)
        delivery = await settled(ctx, request.id, "delivered")
        assert delivery.attempts == 1
        assert delivery.last_status == 200


async def test_the_signature_goes_as_computed_beside_secrets_in_the_approval(
    ctx: BotContext, start_worker: Start
) -> None:
    """DESIGN.md: mask content, never credentials. The webhook's credential (its Standard
    Webhooks signature, made with the principal's whsec_ secret) reaches the receiver exactly
    as computed, though the approval it signs carries secrets of shapes the masker hides."""
    async with WebhookReceiver() as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url, note=f"bot {BOT_TOKEN} app {APP_TOKEN}")
        await approve(ctx, request)
        (got,) = await receiver.wait_for(1)
    secret = await WebhookSecrets(ctx.redis, ctx.keys).current(DEFAULT_PRINCIPAL)
    at = datetime.fromtimestamp(int(got.headers["webhook-timestamp"]), UTC)
    signed = Webhook(secret).sign(got.headers["webhook-id"], at, got.body.decode())
    assert got.headers["webhook-signature"] == signed and signed.startswith("v1,")
    Webhook(secret).verify(got.body, got.headers)


async def test_rotation_signs_with_both_secrets_for_the_grace_period(
    ctx: BotContext, start_worker: Start
) -> None:
    secrets = WebhookSecrets(ctx.redis, ctx.keys)
    old = await secrets.current(DEFAULT_PRINCIPAL)
    new = await secrets.rotate(DEFAULT_PRINCIPAL)
    assert new != old and await secrets.current(DEFAULT_PRINCIPAL) == new
    async with WebhookReceiver() as receiver:
        await start_worker()
        await approve(ctx, await ask(ctx, receiver.url))
        (got,) = await receiver.wait_for(1)
        assert len(got.headers["webhook-signature"].split(" ")) == 2
        Webhook(old).verify(got.body, got.headers)  # receivers not yet updated
        Webhook(new).verify(got.body, got.headers)
    assert await secrets.signing(DEFAULT_PRINCIPAL) == [new, old]
    await ctx.redis.hset(ctx.keys.webhook_secret(DEFAULT_PRINCIPAL), "previous_until", "1")
    assert await secrets.signing(DEFAULT_PRINCIPAL) == [new]
    assert await ctx.redis.ttl(ctx.keys.webhook_secret(DEFAULT_PRINCIPAL)) > 0


async def test_each_principal_signs_with_its_own_secret(
    ctx: BotContext, api_url: str, start_worker: Start
) -> None:
    ctx.api_tokens = (f"ci-agent:{API_TOKEN}", f"ops-agent:{OTHER_API_TOKEN}")
    secrets = WebhookSecrets(ctx.redis, ctx.keys)
    async with WebhookReceiver() as receiver:
        await start_worker()
        ids = {}
        for name, token in (("ci-agent", API_TOKEN), ("ops-agent", OTHER_API_TOKEN)):
            headers = {"Authorization": f"Bearer {token}"}
            body = {"tool_name": "deploy", "arguments": {}, "callback": {"url": receiver.url}}
            async with aiohttp.ClientSession(headers=headers) as http:
                async with http.post(f"{api_url}/v1/approvals", json=body) as resp:
                    assert resp.status == 201, await resp.text()
                    ids[name] = (await resp.json())["id"]
            await approve(ctx, await ctx.store.get(ids[name]))
        got = await receiver.wait_for(2)
        ci, ops = await secrets.current("ci-agent"), await secrets.current("ops-agent")
        assert ci != ops
        by_id = {r.headers["webhook-id"]: r for r in got}
        ci_hook, ops_hook = by_id[f"msg_{ids['ci-agent']}"], by_id[f"msg_{ids['ops-agent']}"]
        assert Webhook(ci).verify(ci_hook.body, ci_hook.headers)["data"]["principal"] == "ci-agent"
        assert (
            Webhook(ops).verify(ops_hook.body, ops_hook.headers)["data"]["id"] == ids["ops-agent"]
        )
        with pytest.raises(WebhookVerificationError):
            Webhook(ops).verify(ci_hook.body, ci_hook.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(ci).verify(ops_hook.body, ops_hook.headers)
        delivery = await Deliveries(ctx.redis, ctx.keys).get(ids["ci-agent"])
        assert delivery is not None and delivery.principal == "ci-agent"


# -- retries ---------------------------------------------------------------------------------------


async def test_failing_twice_then_succeeding_gets_the_same_webhook_id_three_times(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver(Reply(503), Reply(500)) as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        got = await receiver.wait_for(3)
        delivery = await settled(ctx, request.id, "delivered")
        assert receiver.ids() == [f"msg_{request.id}"] * 3
        assert len({r.body for r in got}) == 1  # the same body every time
        secret = await WebhookSecrets(ctx.redis, ctx.keys).current(DEFAULT_PRINCIPAL)
        for r in got:
            Webhook(secret).verify(r.body, r.headers)  # each attempt signed afresh
        attempts = await Deliveries(ctx.redis, ctx.keys).attempts(delivery.id)
        assert [(a.status, a.outcome) for a in attempts] == [
            (503, "retry"),
            (500, "retry"),
            (200, "delivered"),
        ]
        assert delivery.attempts == 3
        assert sample(ctx, "approvals_webhook_attempts_total") == 3
        assert sample(ctx, "approvals_webhook_attempt_failures_total") == 2
        assert sample(ctx, "approvals_webhook_delivered_total") == 1


@pytest.mark.parametrize("status", [400, 401, 404, 410, 422])
async def test_a_4xx_is_not_retried(ctx: BotContext, start_worker: Start, status: int) -> None:
    async with WebhookReceiver(Reply(status)) as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        delivery = await settled(ctx, request.id, "failed")
        await asyncio.sleep(0.5)  # several backoff periods: no second attempt comes
        assert len(receiver.received) == 1
        assert delivery.last_status == status
        assert await ctx.redis.zcard(ctx.keys.webhook_retries) == 0
        assert sample(ctx, "approvals_webhook_failed_total") == 1


async def test_429_retry_after_is_honoured(ctx: BotContext, start_worker: Start) -> None:
    async with WebhookReceiver(Reply(429, {"Retry-After": "1"})) as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        first, second = await receiver.wait_for(2)
        assert second.at - first.at >= 0.9  # backoff alone would be ~0.05 s
        await settled(ctx, request.id, "delivered")


async def test_timeouts_and_refused_connections_are_retried(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver(Reply(delay=3.0)) as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        await receiver.wait_for(2, timeout=10)
        delivery = await settled(ctx, request.id, "delivered")
        attempts = await Deliveries(ctx.redis, ctx.keys).attempts(delivery.id)
        assert attempts[0].outcome == "retry" and attempts[0].status is None
        assert "Timeout" in (attempts[0].error or "")
    # nothing listens on the receiver's port any more: connection refused, retried
    closed = await ask(ctx, receiver.url)
    await approve(ctx, closed)
    retrying = await settled(ctx, closed.id, "retrying")
    assert retrying.last_status is None and retrying.last_error


async def test_retries_stop_after_the_window_and_an_operator_retry_delivers(
    ctx: BotContext, start_worker: Start
) -> None:
    options = WebhookOptions(**{**FAST.__dict__, "give_up_after": 0.3})
    async with WebhookReceiver(default=Reply(503)) as receiver:
        await start_worker(options)
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        failed = await settled(ctx, request.id, "failed")
        assert "gave up" in (failed.last_error or "")
        count = len(receiver.received)
        assert count >= 2
        deliveries = Deliveries(ctx.redis, ctx.keys)
        assert [d.id for d in await deliveries.list(failed=True)] == [failed.id]
        receiver.default = Reply(200)
        await deliveries.retry(request.id)
        done = await settled(ctx, request.id, "delivered")
        assert set(receiver.ids()) == {failed.id}
        assert done.attempts == count + 1
        assert await deliveries.list(failed=True) == []


def test_backoff_grows_with_jitter_and_retry_after_parses() -> None:
    import random

    options = WebhookOptions(backoff_base=1, backoff_max=60)
    rng = random.Random(1)
    delays = [backoff(n, options, rng) for n in range(1, 10)]
    for n, d in enumerate(delays, 1):
        step = min(60, 2 ** (n - 1))
        assert step / 2 <= d <= step
    assert len({round(d, 6) for d in delays}) == len(delays)
    assert retry_after_seconds("7", 0) == 7
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470) == 10
    assert retry_after_seconds("soon", 0) is None
    assert retry_after_seconds(None, 0) is None


# -- crashes -----------------------------------------------------------------------------------


async def test_an_entry_taken_by_a_worker_that_died_is_delivered_by_another(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver() as receiver:
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        dead = Deliveries(ctx.redis, ctx.keys, "dead-replica")
        await dead.queue.ensure_group()
        (taken,) = await dead.queue.read(block_ms=100)  # read, never acked: it "died"
        assert taken.request_id == request.id
        await start_worker(name="survivor")
        await receiver.wait_for(1)
        await settled(ctx, request.id, "delivered")
        assert await dead.queue.pending_count() == 0


async def test_stopping_lets_an_attempt_under_way_finish_and_be_recorded(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver(Reply(delay=0.5)) as receiver:
        worker = await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        await receiver.wait_for(1)
        await worker.stop()  # mid-attempt
        delivery = await Deliveries(ctx.redis, ctx.keys).get(request.id)
        assert delivery is not None and delivery.status == "delivered"
        assert await worker.deliveries.queue.pending_count() == 0


# -- SSRF ---------------------------------------------------------------------------------------


async def test_a_name_resolving_to_loopback_is_refused_at_connect_time(
    ctx: BotContext, start_worker: Start
) -> None:
    async with WebhookReceiver() as receiver:
        url = f"http://hooks.example.test:{receiver.port}/hook"
        dns = StubDNS({"hooks.example.test": [["127.0.0.1"]]})
        await start_worker(resolver=dns)
        ctx.service.policy = callback_policy("hooks.example.test")
        request = await ask(ctx, url)
        await approve(ctx, request)
        delivery = await settled(ctx, request.id, "failed")
        assert "refused" in (delivery.last_error or "") and "127.0.0.1" in (
            delivery.last_error or ""
        )
        assert dns.calls and receiver.received == []
        # control: the same name and DNS, with loopback allowed explicitly, is delivered
        ctx.service.policy = callback_policy("hooks.example.test", "127.0.0.0/8")
        allowed = await ask(ctx, url)
        await approve(ctx, allowed)
        await settled(ctx, allowed.id, "delivered")
        assert len(receiver.received) == 1


async def test_dns_rebinding_and_mixed_answers_are_refused() -> None:
    policy = callback_policy("rebind.test").callbacks
    dns = StubDNS(
        {
            "rebind.test": [["93.184.216.34"], ["127.0.0.1"]],
            "mixed.test": [["93.184.216.34", "169.254.169.254"]],
            "v6.test": [["fd00::1"]],
        }
    )
    guard = GuardedResolver(lambda: policy, dns)
    first = await guard.resolve("rebind.test", 80)
    assert [r["host"] for r in first] == ["93.184.216.34"]
    with pytest.raises(CallbackRefused, match=r"127\.0\.0\.1"):
        await guard.resolve("rebind.test", 80)  # the second lookup answers loopback
    with pytest.raises(CallbackRefused, match=r"169\.254\.169\.254"):
        await guard.resolve("mixed.test", 80)
    with pytest.raises(CallbackRefused, match="fd00::1"):
        await guard.resolve("v6.test", 80)


@pytest.mark.parametrize(
    "host", ["127.0.0.2", "10.1.2.3", "169.254.169.254", "[::1]", "192.168.1.1"]
)
async def test_address_literals_are_refused_when_sent_even_if_the_policy_changed(
    ctx: BotContext, start_worker: Start, host: str
) -> None:
    # Allowed when asked (listed), then the operator narrowed the policy: refused, not sent.
    bare = host.strip("[]")
    ctx.service.policy = callback_policy(bare)
    request = await ask(ctx, f"http://{host}:9/hook")
    ctx.service.policy = callback_policy("127.0.0.1")
    await start_worker()
    ctx.service.policy = callback_policy("127.0.0.1")
    await approve(ctx, request)
    delivery = await settled(ctx, request.id, "failed")
    assert (delivery.last_error or "").startswith("refused")
    assert delivery.last_status is None


async def test_redirects_are_not_followed(ctx: BotContext, start_worker: Start) -> None:
    async with WebhookReceiver() as target:
        async with WebhookReceiver(Reply(307, {"Location": target.url})) as receiver:
            await start_worker()
            request = await ask(ctx, receiver.url)
            await approve(ctx, request)
            delivery = await settled(ctx, request.id, "failed")
            assert delivery.last_status == 307
            await asyncio.sleep(0.3)
            assert len(receiver.received) == 1 and target.received == []


# -- the HTTP API and /metrics -------------------------------------------------------------------


async def test_api_takes_a_callback_and_refuses_a_host_not_allowed(
    ctx: BotContext, api_url: str, start_worker: Start
) -> None:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    body: dict[str, Any] = {"tool_name": "deploy", "arguments": {"env": "prod"}}
    async with aiohttp.ClientSession(headers=headers) as http, WebhookReceiver() as receiver:
        await start_worker()
        for url in ("https://evil.example.com/x", "http://169.254.169.254/", "http://10.0.0.1/"):
            async with http.post(
                f"{api_url}/v1/approvals", json={**body, "callback": {"url": url}}
            ) as resp:
                assert resp.status == 422, url
                error = (await resp.json())["error"]
                assert error["code"] == "invalid_request"
                assert "allowed_hosts" in error["message"]
        async with http.post(
            f"{api_url}/v1/approvals", json={**body, "callback": {"url": "gopher://x"}}
        ) as resp:
            assert resp.status == 422
        async with http.post(
            f"{api_url}/v1/approvals",
            json={**body, "callback": {"url": receiver.url, "metadata": {"run": 1}}},
        ) as resp:
            assert resp.status == 201
            created = await resp.json()
        await approve(ctx, await ctx.store.get(created["id"]))
        (got,) = await receiver.wait_for(1)
        assert json.loads(got.body)["data"]["id"] == created["id"]
    ctx.service.policy = default_policy("C0APPROVALS")  # no allowed hosts: callbacks are off
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(
            f"{api_url}/v1/approvals",
            json={**body, "callback": {"url": "https://hooks.example.com/"}},
        ) as resp:
            assert resp.status == 422
            assert "turned off" in (await resp.json())["error"]["message"]


async def test_metrics_show_webhook_counters(ctx: BotContext, start_worker: Start) -> None:
    async with WebhookReceiver(Reply(500)) as receiver:
        await start_worker()
        request = await ask(ctx, receiver.url)
        await approve(ctx, request)
        await receiver.wait_for(2)
        await settled(ctx, request.id, "delivered")
    app = build_web_app(ctx, None)
    from aiohttp.test_utils import TestClient, TestServer

    async with TestClient(TestServer(app)) as client:
        text = await (await client.get("/metrics")).text()
    assert "approvals_webhook_attempts_total 2.0" in text
    assert "approvals_webhook_attempt_failures_total 1.0" in text
    assert "approvals_webhook_delivered_total 1.0" in text
    assert "approvals_webhook_attempt_seconds_count 2.0" in text
    assert "approvals_webhooks_retrying 0.0" in text


# -- the CLI ------------------------------------------------------------------------------------


async def test_cli_lists_failed_deliveries_retries_one_and_shows_and_rotates_the_secret(
    ctx: BotContext,
    start_worker: Start,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bot.cli.main import main
    from bot.core.settings import VARIABLES

    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", ctx.keys.prefix)

    async def cli(*argv: str) -> int:
        return await asyncio.to_thread(main, list(argv))

    assert await cli("webhooks", "list") == 0
    assert capsys.readouterr().out == "no webhook deliveries\n"
    async with WebhookReceiver(Reply(400)) as receiver:
        await start_worker()
        failing = await ask(ctx, receiver.url)
        await approve(ctx, failing)
        await settled(ctx, failing.id, "failed")
        fine = await ask(ctx, receiver.url)
        await approve(ctx, fine)
        await settled(ctx, fine.id, "delivered")
        assert await cli("webhooks", "list") == 0
        table = capsys.readouterr().out
        assert f"msg_{failing.id}" in table and f"msg_{fine.id}" in table and "400" in table
        assert await cli("webhooks", "list", "--failed", "--json") == 0
        (line,) = capsys.readouterr().out.splitlines()
        row = json.loads(line)
        assert row["id"] == f"msg_{failing.id}" and row["status"] == "failed"
        assert [a["status"] for a in row["attempt_log"]] == [400]
        assert await cli("webhooks", "retry", f"msg_{failing.id}") == 0
        assert "queued again" in capsys.readouterr().out
        await settled(ctx, failing.id, "delivered")
        assert receiver.ids().count(f"msg_{failing.id}") == 2
    assert await cli("webhooks", "retry", "msg_apr_nope") == 1
    assert "no webhook delivery" in capsys.readouterr().err
    assert await cli("webhooks", "secret") == 0
    secret = capsys.readouterr().out.strip()
    assert secret == await WebhookSecrets(ctx.redis, ctx.keys).current(DEFAULT_PRINCIPAL)
    assert await cli("webhooks", "secret", "--rotate") == 0
    rotated = capsys.readouterr().out.strip()
    assert rotated.startswith("whsec_") and rotated != secret
    assert await WebhookSecrets(ctx.redis, ctx.keys).signing(DEFAULT_PRINCIPAL) == [
        rotated,
        secret,
    ]
    assert await cli("webhooks", "secret", "--principal", "ci-agent") == 0
    assert capsys.readouterr().out.strip() not in (secret, rotated)


def sample(ctx: BotContext, name: str) -> float:
    return ctx.metrics.registry.get_sample_value(name) or 0.0


@pytest.mark.parametrize(
    "configured",
    [
        {"APPROVALS_TOKEN": API_TOKEN},  # the token this CLI uses: a bare one
        {"APPROVALS_API_TOKENS": API_TOKEN},  # the bot's only token
        {
            "APPROVALS_TOKEN": API_TOKEN,
            "APPROVALS_API_TOKENS": f"ops:{OTHER_API_TOKEN},{API_TOKEN}",
        },
    ],
    ids=["token-in-use", "only-token", "token-in-use-among-several"],
)
async def test_webhooks_secret_prints_the_secret_a_bare_token_requests_webhook_verifies_with(
    ctx: BotContext,
    api_url: str,
    start_worker: Start,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    configured: dict[str, str],
) -> None:
    """A request made over the API with a bare token is signed with its principal's secret
    (`token-<hash>`): `approval-bot webhooks secret` without `--principal` prints that one,
    and names the principal on stderr."""
    from bot.cli.main import main
    from bot.core.settings import VARIABLES
    from bot.http.principals import derived_name

    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", ctx.keys.prefix)
    for name, value in configured.items():
        monkeypatch.setenv(name, value)
    async with WebhookReceiver() as receiver, aiohttp.ClientSession() as http:
        await start_worker()
        body = {
            "tool_name": "deploy",
            "arguments": {"env": "prod"},
            "callback": {"url": receiver.url},
        }
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        async with http.post(f"{api_url}/v1/approvals", json=body, headers=headers) as resp:
            assert resp.status == 201, await resp.text()
            created = await resp.json()
        await approve(ctx, await ctx.store.get(created["id"]))
        (got,) = await receiver.wait_for(1)
    assert await asyncio.to_thread(main, ["webhooks", "secret"]) == 0
    printed = capsys.readouterr()
    secret = printed.out.strip()
    assert Webhook(secret).verify(got.body, got.headers)["data"]["id"] == created["id"]
    assert derived_name(API_TOKEN) in printed.err
    assert API_TOKEN not in printed.err.replace(derived_name(API_TOKEN), "")


async def test_webhooks_secret_asks_which_principal_when_several_could_be_meant(
    ctx: BotContext,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bot.cli.main import main
    from bot.core.settings import VARIABLES

    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", ctx.keys.prefix)
    monkeypatch.setenv("APPROVALS_API_TOKENS", "ci:ci-token,deploy-bot:deploy-token")
    assert await asyncio.to_thread(main, ["webhooks", "secret"]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "--principal" in printed.err and "ci" in printed.err and "deploy-bot" in printed.err
    assert "ci-token" not in printed.err
    assert await asyncio.to_thread(main, ["webhooks", "secret", "--principal", "ci"]) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() == await WebhookSecrets(ctx.redis, ctx.keys).current("ci")
    assert "'ci'" in printed.err
    monkeypatch.setenv("APPROVALS_TOKEN", "not-listed-token")
    assert await asyncio.to_thread(main, ["webhooks", "secret"]) == 2
    assert "APPROVALS_TOKEN" in capsys.readouterr().err
