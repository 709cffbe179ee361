"""Graceful shutdown: a real `approval-bot serve` process gets SIGTERM with work in hand."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from approvals._internal.store.keys import Keys
from bot.core.shutdown import Drained, unless_draining
from tests.bot.core.test_serve import forget, free_port, wait_healthy
from tests.support.credentials import API_TOKEN, BOT_TOKEN
from tests.support.e2e import SIGNING_SECRET
from tests.support.slack_emulator import SlackEmulator

REPO = Path(__file__).resolve().parents[3]
CHANNEL = "C0APPROVALS"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
HOOK_INPUT = {
    "session_id": "s1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build"},
    "tool_use_id": "toolu_1",
    "cwd": "/tmp",
    "transcript_path": "/tmp/t",
    "permission_mode": "default",
}


@pytest.mark.slow(reason="a real `serve` process drained by SIGTERM")
async def test_sigterm_answers_parked_calls_finishes_the_post_and_exits(
    redis_url: str, redis: Any
) -> None:
    prefix = f"shutdown-{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    port = free_port()
    async with SlackEmulator(channels={CHANNEL}) as slack:
        slack.set_latency(2.0, "chat.postMessage")  # a post in flight when SIGTERM comes
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "APPROVALS_", "REDIS", "LOG_"))
        }
        env.update(
            REDIS_URL=redis_url,
            APPROVALS_PREFIX=prefix,
            PORT=str(port),
            APPROVALS_API_TOKENS=API_TOKEN,
            APPROVALS_DEFAULT_CHANNEL=CHANNEL,
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.api_url,
            APPROVALS_SHUTDOWN_GRACE="8",
            APPROVALS_SLACK_PACING="false",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli.main", "serve",
            env=env, cwd=REPO,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await wait_healthy(port)
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                body = {"tool_name": "deploy", "arguments": {}}
                async with http.post(f"{base}/v1/approvals", json=body, headers=AUTH) as resp:
                    assert resp.status == 201
                    rid = (await resp.json())["id"]
                poll = asyncio.create_task(
                    http.get(f"{base}/v1/approvals/{rid}?wait=30", headers=AUTH)
                )
                hook = asyncio.create_task(
                    http.post(f"{base}/hooks/claude-code?timeout=30", json=HOOK_INPUT, headers=AUTH)
                )
                await slack.wait_until(
                    lambda: any(m == "chat.postMessage" for m, _, _ in slack.arrivals),
                    10,
                    "a post in flight",
                )
                await asyncio.sleep(0.5)  # the hook call parks
                assert not slack.calls_to("chat.postMessage"), "still in flight"

                proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                polled = await asyncio.wait_for(poll, 5)
                assert polled.status == 503
                assert polled.headers["Retry-After"] == "1"
                assert (await polled.json())["error"]["code"] == "shutting_down"
                hooked = await asyncio.wait_for(hook, 5)
                assert hooked.status == 200
                output = (await hooked.json())["hookSpecificOutput"]
                assert output["permissionDecision"] == "deny"
                assert "restarting" in output["permissionDecisionReason"]
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 503 and (await resp.json())["draining"] is True
                async with http.post(f"{base}/v1/approvals", json=body, headers=AUTH) as resp:
                    assert resp.status == 503
                    assert (await resp.json())["error"]["code"] == "shutting_down"

            status = await asyncio.wait_for(proc.wait(), 15)
            took = time.monotonic() - signalled
            stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
            assert status == 0, stderr
            assert took < 8 + 3, f"exit took {took:.1f}s"
            posted = slack.calls_to("chat.postMessage", ok=True)
            assert rid in str(posted[0].body), "the post in flight was finished, not dropped"
            groups = {g["name"]: g for g in await redis.xinfo_groups(keys.outbox)}
            assert groups["bot"]["pending"] == 0, "what was handled was acked"
            assert await redis.hget(keys.request(rid), "message"), "the post was recorded"
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await forget(redis_url, prefix)


async def test_unless_draining_gives_the_result_or_drained() -> None:
    draining = asyncio.Event()
    assert await unless_draining(draining, asyncio.sleep(0, "done")) == "done"
    started = asyncio.get_running_loop().time()
    cancelled = asyncio.Event()

    async def parked() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    asyncio.get_running_loop().call_later(0.05, draining.set)
    with pytest.raises(Drained):
        await unless_draining(draining, parked())
    assert cancelled.is_set(), "the parked work was cancelled"
    assert asyncio.get_running_loop().time() - started < 5
    with pytest.raises(Drained):
        await unless_draining(draining, parked())
