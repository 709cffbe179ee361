"""`serve` on a fresh machine: embedded Redis when none answers, and no Slack configured."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from bot.cli import connect as cli_connect
from bot.cli import main as cli
from bot.core import app as bot_app
from bot.core.settings import load_settings
from tests.support import delete_prefix, eventually, wait_healthy
from tests.support.credentials import API_TOKEN

REPO = Path(__file__).resolve().parents[3]


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


async def test_serve_without_redis_or_slack_starts_embedded_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # No APPROVALS_DATA_DIR: the platform's per-user state directory (XDG_STATE_HOME here).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    port = free_port()
    env = {"PORT": str(port), "APPROVALS_API_TOKENS": API_TOKEN}
    settings = load_settings(env)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(bot_app.serve(settings, stop))
    data_dir = tmp_path / "state" / "approval-bot" / "redis"
    try:
        health = await wait_healthy(port)
        assert health["redis"] is True and health["slack"] == "not configured"
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{port}/v1/approvals",
                json={"tool_name": "deploy", "arguments": {"env": "prod"}},
                headers={"Authorization": f"Bearer {API_TOKEN}"},
            ) as resp:
                assert resp.status == 201, await resp.text()
                created = await resp.json()
        assert created["status"] == "pending"
        # The CLI (no REDIS_URL either), run from another directory, finds the embedded
        # server through the address it recorded in the data directory.
        for name in ("REDIS_URL", "APPROVALS_DATA_DIR", "APPROVALS_PREFIX"):
            monkeypatch.delenv(name, raising=False)
        elsewhere = tmp_path / "somewhere" / "else"
        elsewhere.mkdir(parents=True)
        monkeypatch.chdir(elsewhere)
        assert (
            cli_connect.redis_url(load_settings({}))
            == (data_dir / "server.url").read_text().strip()
        )
        code = await asyncio.to_thread(cli.main, ["approve", created["id"], "--as", "ops"])
        assert code == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    messages = [r.getMessage() for r in caplog.records]
    assert any("embedded" in m and str(data_dir) in m for m in messages)
    redis_lines = [m for m in messages if m.startswith("redis 127.0.0.1:")]
    assert redis_lines and " db 0, embedded" in redis_lines[0], "names the Redis in use"
    assert any("Slack is not configured" in m and "SLACK_BOT_TOKEN" in m for m in messages)
    assert any(p.name.startswith("appendonly") for p in data_dir.iterdir()), "AOF on"
    assert not (data_dir / "server.url").exists(), "the address is forgotten at stop"


async def test_two_serves_on_one_data_dir_share_one_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ports = free_port(), free_port()
    stops = asyncio.Event(), asyncio.Event()
    tasks = [
        asyncio.create_task(
            bot_app.serve(
                load_settings(
                    {
                        "PORT": str(port),
                        "APPROVALS_API_TOKENS": API_TOKEN,
                        "APPROVALS_DATA_DIR": str(tmp_path),
                    }
                ),
                stop,
            )
        )
        for port, stop in zip(ports, stops, strict=True)
    ]
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    try:
        await wait_healthy(ports[0])
        await wait_healthy(ports[1])
        url = (tmp_path / "redis" / "server.url").read_text().strip()
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{ports[0]}/v1/approvals",
                json={"tool_name": "deploy", "arguments": {}},
                headers=headers,
            ) as resp:
                rid = (await resp.json())["id"]
            async with http.get(
                f"http://127.0.0.1:{ports[1]}/v1/approvals/{rid}", headers=headers
            ) as resp:
                assert resp.status == 200, "the second serve sees the first one's request"
            assert sum("shared with the serve" in r.getMessage() for r in caplog.records) == 1
            stops[0].set()  # the serve that runs the server ends: the other takes it over
            await asyncio.wait_for(tasks[0], 20)
            await wait_healthy(ports[1])
            # Its server answers a moment before it records the address (the start is
            # awaited now, so /healthz may answer in between): wait for the take-over's line.
            await eventually(
                lambda: any("this one runs it now" in r.getMessage() for r in caplog.records),
                what="the take-over",
            )
            assert (tmp_path / "redis" / "server.url").read_text().strip() == url

            async def read_back() -> dict[str, Any] | None:
                async with http.get(
                    f"http://127.0.0.1:{ports[1]}/v1/approvals/{rid}", headers=headers
                ) as resp:
                    # A 503 (store unavailable) right after the take-over is what an agent
                    # retries (seen once in a soak beside CPU burners); anything else is final.
                    assert resp.status in (200, 503), resp.status
                    return await resp.json() if resp.status == 200 else None

            found = await eventually(read_back, what="the request read after the take-over")
            assert found["status"] == "pending"  # kept by the server's append-only file
        assert any("this one runs it now" in r.getMessage() for r in caplog.records)
    finally:
        for stop in stops:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert not (tmp_path / "redis" / "server.url").exists()


async def test_kill_9_then_start_never_doubles_the_server(tmp_path: Path) -> None:
    """A real serve process killed with SIGKILL takes its server along (Linux); the next
    serve starts one server on the same data, and the request made before is still there."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(APPROVALS_DATA_DIR=str(tmp_path), APPROVALS_API_TOKENS=API_TOKEN)

    async def start_serve() -> tuple[asyncio.subprocess.Process, int]:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.support.fresh_machine", "serve",
            env={**env, "PORT": str(port)}, cwd=REPO,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await wait_healthy(port)
        return proc, port

    def server_pid() -> int:
        url = (tmp_path / "redis" / "server.url").read_text().strip()
        client = redis.Redis.from_url(url)
        try:
            return int(client.info("server")["process_id"])
        finally:
            client.close()

    first, port = await start_serve()
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{port}/v1/approvals",
                json={"tool_name": "deploy", "arguments": {}},
                headers={"Authorization": f"Bearer {API_TOKEN}"},
            ) as resp:
                rid = (await resp.json())["id"]
        old_server = server_pid()
        first.kill()
        await first.wait()
        for _ in range(100):  # PR_SET_PDEATHSIG: the server gets SIGTERM with its owner
            if not pid_alive(old_server):
                break
            await asyncio.sleep(0.05)
        assert not pid_alive(old_server), "the server died with its serve"
        second, port = await start_serve()
        assert server_pid() != old_server
        async with aiohttp.ClientSession() as http:
            async with http.get(
                f"http://127.0.0.1:{port}/v1/approvals/{rid}",
                headers={"Authorization": f"Bearer {API_TOKEN}"},
            ) as resp:
                assert resp.status == 200, "the data survived (append-only file)"
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)
    assert not (tmp_path / "redis" / "server.url").exists()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cli_says_what_it_tried_when_no_redis_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("REDIS_URL", "APPROVALS_URL", "APPROVALS_PREFIX", "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPROVALS_DATA_DIR", str(tmp_path))
    assert cli.main(["pending"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "REDIS_URL (not set)" in err and "localhost" not in err, "it is not looked for"
    assert f"the embedded server of {tmp_path / 'redis'} (no address recorded" in err
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "server.url").write_text("redis://127.0.0.1:1/0\n")
    assert cli.main(["pending"]) == 2
    assert "(127.0.0.1:1 db 0: no answer)" in capsys.readouterr().err


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
            "APPROVALS_API_TOKENS": API_TOKEN,
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
                headers={"Authorization": f"Bearer {API_TOKEN}"},
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
