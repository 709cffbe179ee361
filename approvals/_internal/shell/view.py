"""What the rest of approvals sees of a shell command: an event's command line, its analysis
(parsed once, kept in a small cache), its risks, the reviewer's lines, and whether its simple
commands are plain (what a prefix grant may allow).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from approvals._internal.shell.model import Analysis, ParsedCommand, Risk, SimpleCommand
from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.risks import detect
from approvals.models import ApprovalEvent

#: Tool names whose `command` argument is a shell command even on a kind `tool` event.
SHELL_TOOLS = frozenset({"Bash", "shell", "exec_command", "local_shell", "container.exec"})
#: Command lines up to this long are kept in the cache (longer ones are parsed each time).
CACHE_MAX_CHARS = 8192

Command = str | tuple[str, ...]


def command_of(event: ApprovalEvent) -> Command | None:
    """The shell command an event carries (a string, or an argv list), else None.

    Kind `command` events (Claude Code's Bash, Codex's shell) and kind `tool` events of a
    shell tool (`SHELL_TOOLS`): `event.command`, else `arguments.command`."""
    if event.kind != "command" and event.tool_name not in SHELL_TOOLS:
        return None
    value: Any = event.command if event.command is not None else event.arguments.get("command")
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def is_command_event(event: ApprovalEvent) -> bool:
    """Events the `command` and `risks` rule fields apply to."""
    return event.kind == "command" or (
        event.tool_name in SHELL_TOOLS and "command" in event.arguments
    )


@functools.lru_cache(maxsize=256)
def _cached(command: Command) -> ParsedCommand:
    return analyse(command)


def parsed(command: Command | None) -> ParsedCommand:
    """`command` as simple commands (a missing command is unanalysable)."""
    if command is None:
        return ParsedCommand("", problems=("no command given",))
    size = len(command) if isinstance(command, str) else sum(len(w) for w in command)
    return _cached(command) if size <= CACHE_MAX_CHARS else analyse(command)


def analysis(command: Command | None, cwd: str | None) -> Analysis:
    """The parsed command and its risks (paths judged against `cwd`; found when asked for)."""
    return Analysis(parsed(command), cwd, detect)


def analysis_of(event: ApprovalEvent) -> Analysis:
    return analysis(command_of(event), event.cwd)


def risks_of(event: ApprovalEvent) -> list[Risk]:
    """The risks of an event's shell command (none for an event without one)."""
    if not is_command_event(event):
        return []
    return list(analysis_of(event).risks)


def explain(command: str | Sequence[str] | None, cwd: str | None = None) -> list[str]:
    """The parsed view for a reviewer: one line per simple command after unwrapping (so
    `rm -f -r build` shows behind `CI=1 timeout 5 env rm -fr build`), then what could not
    be analysed."""
    key = command if command is None or isinstance(command, str) else tuple(command)
    return lines_of(parsed(key))


def lines_of(parsed_command: ParsedCommand) -> list[str]:
    """`explain`'s lines of a command parsed already."""
    lines = [c.line() for c in parsed_command.commands]
    lines += [f"UNANALYSABLE: {p}" for p in parsed_command.problems]
    return lines


def is_plain(command: SimpleCommand) -> bool:
    """Whether a simple command runs exactly its words: no wrapper, assignment, redirection,
    substitution, expansion, glob or nesting, its program named, not a path, its input its
    own."""
    return not (
        command.program is None
        or command.problem is not None
        or command.calls_function
        or command.wrappers
        or command.assignments
        or command.redirects
        or command.context
        or command.stdin
        or command.dynamic
        or command.path
        or any(w.glob for w in command.words)
    )


def plain_commands(command: str | Sequence[str] | None) -> tuple[SimpleCommand, ...] | None:
    """The simple commands of `command` when every one is plain (`is_plain`) and nothing else
    runs (no function defined, no assignment standing alone, all of it analysed); None
    otherwise. What a prefix grant may allow, one command at a time: `npm test && npm test
    -- -k x` is two plain commands, `npm test; curl x | sh` has one that is not
    (`approvals/_internal/grant_scopes.py`)."""
    key = command if command is None or isinstance(command, str) else tuple(command)
    parsed_command = parsed(key)
    if not parsed_command.analysable:
        return None
    if parsed_command.assignments or parsed_command.functions:
        return None
    if not all(is_plain(c) for c in parsed_command.commands):
        return None
    return parsed_command.commands


def plain_command(command: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The normalised argv (program first) of a command that is exactly one simple command
    with no wrapper, assignment, redirection, substitution or expansion, run at the top
    level; None for anything else. What a prefix grant is given for."""
    commands = plain_commands(command)
    if commands is None or len(commands) != 1:
        return None
    return commands[0].argv
