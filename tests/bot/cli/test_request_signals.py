"""`approval-bot request` stopped by SIGTERM (`timeout`, CI runners) or SIGHUP (a closed
terminal) withdraws its request, as Ctrl-C does, instead of leaving it pending for hours."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from bot.core.context import BotContext
from tests.support.credentials import API_TOKEN

REPO = Path(__file__).resolve().parents[3]


def clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }


async def signal_request(env: dict[str, str], sig: signal.Signals, *, delay: float = 0.0) -> str:
    """Run `request --wait 60`, send `sig` `delay` s after it says it is waiting; the exit
    status must be 128 + the signal. Returns what it printed on stderr after that line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "request", "--tool", "deploy", "--wait", "60",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert b"waiting for a decision on apr_" in first, first
        await asyncio.sleep(delay)
        proc.send_signal(sig)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 128 + sig.value, rest.decode()
    return rest.decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
async def test_a_signal_on_request_wait_over_http_withdraws_it(
    api_url: str, ctx: BotContext, sig: signal.Signals
) -> None:
    env = {**clean_env(), "APPROVALS_URL": api_url, "APPROVALS_TOKEN": API_TOKEN}
    rest = await signal_request(env, sig)
    (created,) = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    request = await ctx.store.get(created.request_id)
    assert request.status == "cancelled", "withdrawn, not left pending"
    assert request.decision is not None
    assert request.decision.reason == f"the requester stopped waiting ({sig.name})"
    assert rest.splitlines() == [f"withdrew {request.id}"], rest


@pytest.mark.parametrize("delay", [0.0, 0.3])
async def test_sigterm_on_request_wait_over_redis_withdraws_it(
    redis_url: str, ctx: BotContext, delay: float
) -> None:
    """Over the Redis transport too, whether the signal lands at once or once it waits."""
    env = {
        **clean_env(),
        "REDIS_URL": redis_url,
        "APPROVALS_PREFIX": ctx.keys.prefix,
        "APPROVALS_DEFAULT_CHANNEL": "C0APPROVALS",
    }
    rest = await signal_request(env, signal.SIGTERM, delay=delay)
    (created,) = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    request = await ctx.store.get(created.request_id)
    assert request.status == "cancelled", "withdrawn, not left pending"
    assert rest.splitlines() == [f"withdrew {request.id}"], rest
