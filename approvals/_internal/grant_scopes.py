"""Approve-for-session grants: the scopes a reviewer may choose, and what each one allows.

Internal to approval-bot (not a stable API). A grant is bound to its caller (principal,
session, agent, tool), its route and the scope the reviewer chose: `call` (this exact call
again, the default), `prefix` (shell-like tools: one plain simple command whose program does
not run what follows it, `RUNS_ANYTHING`; later commands whose every simple command starts
with the same words, normalised and as written), `tool` (only where the route allows it).
Each scope is shown as the exact text of what it allows (`ScopeOption.label`). Pure: no
Redis (`approvals/_internal/store/grants.py`). What a prefix allows and refuses:
docs/ARCHITECTURE.md, "Grants".
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from approvals._internal.shell.model import SimpleCommand
from approvals._internal.shell.view import command_of, plain_commands
from approvals.models import ApprovalEvent, ApprovalRequest, GrantScope

#: A shell command as events carry it: a command line, or an argv list.
Command = str | Sequence[str]

#: Narrowest first: a quorum that chose several is given the first (`vote.lua` ranks them so).
SCOPES: tuple[GrantScope, ...] = ("call", "prefix", "tool")

#: A program name written plainly: no path (`/`), no assignment (`=`), no quotes, escapes,
#: tilde or glob characters, not an option. Only such a first word is offered a prefix grant.
_BARE_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
#: A second word that reads as a subcommand (`npm test`, `git push`, `cargo build`).
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9._:-]*")
#: The separators a shell splits plain words on (bash: space and tab, nothing else).
_BLANKS = re.compile(r"[ \t]+")
#: Characters no command a grant allows may hold: controls but tab and newline, and line
#: separators some readers take for a line break (the parser and bash must not differ on
#: where a word or a command ends).
_ODD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")

#: Programs (and shell words) that run whatever follows them: a prefix grant on one would
#: allow any command at all, so none is offered. The shell-command model unwraps most of
#: them (a wrapped command is never plain), but a command may still be one of them alone
#: (`env`, `xargs rm`, `python -c …`); a name with a version suffix (`python3.12`,
#: `perl5.36`) counts as its base name.
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


def written(command: SimpleCommand, whole: Command) -> tuple[str, ...]:
    """`command`'s words as written in `whole` (split on blanks, quotes and escapes kept), to
    compare a grant's words with literally; an argv list's words are as written."""
    if not isinstance(whole, str):
        return command.argv
    return tuple(_BLANKS.split(command.source.strip(" \t")))


def _plain(whole: Command | None) -> tuple[SimpleCommand, ...] | None:
    """The simple commands of a command a grant may judge (`plain_commands`), else None.
    Also refused: a command with a `$` or a backquote in a word, even one the parser read as
    text (tree-sitter-bash reads `0{$0` as the text `0{` and the number `0`; bash expands
    `$0`), or with a control character (`_ODD`)."""
    if whole is None or (isinstance(whole, str) and _ODD.search(whole)):
        return None
    commands = plain_commands(whole)
    if commands is None:
        return None
    if any("$" in w.text or "`" in w.text for c in commands for w in c.words):
        return None
    return commands


def command_prefix(command: Command | None) -> tuple[str, ...] | None:
    """The leading words a prefix grant would allow (`npm test -- -k x` → `npm test`,
    `rm -rf build` → `rm`); None when no prefix grant is offered for this command: not one
    plain simple command (`plain_command`), a program that is not a bare name or runs
    whatever follows it (`RUNS_ANYTHING`, `RUNS_ANYTHING_SUBCOMMANDS`), or leading words
    written other than they are (quoted or escaped)."""
    commands = _plain(command)
    if commands is None or len(commands) != 1:
        return None
    assert command is not None
    argv = commands[0].argv
    program = argv[0]
    if not _BARE_PROGRAM.fullmatch(program) or runs_anything(program):
        return None
    runners = RUNS_ANYTHING_SUBCOMMANDS.get(program)
    prefix: tuple[str, ...]
    if len(argv) > 1 and _SUBCOMMAND.fullmatch(argv[1]):
        if runners is not None and argv[1] in runners:
            return None
        prefix = (program, argv[1])
    elif runners is not None:  # `npm` alone would allow `npm exec …`
        return None
    else:
        prefix = (program,)
    if written(commands[0], command)[: len(prefix)] != prefix:
        return None
    return prefix


def prefix_allows(words: tuple[str, ...], command: Command | None) -> bool:
    """Whether a prefix grant of `words` allows `command`: every simple command of it plain
    (`plain_commands`), its normalised program and leading words `words`, and written so."""
    commands = _plain(command)
    if not words or not commands:
        return False
    assert command is not None
    n = len(words)
    return all(c.argv[:n] == words and written(c, command)[:n] == words for c in commands)


def shell_command(event: ApprovalEvent) -> Command | None:
    """The command of a shell-like call (kind `command`: a command line, or an argv list),
    else None."""
    if event.kind != "command":
        return None
    return command_of(event)


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
        # Every simple command: `npm test && npm test -- -k x` yes, `npm test; rm -rf /`,
        # `'npm' test`, `/usr/bin/npm test` or `CI=1 npm test` no (`prefix_allows`).
        return prefix_allows(self.words, shell_command(event))
