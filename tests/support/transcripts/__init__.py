"""Session transcripts as Claude Code and Codex write them, built from their real line shapes,
for the command hook's reason excerpt (`bot/agents/transcripts.py`).

- `claude_code_edit.jsonl`: a Claude Code session (2.1.197): a summary and a file-history
  line, an earlier prompt answered with a Bash call, a `/clear` echo, the user's request
  (with `{{SECRET}}` in it), a meta reminder, thinking, a Read and its result, the assistant's
  text, then the `Edit` (`toolu_01Edit4b8f2cXk6Qw9Tz`) the hook is asked about, and a last
  line cut off mid-write.
- `codex_apply_patch.jsonl`: a Codex rollout (0.171.0): session meta, environment context,
  the user's request (`{{SECRET}}`) as a message and as an event, reasoning, an
  `exec_command` call and its output, the assistant's message, the `apply_patch` call
  (`call_Tz5pW9kM3vQ1nX8bR2yF6jLs`), a token count and a line that is not JSON.

`{{SECRET}}` is filled in when written (`write`): the repository holds no secret, only where
one goes (a user prompt is where people paste keys). `claude_retry_lines` gives the lines
Claude Code appends after a hook denied that `Edit`: the error result, the assistant's next
words and the retried call.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLAUDE_EDIT = "claude_code_edit.jsonl"
CODEX_PATCH = "codex_apply_patch.jsonl"
#: The tool call each transcript ends with.
CLAUDE_EDIT_CALL = "toolu_01Edit4b8f2cXk6Qw9Tz"
CODEX_PATCH_CALL = "call_Tz5pW9kM3vQ1nX8bR2yF6jLs"
#: The agent's words right before that call, as the transcripts hold them.
CLAUDE_EDIT_REASON = (
    "The limit is hard-coded as `MAX_RETRIES = 3`. I'll read it from `CLIENT_MAX_RETRIES` "
    "with a default of 5, so the slow CI runners stop hitting it and anyone can tune it "
    "without a release."
)
CODEX_PATCH_REASON = (
    "The limit is a constant (`MAX_RETRIES = 3`); I'll patch it to read "
    "`CLIENT_MAX_RETRIES`, defaulting to 5."
)


def text(name: str, secret: str = "") -> str:
    """The transcript's lines with `secret` (escaped as a JSON string holds it) in place."""
    escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
    return (HERE / name).read_text(encoding="utf-8").replace("{{SECRET}}", escaped)


def write(directory: Path, name: str, secret: str = "", *, extra: str = "") -> Path:
    """The transcript `name` written into `directory` with `secret` in its user prompt, and
    `extra` (more JSONL lines) appended; its path."""
    path = directory / name
    path.write_text(text(name, secret) + extra, encoding="utf-8")
    return path


def claude_retry_lines(
    denied_call: str, denial: str, answer: str, retry_call: str, tool_input: dict[str, object]
) -> str:
    """What Claude Code (2.1.197) appends to `claude_code_edit.jsonl` after a PreToolUse hook
    denied the `Edit` `denied_call` with `denial`: the tool result (an error carrying the
    hook's reason), the assistant's text (`answer`, the words before its next call) and the
    retried `Edit` `retry_call` with `tool_input`; as JSONL lines in the transcript's shapes."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/srv/app",
        "sessionId": "4b1e9f3c-7d2a-4e85-b6c0-91f3a8d2e7b4",
        "version": "2.1.197",
        "gitBranch": "main",
    }
    usage = {
        "input_tokens": 4,
        "cache_creation_input_tokens": 512,
        "cache_read_input_tokens": 18289,
        "output_tokens": 96,
        "service_tier": "standard",
    }
    result = {
        **base,
        "parentUuid": "0f5e9a2c-7b1d-4c38-8e64-2d9b6f1a3e57",
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "content": denial,
                    "is_error": True,
                    "tool_use_id": denied_call,
                }
            ],
        },
        "uuid": "5e8a1c3f-9d2b-4f67-a0c4-7b3e9d1f2a86",
        "timestamp": "2026-11-30T10:01:02.117Z",
        "toolUseResult": f"Error: {denial}",
    }

    def assistant(uuid: str, parent: str, part: dict[str, object], at: str) -> dict[str, object]:
        return {
            **base,
            "parentUuid": parent,
            "message": {
                "id": "msg_01Tq8WcLm3vXe7RbNy2kHdPa",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [part],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
            "requestId": "req_011CVd9xR4bWm7Kq2TzN8cLp",
            "type": "assistant",
            "uuid": uuid,
            "timestamp": at,
        }

    text = assistant(
        "7c2f9e4a-1b8d-4a53-9e06-3d5b8f2c1e74",
        "5e8a1c3f-9d2b-4f67-a0c4-7b3e9d1f2a86",
        {"type": "text", "text": answer},
        "2026-11-30T10:01:09.540Z",
    )
    call = assistant(
        "2a9d6f1c-4e7b-4c82-b5a3-8f1e0d7c9b25",
        "7c2f9e4a-1b8d-4a53-9e06-3d5b8f2c1e74",
        {"type": "tool_use", "id": retry_call, "name": "Edit", "input": tool_input},
        "2026-11-30T10:01:10.012Z",
    )
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in (result, text, call))
