"""Helpers for the MCP tests: the environment and command lines of `approval-bot mcp` and
`mcp-proxy` as an MCP client launches them, and progress collection."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcp import StdioServerParameters

from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.models import ApprovalRequest

REPO = Path(__file__).resolve().parents[2]
CHANNEL = "C0APPROVALS"


def agent_env(redis_url: str, keys: Keys, **extra: str) -> dict[str, str]:
    """The agent's environment: straight on this test's Redis prefix, nothing inherited that
    names another bot."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(
        REDIS_URL=redis_url,
        APPROVALS_PREFIX=keys.prefix,
        APPROVALS_DEFAULT_CHANNEL=CHANNEL,
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def approval_bot(*args: str, env: dict[str, str]) -> StdioServerParameters:
    """`approval-bot ARGS…` as an MCP client starts it (stdio)."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "bot.cli.main", *args], env=env, cwd=str(REPO)
    )


@dataclass
class ProgressLog:
    """A `progress_callback` that keeps what arrived."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    async def wait_for(self, count: int, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while True:
                if len(self.seen) >= count:
                    return
                await asyncio.sleep(0.02)


async def pending_for(store: ApprovalStore, tool: str, within: float = 10.0) -> ApprovalRequest:
    """The pending request for `tool`, once there is one."""
    async with asyncio.timeout(within):
        while True:
            for request in await store.list_pending():
                if request.event.tool_name == tool:
                    return request
            await asyncio.sleep(0.02)


async def settled(store: ApprovalStore, request_id: str, within: float = 10.0) -> ApprovalRequest:
    """The request once it is no longer pending."""
    async with asyncio.timeout(within):
        while True:
            current = await store.get(request_id)
            if not current.is_pending:
                return current
            await asyncio.sleep(0.02)


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    """Wait until `check()` holds (at most `within` seconds)."""
    async with asyncio.timeout(within):
        while True:
            if check():
                return
            await asyncio.sleep(0.02)
