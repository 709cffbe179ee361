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
one goes (a user prompt is where people paste keys).
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
