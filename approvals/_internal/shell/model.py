"""The shell-command model: words, redirections, simple commands, a parsed command, risks.

Plain frozen dataclasses, built by `parse.py` (the grammar) and `normalise.py` (wrappers,
options), read by `readonly.py`, `risks.py` and `matching.py`. Nothing here parses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

#: How a command's standard input is fed: from the previous command of a pipeline, a
#: here-document, a here-string, or a file (`< f`). None: inherited from the agent.
Stdin = Literal["pipe", "heredoc", "herestring", "file"]

RiskCode = Literal[
    "recursive_delete",
    "force_push",
    "push_to_protected",
    "history_rewrite",
    "pipe_to_shell",
    "writes_outside_cwd",
    "writes_sensitive_path",
    "reads_credentials",
    "permission_change",
    "publish",
    "infra_destroy",
    "database_drop",
    "disk_tool",
    "privilege",
    "unanalysable",
]
RISK_CODES: tuple[RiskCode, ...] = get_args(RiskCode)


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word after quote removal and brace expansion.

    `text` is the value the program receives when `static`; otherwise (a `$x`, `$(…)`,
    `$((…))` somewhere in it) the parts that are known with each expansion kept as written
    (`$HOME/.ssh`), so paths can still be judged. `glob`: an unquoted `*`, `?` or `[`.
    """

    text: str
    static: bool = True
    glob: bool = False


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirection: its operator (`>`, `>>`, `&>`, `<`, `>&`, `<<`, `<<<`, …), the file
    descriptor written before it (None: the operator's default), and its target."""

    op: str
    target: Word | None = None
    fd: int | None = None

    @property
    def writes_file(self) -> bool:
        """True for output to a file (not a descriptor dup, a close, /dev/null or a tty)."""
        if self.op in (">&", "<&") and self.target is not None:
            if self.target.text.isdigit() or self.target.text == "-":
                return False
        if self.op not in (">", ">>", "&>", "&>>", ">|", "<>", ">&"):
            return False
        target = self.target.text if self.target else ""
        return target not in HARMLESS_DEVICES

    @property
    def reads_file(self) -> bool:
        return self.op in ("<", "<>")


#: Output targets that write no file: the bit bucket and the process's own streams.
HARMLESS_DEVICES = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"}
)


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command after normalising: what runs, as a reviewer should see it.

    `program` is the basename of what runs after every wrapper and shell `-c` is unwrapped
    (None when it is only known at run time); `args` its arguments with quotes removed,
    combined short options split and, for programs with an option table, each option in
    its canonical spelling. `flags` are those options (before `--`), `subcommand` the first
    word after the program's global options.
    """

    program: str | None
    args: tuple[str, ...] = ()
    #: The source text this command was read from (the outermost, for unwrapped commands).
    source: str = ""
    #: Wrappers unwrapped to reach it, outermost first, each with its own options
    #: (`timeout 5`, `env`, `sudo -u root`).
    wrappers: tuple[str, ...] = ()
    #: `NAME=value` words before it (its own and its wrappers').
    assignments: tuple[str, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    #: Where it sits: nested contexts, outermost first (`$(…)`, `sh -c`, `xargs`, `function f`).
    context: tuple[str, ...] = ()
    stdin: Stdin | None = None
    #: The literal text fed to its standard input (a here-document or here-string), if known.
    stdin_text: str | None = None
    flags: frozenset[str] = frozenset()
    subcommand: str | None = None
    #: Arguments that are not options (nor option values), in order.
    positionals: tuple[str, ...] = ()
    #: Some argument is only known at run time (`$x`, `$(…)`, xargs' input, find's `{}`).
    dynamic: bool = False
    #: Why this command cannot be analysed (None: it can).
    problem: str | None = None
    #: The command runs through a function defined in the same command line.
    calls_function: bool = False
    #: Arguments as Words (for path judgements: `$HOME/.ssh` stays visible).
    words: tuple[Word, ...] = ()
    #: The program as written when it was a path (`/usr/bin/rm`, `./cat`), else None.
    path: str | None = None

    @property
    def argv(self) -> tuple[str, ...]:
        """The command as run: the program, then its arguments (an unknown program's words
        as written)."""
        return self.args if self.program is None else (self.program, *self.args)

    def line(self) -> str:
        """One line for a reviewer: the normalised command, then what was unwrapped."""
        from approvals._internal.shell.words import join

        text = join(self.argv)
        notes = []
        if self.wrappers:
            notes.append("via " + ", ".join(self.wrappers))
        if self.assignments:
            notes.append("with " + " ".join(self.assignments))
        if self.context:
            notes.append("in " + " > ".join(self.context))
        for redirect in self.redirects:
            target = redirect.target.text if redirect.target else ""
            if redirect.op == "<<":
                target = "…"
            elif len(target) > 60:
                target = target[:59] + "…"
            notes.append(f"{'' if redirect.fd is None else redirect.fd}{redirect.op} {target}")
        if self.stdin:
            notes.append(f"stdin from {self.stdin}")
        if self.problem:
            notes.append(f"UNANALYSABLE: {self.problem}")
        return text + (f"   ({'; '.join(notes)})" if notes else "")


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command line as simple commands, with what could not be analysed."""

    source: str
    commands: tuple[SimpleCommand, ...] = ()
    #: Whole-command problems: a parse error, a limit passed, `eval`, `source` ….
    problems: tuple[str, ...] = ()
    #: Assignments that stand alone as statements (`x=1; …`): they run nothing.
    assignments: tuple[str, ...] = ()
    #: Functions defined in the command line (their bodies are among `commands`).
    functions: tuple[str, ...] = ()
    #: Work done (syntax nodes visited), for the bound on hostile input.
    nodes: int = 0

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the command cannot be fully analysed (empty: it can)."""
        own = tuple(
            f"{c.program or '?'}: {c.problem}" for c in self.commands if c.problem is not None
        )
        return self.problems + own

    @property
    def analysable(self) -> bool:
        return not self.reasons and bool(self.commands)

    def definite(self) -> tuple[SimpleCommand, ...]:
        """The commands whose program is known (deny rules may apply to these)."""
        return tuple(c for c in self.commands if c.program is not None)


@dataclass(frozen=True, slots=True)
class Risk:
    """A detected risk: its code (policy rules match on it) and one line for a reviewer."""

    code: RiskCode
    text: str

    def line(self) -> str:
        return f"{self.code}: {self.text}"


class Analysis:
    """A parsed command and its risks (found when first asked for), as the policy sees one
    event's command."""

    __slots__ = ("_detect", "_risks", "cwd", "parsed")

    def __init__(
        self,
        parsed: ParsedCommand,
        cwd: str | None,
        detect: Callable[[ParsedCommand, str | None], tuple[Risk, ...]],
    ) -> None:
        self.parsed = parsed
        self.cwd = cwd
        self._detect = detect
        self._risks: tuple[Risk, ...] | None = None

    @property
    def risks(self) -> tuple[Risk, ...]:
        if self._risks is None:
            self._risks = self._detect(self.parsed, self.cwd)
        return self._risks

    @property
    def risk_codes(self) -> frozenset[str]:
        return frozenset(r.code for r in self.risks)
