"""The server `mcp-proxy` gates: a command started as a child (stdio) or a Streamable HTTP URL.

The child gets this process's environment minus `APPROVALS_*`, `SLACK_*` and
`REDIS_URL`: with them it could decide its own calls. An HTTP upstream's bearer
token is read from the environment variable named by `--upstream-bearer-env`.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

#: Environment variables the upstream never sees: they could decide its own calls.
PRIVATE_ENV = ("APPROVALS_", "SLACK_", "REDIS_URL")
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


class UpstreamGone(Exception):
    """The upstream MCP server cannot be reached, exited, or its connection broke."""


@dataclass(frozen=True)
class Upstream:
    """The gated server: a command to start (stdio) or a Streamable HTTP URL (with a bearer
    token read from the environment variable `bearer_env`, when given)."""

    command: list[str] = field(default_factory=list)
    url: str | None = None
    bearer_env: str | None = None

    def default_name(self) -> str:
        """`mcp__<name>__…`: the command's file name, else the URL's host."""
        if self.command:
            raw = Path(self.command[0]).stem
            # `npx -y @scope/server-x`, `uvx server-x`, `python -m pkg`: the package names it.
            for arg in reversed(self.command[1:]):
                if not arg.startswith("-"):
                    raw = arg.rsplit("/", 1)[-1].split("@", 1)[0] or raw
                    break
        else:
            raw = urlparse(self.url or "").hostname or "upstream"
        return _NAME.sub("_", raw).strip("_") or "upstream"

    @asynccontextmanager
    async def connect(self, message_handler: Any) -> AsyncIterator[Client]:
        """An SDK client connected to the upstream, with no response caching. It speaks the
        handshake era (every server does): there the upstream's own notifications (list
        changes, resource updates, log messages) arrive unasked, so they can be relayed."""
        if self.url:
            headers = {}
            if self.bearer_env:
                token = os.environ.get(self.bearer_env, "").strip()
                if not token:
                    raise UpstreamGone(f"{self.bearer_env} (the upstream's bearer token) is empty")
                headers["Authorization"] = f"Bearer {token}"
            timeout = httpx2.Timeout(30.0, read=300.0)  # a response stream may stay open
            async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
                transport = streamable_http_client(self.url, http_client=http)
                async with Client(
                    transport, message_handler=message_handler, cache=None, mode="legacy"
                ) as client:
                    yield client
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_ENV)}
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=env)
        async with Client(
            params, message_handler=message_handler, cache=None, mode="legacy"
        ) as client:
            yield client
