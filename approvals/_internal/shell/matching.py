"""The policy's shell-command matcher (`match: {command: …, risks: […]}`), how a rule's action
folds it over the simple commands, and the warnings `policy check` gives for rules that
can never match.

An `allow` rule matches only when **every** simple command matches and the command could
be analysed; `ask` and `deny` rules match when **any** does. An unanalysable command never
matches an `allow` rule and always matches an `ask` rule with a `command` or `risks`
matcher; a `deny` rule applies only to the commands that were identified.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from approvals._internal.shell.model import Analysis, SimpleCommand, Word
from approvals._internal.shell.options import NO_SPLIT, read, read_words, table_for
from approvals._internal.shell.readonly import READ_ONLY, why_not
from approvals._internal.shell.tables import (
    OPAQUE_BUILTINS,
    OPTIONS,
    SHELLS,
    SUBCOMMAND_ALIASES,
    WRAPPERS,
)


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


_Names = Annotated[list[str] | None, BeforeValidator(_listify), Field(min_length=1)]


@functools.lru_cache(maxsize=1024)
def rule_flags(program: str | None, subcommand: str | None, flag: str) -> frozenset[str]:
    """The canonical flags one flag of a rule stands for (`-rf` → {-r, -f};
    `--recursive` for rm → {-r})."""
    word = [Word(flag)]
    if program is None:
        return frozenset(read_words(word, None, True)[1]) or frozenset({flag})
    if program == "git" and subcommand is not None:
        table = table_for("git", subcommand)
        return frozenset(read_words(word, table, True)[1]) or frozenset({flag})
    return read(program, word).flags or frozenset({flag})


class CommandMatch(BaseModel):
    """`match.command`: what each simple command must be. Every field given must match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The normalised program (a basename: `rm`, not `/bin/rm`); any entry of a list.
    program: _Names = None
    #: The first word after the program's global options (`git -C x push` → `push`).
    subcommand: _Names = None
    #: Options that must all be present, in any spelling (`-r` matches `-R`, `--recursive`
    #: and `-rf` for rm).
    flags: _Names = None
    #: True: the command is on the shipped read-only list, writing nothing; False: it is not.
    read_only: bool | None = None

    @field_validator("program", "subcommand", "flags")
    @classmethod
    def _not_blank(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            if not entry.strip():
                raise ValueError("entries may not be blank")
        return value

    @field_validator("program")
    @classmethod
    def _lower(cls, value: list[str] | None) -> list[str] | None:
        """Programs are compared in lower case (`RM` runs rm on a case-insensitive disk)."""
        return [p.lower() for p in value] if value is not None else None

    @field_validator("flags")
    @classmethod
    def _options(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            if not entry.startswith("-") or entry in ("-", "--"):
                raise ValueError(f"{entry!r} is not an option (flags start with -)")
        return value

    def matches_command(self, command: SimpleCommand) -> bool:
        program = command.program
        if self.program is not None and (program is None or program not in self.program):
            return False
        if self.subcommand is not None:
            aliases = SUBCOMMAND_ALIASES.get(program or "", {})
            wanted = {aliases.get(s, s) for s in self.subcommand}
            if command.subcommand not in wanted:
                return False
        if self.flags is not None:
            for flag in self.flags:
                if not rule_flags(program, command.subcommand, flag) <= command.flags:
                    return False
        if self.read_only is not None and (why_not(command) is None) != self.read_only:
            return False
        return True


def rule_matches(
    action: str,
    command: CommandMatch | None,
    risks: Sequence[str] | None,
    analysis: Analysis,
) -> bool:
    """Whether a rule with these command matchers matches, folded for its action."""
    parsed = analysis.parsed
    if not parsed.analysable:
        if action == "allow":
            return False
        if action == "ask":
            return True
    if risks is not None and not analysis.risk_codes.intersection(risks):
        return False
    if command is None:
        return True
    if action == "allow":
        return bool(parsed.commands) and all(command.matches_command(c) for c in parsed.commands)
    return any(command.matches_command(c) for c in parsed.definite())


def matching_commands(command: CommandMatch | None, analysis: Analysis) -> list[SimpleCommand]:
    """The simple commands a matcher matches (all of them when there is none)."""
    commands = list(analysis.parsed.commands)
    return commands if command is None else [c for c in commands if command.matches_command(c)]


_ALWAYS_UNWRAPPED = frozenset(WRAPPERS) - {"env", "command", "exec", "xargs", "time"}


def warnings(
    action: str,
    command: CommandMatch | None,
    risks: Sequence[str] | None,
    kinds: Sequence[str] | None,
) -> list[str]:
    """Why a rule's command matchers can never (or almost never) match; empty when they can."""
    out: list[str] = []
    if (command is not None or risks is not None) and kinds is not None:
        if "command" not in kinds and "tool" not in kinds:
            out.append(f"command/risks only match shell commands; kind {kinds} never carries one")
    if action == "allow" and risks and "unanalysable" in risks:
        out.append("an unanalysable command never matches an allow rule (risk unanalysable)")
    if command is None:
        return out
    for program in command.program or ():
        name = program.lower()
        if "/" in program:
            out.append(
                f"program {program!r} never matches: programs are compared by basename "
                f"({name.rsplit('/', 1)[-1]!r})"
            )
        elif name in _ALWAYS_UNWRAPPED:
            out.append(
                f"program {program!r} never matches a command it runs: {name} is unwrapped "
                "and rules see the command behind it"
            )
        elif name in SHELLS:
            out.append(
                f"program {program!r} matches only a shell running a script file: `{name} -c` "
                "is parsed and rules see the commands inside"
            )
        elif name in OPAQUE_BUILTINS and action == "allow":
            out.append(f"program {program!r} is always unanalysable; an allow never matches it")
        if command.read_only is True and name not in READ_ONLY:
            out.append(f"read_only: true never matches program {program!r}: not on the list")
        for flag in command.flags or ():
            table = OPTIONS.get(name)
            if name == "git":
                subs = command.subcommand or []
                tables = [OPTIONS.get(f"git {s}") for s in subs] or [OPTIONS.get("git")]
                known = all(t is None or _knows(t, flag) for t in tables)
            else:
                known = table is None or name in NO_SPLIT or _knows(table, flag)
            if not known:
                out.append(f"{name} has no option {flag!r}; this rule never matches")
    return out


def _knows(table: Any, flag: str) -> bool:
    """Whether every option `flag` stands for is in `table`."""
    if flag.startswith("--") or table.single_dash_long or flag in table.canonical:
        return table.resolve(flag.split("=", 1)[0]) is not None
    return all(f"-{c}" in table.canonical for c in flag[1:])
