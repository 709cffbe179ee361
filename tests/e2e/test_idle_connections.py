"""`approval-bot serve` under a low file limit (`ulimit -n 64`) keeps answering hooks while
hundreds of idle, unauthenticated connections are held open against it:
the connection cap closes the oldest idle strangers to make room. A real `serve` process on
loopback, on this test's Redis; `bench/bench_idle.py` measures the same at 1,000."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from approvals._internal.store.keys import Keys
from tests.support import wait_healthy
from tests.support.credentials import API_TOKEN

REPO = Path(__file__).resolve().parents[2]
NOFILE = 64
IDLE = 300
POLICY = """\
routes:
  default:
    channel: C0APPROVALS
rules:
  - name: listing-is-fine
    match: {tool: Bash}
    action: allow
"""
EVENT = {
    "hook_event_name": "PreToolUse",
    "session_id": "0c7e2b9a-4d1f-4a3e-8b6c-9e5d2f1a0b73",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-app/0c7e2b9a.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "ls -la", "description": "List files"},
    "tool_use_id": "toolu_01IdleConnections",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def low_file_limit() -> None:  # in the child, before exec: as `ulimit -n 64`
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))


@pytest.fixture
async def serve(redis_url: str, keys: Keys, tmp_path: Path) -> AsyncIterator[int]:
    port = free_port()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
    env.update(
        REDIS_URL=redis_url,
        APPROVALS_PREFIX=keys.prefix,
        PORT=str(port),
        APPROVALS_API_TOKENS=API_TOKEN,
        APPROVALS_POLICY_FILE=str(policy),
        APPROVALS_DATA_DIR=str(tmp_path),
        LOG_LEVEL="ERROR",
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli.main",
        "serve",
        env=env,
        cwd=REPO,
        preexec_fn=low_file_limit,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_healthy(port)
        yield port
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def hook_call(port: int) -> bytes:
    body = json.dumps(EVENT).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            (
                f"POST /hooks/claude-code?timeout=30 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {API_TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            + body
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


@pytest.mark.slow
async def test_hooks_are_answered_while_idle_connections_exceed_the_file_limit(
    serve: int,
) -> None:
    idle = []
    try:
        for _ in range(IDLE):  # no request, no token: they only hold a file each
            idle.append(await asyncio.open_connection("127.0.0.1", serve))
        for _ in range(5):
            answer = await hook_call(serve)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), answer[:200]
            decided = json.loads(body)["hookSpecificOutput"]
            assert decided["permissionDecision"] == "allow", decided
    finally:
        for _, writer in idle:
            writer.close()
