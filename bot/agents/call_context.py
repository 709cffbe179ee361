"""What the command hook adds to a call before it is reviewed: the agent's reason, the user's
request, and the files the call changes as they stand (the hook JSON's `approval_context`).

Runs on the agent's machine as the agent's user: standard library only, bounded in time and
size, and `gather` never raises (whatever goes wrong, the call is reviewed without it). A
file is read only when it is a regular UTF-8 file of at most `MAX_ORIGINAL_BYTES` and not a
sensitive path (`approvals._internal.file_risks.is_sensitive`). What is read and sent:
docs/ARCHITECTURE.md, "Call context".
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any

from approvals._internal.file_risks import is_sensitive
from bot.agents.transcripts import excerpt

#: The hook JSON field (`approvals.integrations.coding_agents.CONTEXT_FIELD`, not imported:
#: that module needs pydantic).
CONTEXT_FIELD = "approval_context"
#: The largest file read to diff against (a bigger one is shown as "not read: too large").
MAX_ORIGINAL_BYTES = 512 * 1024
#: The most time the context may take out of the hook's budget, in seconds.
MAX_SECONDS = 0.5
#: Claude Code tools that change the file they name.
FILE_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})


def read_original(path: str) -> dict[str, Any]:
    """`{path, exists, text}` for a file read, or `{path, exists, note}` saying why not."""
    entry: dict[str, Any] = {"path": path, "exists": True}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return {"path": path, "exists": False}
    except PermissionError:
        return {**entry, "note": "permission denied"}
    except OSError as e:
        return {**entry, "note": e.strerror or type(e).__name__}
    with os.fdopen(fd, "rb", buffering=0) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return {**entry, "note": "not a regular file"}
        if info.st_size > MAX_ORIGINAL_BYTES:
            return {**entry, "note": f"{info.st_size:,} bytes, over {MAX_ORIGINAL_BYTES:,}"}
        data = f.read(MAX_ORIGINAL_BYTES + 1)
    if len(data) > MAX_ORIGINAL_BYTES:
        return {**entry, "note": f"over {MAX_ORIGINAL_BYTES:,} bytes"}
    if b"\x00" in data:
        return {**entry, "note": "binary"}
    try:
        return {**entry, "text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {**entry, "note": "not UTF-8 text"}


def originals(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The files a Claude Code file tool's call changes, as read (see the module docstring)."""
    if payload.get("tool_name") not in FILE_TOOLS:
        return []
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return []
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(path, str) or not path or "\x00" in path:
        return []
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    full = os.path.expanduser(path)
    if not os.path.isabs(full) and cwd:
        full = os.path.join(cwd, full)
    why = is_sensitive(path, cwd)
    if why is not None:
        return [{"path": path, "note": f"{why}: not read"}]
    found = read_original(full)
    found["path"] = path  # keyed by the call's own spelling
    return [found]


def gather(
    dialect: str, payload: dict[str, Any], *, seconds: float = MAX_SECONDS
) -> tuple[dict[str, Any] | None, str | None]:
    """(the `approval_context` for this hook call or None, a problem to report or None);
    never raises, takes at most about `seconds`."""
    deadline = time.monotonic() + max(0.0, seconds)
    context: dict[str, Any] = {}
    problem: str | None = None
    try:
        found = excerpt(dialect, payload, deadline=deadline)
        if found.reason:
            context["reason"] = found.reason
        if found.user_request:
            context["user_request"] = found.user_request
        if found.problem and payload.get("transcript_path"):
            problem = found.problem
        if dialect == "claude-code":
            files = originals(payload)
            if files:
                context["files"] = files
    except Exception as e:  # the context explains a call; it must never stop its review
        problem = f"call context not gathered ({type(e).__name__})"
    return (context or None), problem
