"""The shell grammar: a command line → the raw simple commands in it (tree-sitter-bash).

Every command of pipelines and lists, subshells and groups, `if`/`for`/`while`/`case`
bodies, function bodies, `$(…)` and backticks, process substitutions, here-document
bodies and assignments is found by one iterative walk of the syntax tree, each with how
its input is fed (a pipe, a here-document) and the redirections around it. Words are read
into their values (`words.py`). Bounded: the text is capped (`MAX_BYTES`), tree-sitter's
parse has a CPU budget, the walk a node budget and a depth cap; past any of them the
command gets a problem (unanalysable), never an exception.
"""

from __future__ import annotations

import gc
import re
import threading
import time
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_bash

from approvals._internal.shell.model import Redirect, Stdin, Word
from approvals._internal.shell.word_nodes import DYNAMIC, TooDeep, WordReader
from approvals._internal.shell.words import BraceLimit

#: Longest command line analysed (UTF-8 bytes); longer ones are unanalysable. tree-sitter's
#: error recovery does work proportional to the text between two checks of the budget
#: (about 3 ms at 16 KB, 24 ms at 100 KB on `)(;;&&|| …`), so the cap bounds the overshoot.
MAX_BYTES = 32 * 1024
#: CPU time tree-sitter may spend on one command line (all its nested `sh -c` included).
#: Everyday commands take 20-50 µs; tree-sitter-bash is quadratic on a few shapes
#: (`a | a | …`: 30 KB ≈ 1 s), which this cuts short.
PARSE_BUDGET_SECONDS = 0.005
#: Syntax nodes the walk visits for one command line (all nested parses included; words'
#: leaves are not visited); about 5 µs of CPU each.
MAX_NODES = 3_000
#: Deepest nesting of syntax nodes followed.
MAX_DEPTH = 200
#: Simple commands kept for one command line (about 30 µs of CPU each).
MAX_COMMANDS = 200

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_LOCAL = threading.local()
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
#: Nodes that hold no command anywhere below them: the walk does not visit them.
_LEAVES = frozenset(
    {"word", "number", "raw_string", "ansi_c_string", "string_content", "variable_name",
     "special_variable_name", "file_descriptor", "heredoc_start", "heredoc_end", "comment",
     "test_operator", "extglob_pattern", "regex", "heredoc_content"}
)  # fmt: skip


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


class Budget:
    """What one command line may still cost: parse CPU time, nodes, nesting of `sh -c`."""

    def __init__(self) -> None:
        self.parse_seconds = PARSE_BUDGET_SECONDS
        self.nodes = MAX_NODES
        self.commands = MAX_COMMANDS
        self.spent_nodes = 0


@dataclass
class RawCommand:
    """A simple command as written: its words (values), assignments, redirections, input."""

    words: list[Word]
    source: str
    assignments: list[tuple[str, Word]] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    context: tuple[str, ...] = ()
    stdin: Stdin | None = None
    stdin_text: str | None = None
    problem: str | None = None


@dataclass
class Script:
    """What one walk found."""

    commands: list[RawCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    assignments: list[tuple[str, Word]] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


@dataclass(frozen=True, slots=True)
class _Ctx:
    context: tuple[str, ...] = ()
    stdin: Stdin | None = None
    stdin_text: str | None = None
    redirects: tuple[Redirect, ...] = ()
    depth: int = 0


def parse_script(text: str, budget: Budget, context: tuple[str, ...] = ()) -> Script:
    """The raw simple commands of `text`; problems say what could not be followed."""
    script = Script()
    source = text.encode("utf-8", "surrogatepass")
    if len(source) > MAX_BYTES:
        script.problem(f"longer than {MAX_BYTES // 1024} KiB: too large to analyse")
        return script
    tree = _parse(_without_astral(source), budget)
    if tree is None:
        script.problem("too complex to parse within its time budget")
        return script
    root = tree.root_node
    if root.has_error:
        script.problem(f"does not parse as a shell command ({_error_at(root, source)})")
    walk = _Walk(source, script, budget)
    walk.run(root, _Ctx(context=context))
    if walk.reader.misread:
        script.problem("a word runs across a line break: the parser misread the command")
    return script


#: A character past U+FFFF: four bytes of UTF-8.
_ASTRAL = re.compile(rb"[\xf0-\xf7][\x80-\xbf]{3}")


def _without_astral(source: bytes) -> bytes:
    """`source` with each character past U+FFFF written `++++` (the same four bytes long, so
    every node's offsets still slice the real text): tree-sitter-bash 0.25 reads out of
    bounds, and can crash the process, on such a character after a `{` (upstream
    tree-sitter-bash#337). To the shell both are plain word characters; `+` joins no name."""
    if max(source, default=0) < 0xF0:
        return source
    return _ASTRAL.sub(b"++++", source)


def _parse(source: bytes, budget: Budget) -> tree_sitter.Tree | None:
    if budget.parse_seconds <= 0:
        return None
    parser = _parser()

    def read(offset: int, _point: tuple[int, int]) -> bytes:
        return source[offset : offset + 65536]

    def progress(_offset: int, _has_error: bool) -> bool:
        return time.thread_time() > deadline  # True cancels the parse

    # The budget measures tree-sitter's work: a collection of the cyclic GC, which the
    # callbacks' allocations may set off, would charge this command for the whole heap (and
    # on a busy process make an everyday command unanalysable).
    collecting = gc.isenabled()
    gc.disable()
    start = time.thread_time()
    deadline = start + budget.parse_seconds
    try:
        return parser.parse(read, progress_callback=progress)
    except ValueError:  # cancelled by `progress`
        parser.reset()  # else the next parse would resume this one
        return None
    finally:
        budget.parse_seconds -= time.thread_time() - start
        if collecting:
            gc.enable()


def _error_at(root: tree_sitter.Node, source: bytes) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            line = node.start_point[0] + 1
            near = source[node.start_byte : node.start_byte + 20].decode("utf-8", "replace")
            what = "missing " + node.type if node.is_missing else f"near {near!r}"
            return f"line {line}: {what}"
        if node.has_error:
            stack.extend(reversed(node.children))
    return "syntax error"


class _Walk:
    def __init__(self, source: bytes, script: Script, budget: Budget) -> None:
        self.source = source
        self.script = script
        self.budget = budget
        self.reader = WordReader(source, MAX_DEPTH)

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def run(self, root: tree_sitter.Node, ctx: _Ctx) -> None:
        stack: list[tuple[tree_sitter.Node, _Ctx]] = [(root, ctx)]
        while stack:
            node, ctx = stack.pop()
            if self.budget.nodes <= 0:
                self.script.problem(f"more than {MAX_NODES} syntax nodes: too large to analyse")
                return
            self.budget.nodes -= 1
            self.budget.spent_nodes += 1
            if ctx.depth > MAX_DEPTH:
                self.script.problem(f"nested more than {MAX_DEPTH} levels deep")
                continue
            children = self.visit(node, ctx)
            stack.extend(c for c in reversed(children) if c[0].type not in _LEAVES)

    def visit(self, node: tree_sitter.Node, ctx: _Ctx) -> list[tuple[tree_sitter.Node, _Ctx]]:
        kind = node.type
        deeper = _Ctx(ctx.context, ctx.stdin, ctx.stdin_text, ctx.redirects, ctx.depth + 1)
        if kind == "comment":
            return []
        if kind in ("command", "declaration_command", "unset_command", "test_command"):
            self.command(node, ctx)
            return [(c, _Ctx(ctx.context, depth=ctx.depth + 1)) for c in node.named_children]
        if kind == "pipeline":
            out, first = [], True
            for child in node.named_children:
                if first:
                    out.append((child, deeper))
                    first = False
                else:
                    out.append(
                        (child, _Ctx(ctx.context, "pipe", None, ctx.redirects, deeper.depth))
                    )
            return out
        if kind == "redirected_statement":
            return self.redirected(node, ctx)
        if kind in ("command_substitution", "process_substitution"):
            text = self.text(node)
            label = "`…`" if text.startswith("`") else text[:2] + "…)"
            inner = _Ctx((*ctx.context, label), depth=ctx.depth + 1)
            return [(c, inner) for c in node.named_children]
        if kind == "function_definition":
            name = node.child_by_field_name("name")
            fname = self.text(name) if name is not None else "?"
            self.script.functions.append(fname)
            inner = _Ctx((*ctx.context, f"function {fname}"), depth=ctx.depth + 1)
            return [(c, inner) for c in node.named_children if c != name]
        if kind in ("variable_assignment", "variable_assignments") and self.statement(node):
            for assignment in [node] if kind == "variable_assignment" else node.named_children:
                if assignment.type == "variable_assignment":
                    self.script.assignments.append(self.assignment(assignment, ctx))
            return [(c, deeper) for c in node.named_children]
        return [(c, deeper) for c in node.named_children]  # ERROR nodes too: what they hold

    def statement(self, node: tree_sitter.Node) -> bool:
        """An assignment standing alone (not part of a command or declaration)."""
        parent = node.parent
        return parent is None or parent.type not in (
            "command",
            "declaration_command",
            "variable_assignments",
            "for_statement",
            "c_style_for_statement",
        )

    def redirected(self, node: tree_sitter.Node, ctx: _Ctx) -> list[tuple[tree_sitter.Node, _Ctx]]:
        redirects = list(ctx.redirects)
        stdin, stdin_text = ctx.stdin, ctx.stdin_text
        out: list[tuple[tree_sitter.Node, _Ctx]] = []
        body = node.child_by_field_name("body")
        for child in node.named_children:
            if child.type in _REDIRECTS:
                redirect, fed, fed_text, inner = self.redirect(child, ctx)
                if redirect is not None:
                    redirects.append(redirect)
                if fed is not None:
                    stdin, stdin_text = fed, fed_text
                out.extend(inner)
        depth = ctx.depth + 1
        inner_ctx = _Ctx(ctx.context, stdin, stdin_text, tuple(redirects), depth)
        bodies = [c for c in node.named_children if c.type not in _REDIRECTS]
        if body is not None and body not in bodies:
            bodies.insert(0, body)
        if not bodies and self.budget.commands > 0:
            # Redirections alone (`> f`, `;<f`): bash runs them as the null command `:`,
            # which creates or truncates the files written.
            self.budget.commands -= 1
            self.script.commands.append(
                RawCommand(
                    words=[Word(":")],
                    source=self.text(node),
                    context=ctx.context,
                    stdin=stdin,
                    stdin_text=stdin_text,
                    redirects=redirects,
                )
            )
        return [(b, inner_ctx) for b in bodies] + out

    def redirect(
        self, node: tree_sitter.Node, ctx: _Ctx
    ) -> tuple[Redirect | None, Stdin | None, str | None, list[tuple[tree_sitter.Node, _Ctx]]]:
        """A redirection node: the Redirect, how it feeds stdin, and nodes still to walk."""
        depth = ctx.depth + 1
        walk: list[tuple[tree_sitter.Node, _Ctx]] = []
        fd: int | None = None
        op = ""
        target: Word | None = None
        if node.type == "heredoc_redirect":
            body_text: str | None = None
            body_static = True
            piped = False
            for child in node.children:
                if child.type == "heredoc_body":
                    body_text = self.text(child)
                    body_static = not any(c.type in DYNAMIC for c in child.named_children)
                    walk.append((child, _Ctx(ctx.context, depth=depth)))
                elif child.type == "|" or child.type == "|&":
                    piped = True
                elif child.is_named and child.type not in ("heredoc_start", "heredoc_end"):
                    piped = piped or "|" in self.text(child)[:2]
                    fed: Stdin | None = "pipe" if piped else None
                    walk.append((child, _Ctx(ctx.context, fed, None, (), depth)))
            body = Word(body_text or "", static=body_static)
            return Redirect("<<", body), "heredoc", body_text, walk
        if node.type == "herestring_redirect":
            value = next((c for c in node.named_children), None)
            text = None
            word: Word | None = None
            if value is not None:
                words = self.reader.words([value])
                word = words[0] if len(words) == 1 else Word(self.text(value), static=False)
                text = word.text if word.static else None
                walk.append((value, _Ctx(ctx.context, depth=depth)))
            return Redirect("<<<", word), "herestring", text, walk
        for child in node.children:
            if child.type == "file_descriptor":
                digits = self.text(child)
                fd = int(digits) if digits.isdigit() and len(digits) < 6 else None
            elif not child.is_named:
                op = op or child.type
            else:
                words = self.reader.words([child])
                target = words[0] if words else None
                walk.append((child, _Ctx(ctx.context, depth=depth)))
        redirect = Redirect(op or ">", target, fd)
        if redirect.reads_file and fd in (None, 0):
            return redirect, "file", None, walk
        return redirect, None, None, walk

    def assignment(self, node: tree_sitter.Node, ctx: _Ctx) -> tuple[str, Word]:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        value_node = node.child_by_field_name("value")
        if value_node is None:
            return name, Word("")
        words = self.reader.words([value_node])
        return name, words[0] if len(words) == 1 else Word(self.text(value_node), static=False)

    def command(self, node: tree_sitter.Node, ctx: _Ctx) -> None:
        if self.budget.commands <= 0:
            self.script.problem(f"more than {MAX_COMMANDS} simple commands: too large to analyse")
            return
        self.budget.commands -= 1
        raw = RawCommand(
            words=[],
            source=self.text(node),
            context=ctx.context,
            stdin=ctx.stdin,
            stdin_text=ctx.stdin_text,
            redirects=list(ctx.redirects),
        )
        kind = node.type
        word_nodes: list[tree_sitter.Node] = []
        try:
            if kind == "test_command":
                bracket = self.text(node).lstrip()[:2]
                name = "[[" if bracket == "[[" else "["
                raw.words = [Word(name), *(Word(t) for t in self.text(node).split()[1:-1])]
                self.script.commands.append(raw)
                return
            if kind in ("declaration_command", "unset_command"):
                keyword = next((c for c in node.children if not c.is_named), None)
                raw.words.append(Word(self.text(keyword) if keyword is not None else "declare"))
            for child in node.children:
                if not child.is_named:
                    continue
                if child.type == "variable_assignment" and not word_nodes and kind == "command":
                    raw.assignments.append(self.assignment(child, ctx))
                elif child.type in _REDIRECTS:
                    redirect, fed, fed_text, _ = self.redirect(child, ctx)
                    if redirect is not None:
                        raw.redirects.append(redirect)
                    if fed is not None:
                        raw.stdin, raw.stdin_text = fed, fed_text
                elif child.type == "command_name":
                    word_nodes.extend(child.named_children or [child])
                elif child.type == "comment":
                    continue
                else:
                    word_nodes.append(child)
            raw.words.extend(self.reader.words(word_nodes))
        except BraceLimit:
            raw.problem = "a brace expansion makes too many words"
        except TooDeep:
            raw.problem = f"words nested more than {MAX_DEPTH} levels deep"
        self.script.commands.append(raw)
