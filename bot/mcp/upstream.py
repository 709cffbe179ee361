"""The server `mcp-proxy` gates: a command started as a child (stdio) or a Streamable HTTP URL.

The child gets a scrubbed environment (`upstream_environment`), not this process's: the
MCP SDK's defaults (HOME, LOGNAME, PATH, SHELL, TERM, USER), the locale and time zone
(LANG, LANGUAGE, LC_*, TZ, TMPDIR), and the variables named with `--pass-env` (a server's
own token, say). Never `APPROVALS_*`, `SLACK_*` or `REDIS_URL`: with them it could decide
its own calls (`--pass-env` refuses them). Before the child starts, this process makes
itself non-dumpable (Linux `prctl(PR_SET_DUMPABLE, 0)`: `shield_process`), so a process
of the same user, the upstream included, cannot read its `/proc/<pid>/environ` or attach
to it. What an upstream can still see: docs/agents/mcp-proxy.md. An HTTP upstream's bearer token
is read from the environment variable named by `--upstream-bearer-env`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

log = logging.getLogger(__name__)

#: Environment variables the upstream never sees: they could decide its own calls.
PRIVATE_ENV = ("APPROVALS_", "SLACK_", "REDIS_URL")
#: What every upstream gets besides the MCP SDK's defaults (HOME, LOGNAME, PATH, SHELL, TERM,
#: USER) and what `--pass-env` names: the locale (and every LC_*), time zone, temp directory.
BASE_ENV = ("LANG", "LANGUAGE", "TZ", "TMPDIR")
#: A variable name `--pass-env` takes.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def is_private(name: str) -> bool:
    """Whether `name` is a variable the upstream may never get, even by `--pass-env`."""
    return name.upper().startswith(PRIVATE_ENV)


def upstream_environment(
    environ: Mapping[str, str], passed: tuple[str, ...] = ()
) -> dict[str, str]:
    """The environment a child upstream starts with (the SDK adds its defaults under it)."""
    env = {name: environ[name] for name in BASE_ENV if name in environ}
    env.update((name, value) for name, value in environ.items() if name.startswith("LC_"))
    for name in passed:
        if is_private(name):
            raise ValueError(f"{name} is never passed to an upstream")
        if name in environ:
            env[name] = environ[name]
        else:
            log.warning("--pass-env %s: not set in mcp-proxy's environment", name)
    return env


#: `prctl` option: whether this process may be dumped, and be read through /proc or ptrace by
#: other processes of its user (linux/prctl.h).
PR_SET_DUMPABLE = 4


def shield_process() -> bool:
    """Make this process non-dumpable (Linux): its /proc/<pid>/environ, mem and the like
    become root's, and no process of the same user can ptrace it. False where not done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError) as e:
        log.warning("could not make mcp-proxy non-dumpable: %r", e)
        return False


class UpstreamGone(Exception):
    """The upstream MCP server cannot be reached, exited, or its connection broke."""


@dataclass(frozen=True)
class Upstream:
    """The gated server: a command to start (stdio) or a Streamable HTTP URL (with a bearer
    token read from the environment variable `bearer_env`, when given)."""

    command: list[str] = field(default_factory=list)
    url: str | None = None
    bearer_env: str | None = None
    #: Variables of this process's environment the child gets too (`--pass-env`).
    pass_env: tuple[str, ...] = ()

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
        env = upstream_environment(os.environ, self.pass_env)
        shield_process()  # before the child exists: it never sees this process readable
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=env)
        async with Client(
            params, message_handler=message_handler, cache=None, mode="legacy"
        ) as client:
            yield client
