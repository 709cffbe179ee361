"""Normalising simple commands: wrappers unwrapped (`wrappers.py`), shells' `-c` strings and
other strings that run parsed again, the program reduced to its basename, options read
(`options.py`); and `analyse`, the entry point.

`CI=1 timeout 5 env rm -fr build` is `rm -f -r build` (via `timeout 5`, `env`, with
`CI=1`); `bash -c 'git push -f'` is `git push --force` (in `bash -c`); `find . -exec rm
{} +` is `find …` and `rm {}` (in `find -exec`); `xargs rm` is `rm` (in `xargs`). What
cannot be followed — `eval`, a program in a variable, a shell fed by a pipe, `source`,
an unknown wrapper option — gets a problem, so the command is unanalysable.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from approvals._internal.shell.model import ParsedCommand, SimpleCommand, Word
from approvals._internal.shell.options import read
from approvals._internal.shell.parse import Budget, RawCommand, Script, parse_script
from approvals._internal.shell.tables import (
    CODE_VARIABLES,
    OPAQUE_BUILTINS,
    SHELL_VALUE_OPTIONS,
    SHELLS,
    WRAPPERS,
)
from approvals._internal.shell.wrappers import unwrap

log = logging.getLogger(__name__)

#: Deepest nesting of strings parsed again (`bash -c "sh -c '…'"`).
MAX_NESTING = 8
#: Most wrappers unwrapped around one command.
MAX_WRAPPERS = 32
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FD_EXEC = frozenset({"-x", "--exec", "-X", "--exec-batch"})
#: Builtins that set variables (`export PATH=…` is judged like `PATH=…`).
DECLARATIONS = frozenset({"export", "declare", "typeset", "local", "readonly"})
#: Pager/editor variables set to one of these run nothing new.
_HARMLESS_CODE_VALUES = frozenset({"", "cat", "less", "more", "true", ":", "less -R", "less -FRX"})


def analyse(command: str | Sequence[str]) -> ParsedCommand:
    """A command line (a string, or an argv list as Codex sends it) as simple commands.

    Never raises: anything unexpected is a problem on the result (unanalysable)."""
    budget = Budget()
    source = command if isinstance(command, str) else shlex.join(command)
    try:
        if isinstance(command, str):
            script = parse_script(command, budget)
        else:
            script = Script(commands=[RawCommand([Word(w) for w in command], source)])
        normaliser = _Normaliser(budget)
        commands, problems = normaliser.script(script, depth=0)
    except Exception as e:  # fail closed: an analyser bug makes the command unanalysable
        log.exception("shell analysis failed")
        return ParsedCommand(source, problems=(f"could not be analysed ({type(e).__name__})",))
    if not commands and not problems:
        problems.append("no command to run")
    return ParsedCommand(
        source=source,
        commands=tuple(commands),
        problems=tuple(problems),
        assignments=tuple(f"{n}={w.text}" for n, w in script.assignments),
        functions=tuple(dict.fromkeys(normaliser.functions)),
        nodes=budget.spent_nodes,
    )


def basename(text: str) -> str:
    return text.rstrip("/").rsplit("/", 1)[-1] or text


def code_variable(name: str, value: Word) -> str | None:
    """Why setting `name=value` makes later programs unpredictable (None: it does not)."""
    if name not in CODE_VARIABLES:
        return None
    if name.endswith(("PAGER", "EDITOR")) and value.static and value.text in _HARMLESS_CODE_VALUES:
        return None
    return f"sets {name}, which changes what later commands run"


@dataclass
class _State:
    """One raw command on its way to a SimpleCommand: what was unwrapped so far."""

    raw: RawCommand
    depth: int
    wrappers: list[str] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)
    context: tuple[str, ...] = ()
    dynamic: bool = False
    problem: str | None = None
    #: Commands found inside it (a `-c` string, `find -exec`), listed after it.
    inner: list[SimpleCommand] = field(default_factory=list)


class _Normaliser:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.functions: list[str] = []

    def script(self, script: Script, depth: int) -> tuple[list[SimpleCommand], list[str]]:
        problems = list(script.problems)
        self.functions.extend(script.functions)
        for name, value in script.assignments:
            why = code_variable(name, value)
            if why:
                problems.append(why)
        commands: list[SimpleCommand] = []
        for raw in script.commands:
            commands.extend(self.command(raw, depth))
        return commands, problems

    def nested(self, text: str, label: str, state: _State) -> str | None:
        """Parse a string a command runs (`sh -c`, eval, trap, watch …) into `state.inner`;
        the problems found in it, joined (None: none)."""
        if state.depth >= MAX_NESTING:
            return f"strings nested more than {MAX_NESTING} levels deep"
        script = parse_script(text, self.budget, (*state.context, label))
        commands, problems = self.script(script, state.depth + 1)
        state.inner.extend(_inherit(state, commands))
        return "; ".join(problems) if problems else None

    def emit(
        self,
        state: _State,
        program: str | None,
        args: list[Word],
        problem: str | None = None,
        path: str | None = None,
    ) -> list[SimpleCommand]:
        """The SimpleCommand for `program args…`, followed by the commands found inside."""
        raw = state.raw
        problem = problem or state.problem
        common = {
            "source": raw.source,
            "wrappers": tuple(state.wrappers),
            "assignments": tuple(state.assignments),
            "redirects": tuple(raw.redirects),
            "context": state.context,
            "stdin": raw.stdin,
            "stdin_text": raw.stdin_text,
            "words": tuple(args),
        }
        if program is None:
            command = SimpleCommand(
                program=None,
                args=tuple(w.text for w in args),
                problem=problem or "the program is unknown",
                dynamic=True,
                **common,  # type: ignore[arg-type]
            )
        else:
            options = read(program, args)
            command = SimpleCommand(
                program=program,
                args=options.args,
                flags=options.flags,
                subcommand=options.subcommand,
                positionals=options.positionals,
                dynamic=state.dynamic or any(not w.static for w in args),
                problem=problem,
                calls_function=program in self.functions,
                path=path,
                **common,  # type: ignore[arg-type]
            )
        return [command, *state.inner]

    def command(self, raw: RawCommand, depth: int) -> list[SimpleCommand]:
        state = _State(raw, depth, context=raw.context, problem=raw.problem)
        state.assignments = [f"{n}={v.text}" for n, v in raw.assignments]
        for name, value in raw.assignments:
            state.problem = state.problem or code_variable(name, value)
        words = list(raw.words)
        if not words:
            return self.emit(state, ":", [])  # only redirections: `> file` is `: > file`
        for _ in range(MAX_WRAPPERS):
            first = words[0]
            if not first.static:
                return self.emit(state, None, words, "the program is only known when it runs")
            if first.glob:
                return self.emit(state, None, words, "the program name is a file pattern")
            path = first.text if "/" in first.text else None
            name = basename(first.text).lower()
            rest = words[1:]
            found = self.special(state, name, rest, path)
            if found is not None:
                return found
            if name in ("python", "python3", "py") or name.startswith("python3."):
                if len(rest) >= 2 and rest[0].text == "-m" and rest[1].text in ("pip", "twine"):
                    state.wrappers.append(f"{name} -m")
                    words = rest[1:]
                    continue
            if name in ("busybox", "toybox") and rest and rest[0].static:
                state.wrappers.append(name)
                words = rest
                continue
            spec = WRAPPERS.get(name)
            if spec is None or (spec.subcommand and (not rest or rest[0].text != spec.subcommand)):
                return self.emit(state, name, rest, path=path)
            if name == "command" and any(w.text in ("-v", "-V") for w in rest[:2]):
                return self.emit(state, name, rest, path=path)
            unwrapped = unwrap(name, spec, rest)
            if isinstance(unwrapped, str):
                return self.emit(state, name, rest, unwrapped, path)
            state.wrappers.append(unwrapped.shown)
            state.assignments.extend(unwrapped.assignments)
            for assignment in unwrapped.assignments:
                variable, _, text = assignment.partition("=")
                state.problem = state.problem or code_variable(variable, Word(text))
            if name == "xargs":
                state.dynamic = True
                state.context = (*state.context, "xargs")
            if unwrapped.string is not None:
                return self.run_string(state, name, unwrapped.string, f"{name} -c", rest)
            command = unwrapped.command
            if not command:
                if name == "xargs":
                    command = [Word("echo")]
                elif name == "chroot":
                    return self.emit(state, name, [], "starts an interactive shell")
                else:
                    state.wrappers.pop()
                    return self.emit(state, name, rest, path=path)
            if name == "watch" and not unwrapped.seen & {"-x", "--exec"}:
                if not all(w.static for w in command):
                    return self.emit(state, None, [], "watch runs a string only known when it runs")
                joined = Word(" ".join(w.text for w in command))
                return self.run_string(state, name, joined, "watch", rest)
            words = command
        return self.emit(state, None, [], "wrapped too many times")

    def run_string(
        self, state: _State, name: str, string: Word, label: str, rest: list[Word]
    ) -> list[SimpleCommand]:
        """A wrapper that runs a shell string: the commands in it (the wrapper itself is
        listed only when the string cannot be followed)."""
        if not string.static:
            return self.emit(state, None, [], f"{name} runs a string only known when it runs")
        why = self.nested(string.text, label, state)
        if why:
            return self.emit(state, name, rest, why)
        return state.inner

    def special(
        self, state: _State, name: str, rest: list[Word], path: str | None
    ) -> list[SimpleCommand] | None:
        """Programs that run strings or other commands in their own way; None for others."""
        if name in OPAQUE_BUILTINS:
            return self.emit(state, name, rest, OPAQUE_BUILTINS[name], path)
        if name in DECLARATIONS:
            for word in rest:
                variable, eq, value = word.text.partition("=")
                why = code_variable(variable, Word(value, word.static)) if eq else None
                if why:
                    return self.emit(state, name, rest, why, path)
            return None
        if name == "eval":
            if not rest:
                return self.emit(state, name, rest, path=path)
            if not all(w.static for w in rest):
                return self.emit(state, name, rest, "eval runs a string only known when it runs")
            why = self.nested(" ".join(w.text for w in rest), "eval", state)
            problem = "eval runs a string as a command" + (f"; {why}" if why else "")
            return self.emit(state, name, rest, problem, path)
        if name == "trap" and rest and rest[0].static and not rest[0].text.startswith("-"):
            why = self.nested(rest[0].text, "trap", state)
            return self.emit(state, name, rest, why, path)
        if name in SHELLS:
            return self.shell(state, name, rest, path)
        if name in ("find", "fd", "fdfind"):
            self.exec_actions(state, name, rest)
            return self.emit(state, name, rest, path=path)
        if name == "git":
            self.git_strings(state, rest)
            return self.emit(state, name, rest, path=path)
        return None

    def shell(
        self, state: _State, name: str, rest: list[Word], path: str | None
    ) -> list[SimpleCommand]:
        """`sh -c STRING`, `bash script.sh`, or a shell reading its input."""
        command_mode = reads_stdin = False
        i, n = 0, len(rest)
        while i < n:
            w = rest[i].text
            if w in ("-", "--"):
                i += 1
                break
            if not rest[i].static or w[:1] not in ("-", "+"):
                break
            i += 1
            if w in SHELL_VALUE_OPTIONS:
                i += 1
            elif not w.startswith("--"):
                letters = w[1:]
                command_mode = command_mode or "c" in letters
                reads_stdin = reads_stdin or "s" in letters
                i += sum(1 for c in letters if c in "oO")
        operands = rest[i:]
        if command_mode:
            if not operands:
                return self.emit(state, name, rest, f"{name} -c without a command", path)
            string = operands[0]
            if not string.static:
                dynamic = f"{name} -c runs a string only known when it runs"
                return self.emit(state, name, rest, dynamic, path)
            why = self.nested(string.text, f"{name} -c", state)
            return self.emit(state, name, rest, why, path) if why else state.inner
        if operands and not reads_stdin:
            if not operands[0].static:
                return self.emit(state, name, rest, "runs a script only known when it runs", path)
            return self.emit(state, name, rest, path=path)
        fed = state.raw.stdin
        if fed is None:
            return self.emit(state, name, rest, "starts a shell reading its input", path)
        if state.raw.stdin_text is not None:
            self.nested(state.raw.stdin_text, f"{name} <<", state)
        return self.emit(state, name, rest, f"runs commands read from its input ({fed})", path)

    def exec_actions(self, state: _State, name: str, rest: list[Word]) -> None:
        """The commands `find -exec … ;` and `fd -x …` run, into `state.inner`."""
        actions = _FIND_EXEC if name == "find" else _FD_EXEC
        i = 0
        while i < len(rest):
            w = rest[i].text
            i += 1
            if w not in actions:
                continue
            start = i
            while i < len(rest) and rest[i].text not in (";", "+"):
                i += 1
            argv = rest[start:i]
            i += 1
            if argv:
                raw = RawCommand(argv, state.raw.source, context=(*state.context, f"{name} {w}"))
                for command in _inherit(state, self.command(raw, state.depth + 1)):
                    state.inner.append(replace(command, dynamic=True))

    def git_strings(self, state: _State, rest: list[Word]) -> None:
        """Commands git runs from its arguments: `rebase --exec`, `submodule foreach`,
        `bisect run`, into `state.inner`."""
        texts = [w.text for w in rest]
        if "rebase" in texts:
            for i, w in enumerate(texts):
                value = None
                if w in ("-x", "--exec") and i + 1 < len(texts):
                    value = rest[i + 1]
                elif w.startswith("--exec="):
                    value = Word(w.split("=", 1)[1], rest[i].static)
                if value is not None and value.static:
                    self.nested(value.text, "git rebase --exec", state)
        for parent, sub in (("submodule", "foreach"), ("bisect", "run")):
            if parent not in texts or sub not in texts:
                continue
            tail = rest[texts.index(sub) + 1 :]
            while tail and tail[0].text.startswith("-"):
                tail = tail[1:]
            if not tail:
                continue
            label = f"git {parent} {sub}"
            if sub == "run":
                raw = RawCommand(tail, state.raw.source, context=(*state.context, label))
                state.inner.extend(_inherit(state, self.command(raw, state.depth + 1)))
            elif all(w.static for w in tail):
                self.nested(" ".join(w.text for w in tail), label, state)


def _inherit(state: _State, commands: list[SimpleCommand]) -> list[SimpleCommand]:
    """Commands run by a command (its `-c` string, its `-exec`) run through its wrappers,
    with its assignments, into its redirections."""
    raw = state.raw
    if not (state.wrappers or state.assignments or raw.redirects):
        return commands
    return [
        replace(
            c,
            wrappers=(*state.wrappers, *c.wrappers),
            assignments=(*state.assignments, *c.assignments),
            redirects=(*raw.redirects, *c.redirects),
        )
        for c in commands
    ]
