"""`serve` on a fresh machine: embedded Redis when none answers, and no Slack configured."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import aiohttp
import pytest

from bot import app as bot_app
from config.settings import load_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(port: int) -> dict[str, object]:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
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
    monkeypatch.setattr(bot_app, "_redis_answers", lambda url: False)  # a fresh machine
    port = free_port()
    settings = load_settings(
        {"PORT": str(port), "APPROVALS_DATA_DIR": str(tmp_path), "APPROVALS_API_TOKENS": "t1"}
    )
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
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    messages = [r.getMessage() for r in caplog.records]
    assert any("embedded Redis" in m and str(tmp_path) in m for m in messages)
    assert any("Slack is not configured" in m and "SLACK_BOT_TOKEN" in m for m in messages)
    assert (tmp_path / "redis" / "appendonlydir").exists() or any(
        p.name.startswith("appendonly") for p in (tmp_path / "redis").iterdir()
    ), "append-only file on: data survives a restart"


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
    assert started == []
