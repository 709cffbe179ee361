"""Approve-for-session grants: the scopes a reviewer may choose, and what each one allows.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A grant is bound to its caller — principal, session, agent and tool — and to
the scope the reviewer chose when approving "for the session":

    call     this exact call again: the same arguments (and command, path, cwd,
             permissions), nothing else — the default
    prefix   shell-like tools only: commands whose leading words are the
             approved command's (`Bash(npm test:*)`): `npm test -- -k x` yes,
             `npm publish` no. Offered only for a plain command line (no
             `; & | < > $ \\` ( ) { }` or newlines) that does not start with a
             wrapper that runs anything (`sudo`, `sh`, `env`, `xargs`, …)
    tool     every call of the tool, only where the route allows it
             (`allow_tool_grants: true`)

The reviewer sees each scope as the exact text of what it would allow
(`ScopeOption.label`), and the message, the audit log and `approval-bot
grants` show the chosen one. A grant answers only yes/no requests (kind
`approval`) on the route it was given on. Pure: no Redis (the store is
`approvals/_internal/store/grants.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from approvals.models import ApprovalEvent, ApprovalRequest, GrantScope

SCOPES: tuple[GrantScope, ...] = ("call", "prefix", "tool")

#: Characters that make a command line more than one plain command (or expand to one).
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\\\n\r]")
#: A second word that reads as a subcommand (`npm test`, `git push`, `cargo build`).
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9._:-]*")
#: Commands that run whatever follows them: a prefix of these would allow anything.
WRAPPERS = frozenset(
    {
        "sudo", "doas", "su", "env", "sh", "bash", "zsh", "fish", "dash", "ksh", "exec",
        "eval", "xargs", "nohup", "time", "timeout", "nice", "ionice", "command", "builtin",
        "watch", "strace", "ssh", "docker", "kubectl", "python", "python3", "node", "perl",
        "ruby", "php", "npx", "uvx", "pipx", "bunx", "find",
    }
)  # fmt: skip


def new_grant_id() -> str:
    return "grt_" + secrets.token_urlsafe(9)


def call_hash(event: ApprovalEvent) -> str:
    """The identity of one call within its tool: canonical arguments and what the reviewer saw."""
    content = {
        "arguments": event.arguments,
        "kind": event.kind,
        "command": event.command,
        "path": event.path,
        "cwd": event.cwd,
        "permissions": event.permissions,
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def command_words(command: str | None) -> list[str] | None:
    """The words of a plain command line; None when it is not one (shell syntax, unbalanced
    quotes, empty)."""
    if not command or _SHELL_SYNTAX.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words or None


def command_prefix(command: str | None) -> tuple[str, ...] | None:
    """The leading words a prefix grant would allow (`npm test -- -k x` → `npm test`,
    `rm -rf build` → `rm`); None when no prefix grant is offered for this command."""
    words = command_words(command)
    if words is None or words[0] in WRAPPERS or ("/" in words[0] and words[0] != words[0]):
        return None
    if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]):
        return (words[0], words[1])
    return (words[0],)


def shell_command(event: ApprovalEvent) -> str | None:
    """The command line of a shell-like call (kind `command`), else None."""
    if event.kind != "command":
        return None
    command = event.command or event.arguments.get("command")
    return command if isinstance(command, str) else None


@dataclass(frozen=True)
class ScopeOption:
    """One scope the reviewer may choose: what it is, and exactly what it would allow."""

    scope: GrantScope
    #: `prefix`: the leading words; otherwise empty.
    words: tuple[str, ...]
    #: Claude Code's own rule text for it (`Bash(npm test:*)`, `Bash`), or the exact call.
    rule: str
    #: What it allows, for people: "commands starting with `npm test`".
    label: str


def scope_options(request: ApprovalRequest, *, tool_grants: bool) -> list[ScopeOption]:
    """The scopes "approve for session" offers for `request` (empty when it offers none)."""
    event = request.event
    if request.config.kind != "approval" or not event.session_id:
        return []
    options = [ScopeOption("call", (), event.tool_name, "only this exact call, again")]
    prefix = command_prefix(shell_command(event))
    if prefix is not None:
        text = " ".join(prefix)
        options.append(
            ScopeOption(
                "prefix",
                prefix,
                f"{event.tool_name}({text}:*)",
                f"`{event.tool_name}` commands starting with `{text}`",
            )
        )
    if tool_grants:
        options.append(ScopeOption("tool", (), event.tool_name, f"every `{event.tool_name}` call"))
    return options


def offered(request: ApprovalRequest) -> list[ScopeOption]:
    """The scopes offered for `request`: none unless its route offers approve-for-session;
    the whole tool only where the route allows it."""
    if not request.config.allow_for_session:
        return []
    return scope_options(request, tool_grants=request.config.allow_tool_grants)


class Grant(BaseModel):
    """A reviewer's "approve for session", bound to its caller and the scope chosen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default_factory=new_grant_id)
    principal: str | None
    session_id: str
    agent: str | None
    tool_name: str
    scope: GrantScope
    #: `call`: the call's `call_hash`; `prefix`: the leading words; `tool`: nothing.
    call: str | None = None
    words: tuple[str, ...] = ()
    #: What it allows, as shown to the reviewer.
    label: str
    route: str
    request_id: str
    decided_by: str | None
    granted_at: datetime
    expires_at: datetime

    def allows(self, event: ApprovalEvent) -> bool:
        """Whether this grant answers `event` (already known to be its caller's and tool's)."""
        if self.scope == "tool":
            return True
        if self.scope == "call":
            return self.call == call_hash(event)
        words = command_words(shell_command(event))
        return words is not None and tuple(words[: len(self.words)]) == self.words
