"""Approve-for-session grants: the scopes a reviewer may choose, and what each one allows.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A grant is bound to its caller — principal, session, agent and tool — and to
the scope the reviewer chose when approving "for the session":

    call     this exact call again: the same arguments (and command, path, cwd,
             permissions), nothing else — the default
    prefix   shell-like tools only: commands whose leading words are the
             approved command's (`Bash(npm test:*)`): `npm test -- -k x` yes,
             `npm publish` no. Offered only for a plain command line (no
             `; & | < > $ \\` ( ) { }` or newlines) whose first word is a bare
             program name (no path, assignment, quotes or escapes) that does not run
             whatever follows it (`RUNS_ANYTHING`: `sudo`, `sh`, `env`, `xargs`,
             interpreters, …); a later command matches only when its leading words
             are the grant's, written the same plain way
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

#: Narrowest first: a quorum that chose several is given the first (`vote.lua` ranks them so).
SCOPES: tuple[GrantScope, ...] = ("call", "prefix", "tool")

#: Characters that make a command line more than one plain command (or expand to one).
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\\\n\r]")
#: A program name written plainly: no path (`/`), no assignment (`=`), no quotes, escapes,
#: tilde or glob characters, not an option. Only such a first word is offered a prefix grant.
_BARE_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
#: A second word that reads as a subcommand (`npm test`, `git push`, `cargo build`).
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9._:-]*")
#: The separators a shell splits plain words on.
_BLANKS = re.compile(r"[ \t]+")

#: Programs (and shell words) that run whatever follows them: a prefix grant on one would
#: allow any command at all, so none is offered. Until commands are read with a shell
#: grammar, this list is the whole of that judgement; a name
#: with a version suffix (`python3.12`, `perl5.36`) counts as its base name.
RUNS_ANYTHING: dict[str, str] = {
    # Another user, or another root.
    "sudo": "runs a command as another user", "doas": "runs a command as another user",
    "su": "runs a shell or `-c` command as another user", "pkexec": "runs a command as root",
    "runuser": "runs a command as another user", "sg": "runs a command in another group",
    "chroot": "runs a command in another root", "unshare": "runs a command in new namespaces",
    "nsenter": "runs a command in another process's namespaces",
    # Shells: `-c` or a script file is any command.
    "sh": "a shell", "bash": "a shell", "zsh": "a shell", "dash": "a shell", "ksh": "a shell",
    "mksh": "a shell", "fish": "a shell", "csh": "a shell", "tcsh": "a shell",
    "busybox": "runs any of its applets, `sh` among them",
    # Runners: the rest of the line is the command they run.
    "env": "runs the command after its assignments", "xargs": "runs its arguments as a command",
    "nohup": "runs its arguments", "timeout": "runs its arguments", "time": "runs its arguments",
    "nice": "runs its arguments", "ionice": "runs its arguments", "stdbuf": "runs its arguments",
    "setsid": "runs its arguments", "flock": "runs its arguments (or `-c`)",
    "watch": "runs its arguments through `sh -c`", "chrt": "runs its arguments",
    "taskset": "runs its arguments", "numactl": "runs its arguments",
    "systemd-run": "runs its arguments as a unit", "script": "runs a shell or `-c` command",
    "parallel": "runs its arguments as commands", "find": "`-exec` runs any command",
    # Shell words that run their arguments (or code named by them).
    "exec": "runs its arguments", "command": "runs its arguments", "builtin": "runs a builtin",
    "eval": "runs its arguments as shell code", "source": "runs a file as shell code",
    ".": "runs a file as shell code", "coproc": "runs its arguments",
    "trap": "runs its argument as shell code on a signal", "enable": "`-f` loads code",
    "mapfile": "`-C` runs a callback", "readarray": "`-C` runs a callback",
    # Debuggers and tracers: they start the program they are given.
    "strace": "runs its arguments", "ltrace": "runs its arguments", "gdb": "runs a program",
    "valgrind": "runs its arguments", "perf": "`perf record` runs its arguments",
    # Interpreters: `-c`/`-e` or a script file is any code.
    "python": "an interpreter", "python2": "an interpreter", "python3": "an interpreter",
    "pypy": "an interpreter", "pypy3": "an interpreter", "node": "an interpreter",
    "nodejs": "an interpreter", "deno": "an interpreter", "bun": "an interpreter",
    "perl": "an interpreter", "ruby": "an interpreter", "php": "an interpreter",
    "lua": "an interpreter", "luajit": "an interpreter", "tclsh": "an interpreter",
    "Rscript": "an interpreter", "pwsh": "an interpreter", "osascript": "an interpreter",
    "awk": "`system()` runs commands", "gawk": "`system()` runs commands",
    "mawk": "`system()` runs commands", "nawk": "`system()` runs commands",
    # Package runners: fetch and run any package's program.
    "npx": "runs any package", "pnpx": "runs any package", "bunx": "runs any package",
    "uvx": "runs any package", "pipx": "`pipx run` runs any package",
    # Elsewhere: the rest of the line runs on another machine or in a container.
    "ssh": "runs a command on another machine", "docker": "runs containers and commands in them",
    "podman": "runs containers and commands in them", "kubectl": "`exec` runs commands in pods",
}  # fmt: skip
#: Subcommands that run whatever follows them: no prefix grant stops at these programs' name,
#: nor at one of these subcommands (`npm test` yes; `npm`, `npm exec` no).
RUNS_ANYTHING_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "npm": frozenset({"exec", "x", "explore"}),
    "pnpm": frozenset({"exec", "dlx"}),
    "yarn": frozenset({"exec", "dlx"}),
    "uv": frozenset({"run", "tool"}),
    "poetry": frozenset({"run"}),
    "pipenv": frozenset({"run"}),
    "bundle": frozenset({"exec"}),
    "go": frozenset({"run"}),
}
#: The names above, for membership tests.
WRAPPERS = frozenset(RUNS_ANYTHING)


def runs_anything(program: str) -> bool:
    """Whether `program` runs whatever follows it (`RUNS_ANYTHING`, version suffixes too)."""
    return program in WRAPPERS or program.rstrip("0123456789.") in WRAPPERS


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


def plain_words(command: str | None) -> list[str] | None:
    """The words of a plain command line as written (split on blanks, quotes kept), for the
    leading words a prefix grant compares literally; None when it is not a plain command
    line (`command_words`)."""
    if command_words(command) is None:
        return None
    assert command is not None
    return _BLANKS.split(command.strip(" \t"))


def command_prefix(command: str | None) -> tuple[str, ...] | None:
    """The leading words a prefix grant would allow (`npm test -- -k x` → `npm test`,
    `rm -rf build` → `rm`); None when no prefix grant is offered for this command: not a
    plain command line, a first word that is not a bare program name (a path, an assignment,
    quoted or escaped), or a program that runs whatever follows it (`RUNS_ANYTHING`,
    `RUNS_ANYTHING_SUBCOMMANDS`)."""
    words = plain_words(command)
    if words is None or not _BARE_PROGRAM.fullmatch(words[0]) or runs_anything(words[0]):
        return None
    program = words[0]
    runners = RUNS_ANYTHING_SUBCOMMANDS.get(program)
    if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]):
        if runners is not None and words[1] in runners:
            return None
        return (program, words[1])
    if runners is not None:  # `npm` alone would allow `npm exec …`
        return None
    return (program,)


def shell_command(event: ApprovalEvent) -> str | None:
    """The command line of a shell-like call (kind `command`), else None."""
    if event.kind != "command":
        return None
    command = event.command or event.arguments.get("command")
    return command if isinstance(command, str) else None


def approved_call(request: ApprovalRequest) -> ApprovalEvent | None:
    """The call an approval of `request` let run: the agent's own, or the reviewer's edit
    (`Decision.edited_arguments`); None when an edit cannot be told as a call the agent
    would send (a command or file event whose command or path the edit does not carry)."""
    decision = request.decision
    edited = decision.edited_arguments if decision is not None else None
    if edited is None:
        return request.event
    event = request.event
    update: dict[str, object] = {"arguments": edited}
    if event.command is not None:
        command = edited.get("command")
        if not isinstance(command, str):
            return None
        update["command"] = command
    if event.path is not None:
        return None
    return event.model_copy(update=update)


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
        # The leading words as written, compared literally: `'npm' test`, `/usr/bin/npm
        # test` or `CI=1 npm test` are not `npm test` (the grant's words are bare).
        words = plain_words(shell_command(event))
        return (
            bool(self.words) and words is not None and tuple(words[: len(self.words)]) == self.words
        )
