"""`serve` on a fresh machine: embedded Redis when none answers, and no Slack configured."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from pathlib import Path

import aiohttp
import pytest

from approvals.store.connection import connect
from approvals.store.keys import Keys
from bot import app as bot_app
from bot import cli
from bot.settings import load_settings
from tests.support import delete_prefix


async def forget(redis_url: str, prefix: str) -> None:
    """Delete what a serve run on the shared Redis wrote under its own prefix."""
    client = connect(redis_url, max_connections=2)
    try:
        await delete_prefix(client, Keys(prefix))
    finally:
        await client.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(port: int) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    async with aiohttp.ClientSession() as http:
        while loop.time() < deadline:
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return dict(await resp.json())
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("serve never became healthy")


async def test_serve_without_redis_or_slack_starts_embedded_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_answers = bot_app.embedded_redis.answers

    def answers(url: str, timeout: float = 1.0) -> bool:  # nothing on 6379: a fresh machine
        return not url.endswith(":6379/0") and real_answers(url, timeout)

    monkeypatch.setattr(bot_app.embedded_redis, "answers", answers)
    monkeypatch.chdir(tmp_path)  # the default data dir is relative: ./.data
    port = free_port()
    env = {"PORT": str(port), "APPROVALS_API_TOKENS": "t1"}
    settings = load_settings(env)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(bot_app.serve(settings, stop))
    try:
        health = await wait_healthy(port)
        assert health["redis"] is True and health["slack"] == "not configured"
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{port}/v1/approvals",
                json={"tool_name": "deploy", "arguments": {"env": "prod"}},
                headers={"Authorization": "Bearer t1"},
            ) as resp:
                assert resp.status == 201, await resp.text()
                created = await resp.json()
        assert created["status"] == "pending"
        # The CLI (no REDIS_URL either) finds the embedded server through its recorded URL.
        for name in ("REDIS_URL", "APPROVALS_DATA_DIR", "APPROVALS_PREFIX"):
            monkeypatch.delenv(name, raising=False)
        assert (
            cli.redis_url(load_settings({}))
            == (tmp_path / ".data/redis/server.url").read_text().strip()
        )
        code = await asyncio.to_thread(cli.main, ["approve", created["id"], "--as", "ops"])
        assert code == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    messages = [r.getMessage() for r in caplog.records]
    data_dir = tmp_path / ".data" / "redis"
    assert any("embedded Redis" in m and str(data_dir) in m for m in messages)
    assert any("Slack is not configured" in m and "SLACK_BOT_TOKEN" in m for m in messages)
    assert any(p.name.startswith("appendonly") for p in data_dir.iterdir()), "AOF on"
    assert not (data_dir / "server.url").exists(), "the address is forgotten at stop"


async def test_serve_with_redis_url_uses_it(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []
    monkeypatch.setattr(bot_app.embedded_redis, "start", lambda *a, **k: started.append(a))
    port = free_port()
    settings = load_settings(
        {
            "PORT": str(port),
            "REDIS_URL": redis_url,
            "APPROVALS_PREFIX": f"serve-{port}",
            "APPROVALS_DATA_DIR": str(tmp_path),
        }
    )
    stop = asyncio.Event()
    task = asyncio.create_task(bot_app.serve(settings, stop))
    try:
        assert (await wait_healthy(port))["redis"] is True
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        await forget(redis_url, settings.approvals_prefix)
    assert started == []


async def test_sighup_reloads_the_policy_and_a_bad_file_keeps_the_old_one(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "routes:\n  default:\n    channel: C0APPROVALS\n"
        "rules:\n  - name: reads\n    action: allow\n    match: {tool: read_*}\n"
    )
    port = free_port()
    settings = load_settings(
        {
            "PORT": str(port),
            "REDIS_URL": redis_url,
            "APPROVALS_PREFIX": f"hup-{port}",
            "APPROVALS_POLICY_FILE": str(policy),
            "APPROVALS_API_TOKENS": "t1",
        }
    )
    caplog.set_level(logging.INFO)
    stop = asyncio.Event()
    task = asyncio.create_task(bot_app.serve(settings, stop))

    async def ask(tool: str) -> str:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{port}/v1/approvals",
                json={"tool_name": tool, "arguments": {}},
                headers={"Authorization": "Bearer t1"},
            ) as resp:
                return str((await resp.json())["status"])

    async def hangup() -> None:
        loop = asyncio.get_running_loop()
        handlers = getattr(loop, "_signal_handlers", {})
        assert signal.SIGHUP in handlers, "serve handles SIGHUP (else it would kill us)"
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.2)

    try:
        await wait_healthy(port)
        assert await ask("read_file") == "approved"
        assert await ask("delete_file") == "pending"
        policy.write_text(
            "routes:\n  default:\n    channel: C0APPROVALS\n"
            "rules:\n  - name: no-deletes\n    action: deny\n    match: {tool: delete_*}\n"
        )
        await hangup()
        assert await ask("delete_file") == "denied"
        assert await ask("read_file") == "pending"
        policy.write_text("routes: {default: {channel: not-a-channel}}\n")
        await hangup()
        assert await ask("delete_file") == "denied", "a bad file keeps the old policy"
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        await forget(redis_url, settings.approvals_prefix)
    assert any("policy reload failed" in r.getMessage() for r in caplog.records)
