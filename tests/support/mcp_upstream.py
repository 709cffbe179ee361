"""A small upstream MCP server for the proxy tests, written with the same SDK.

Every tool call is appended to the JSON-lines file named by `UPSTREAM_LOG`, so a
test can tell whether (and with what) the upstream was called. Run as
`python -m tests.support.mcp_upstream` (stdio) or `… --http PORT TOKEN` (Streamable
HTTP for bearer TOKEN only).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("files", instructions="A tiny file server for tests.")


def record(tool: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("UPSTREAM_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def delete_file(path: str) -> str:
    """Delete a file."""
    record("delete_file", {"path": path})
    return f"deleted {path}"


@server.tool()
def read_file(path: str) -> str:
    """Read a file."""
    record("read_file", {"path": path})
    return f"contents of {path}"


@server.tool()
async def slow_copy(seconds: float, ctx: Context) -> str:
    """Copy slowly, reporting progress."""
    record("slow_copy", {"seconds": seconds})
    steps = max(1, int(seconds / 0.1))
    try:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"copied {i + 1}/{steps}")
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        record("slow_copy cancelled", {"seconds": seconds})
        raise
    return "copied"


@server.tool()
async def announce(ctx: Context) -> str:
    """Tell the client the tool list changed."""
    record("announce", {})
    await ctx.request_context.session.send_tool_list_changed()
    return "announced"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    record("crash", {})
    os._exit(3)


@server.tool()
def environment() -> str:
    """What this process sees of its own environment and of its parent's (the proxy's)."""
    record("environment", {})
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            entries = f.read().decode("utf-8", "replace").split("\0")
        parent = {"readable": True, "names": sorted(e.partition("=")[0] for e in entries if e)}
    except OSError as e:
        parent = {"readable": False, "error": type(e).__name__}
    return json.dumps({"names": sorted(os.environ), "parent": parent})


@server.resource("file://readme")
def readme() -> str:
    """The readme."""
    return "hello from upstream"


@server.prompt()
def review(path: str) -> str:
    """Ask for a review of a file."""
    return f"Please review {path}"


def serve_http(port: int, token: str) -> None:
    """Streamable HTTP on 127.0.0.1:`port` at /mcp, for callers with `Bearer <token>` only."""
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--http":  # --http PORT TOKEN
        serve_http(int(sys.argv[2]), sys.argv[3])
    else:
        server.run("stdio")
