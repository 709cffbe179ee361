"""Word nodes of the syntax tree → `Word` values: quotes and escapes removed, ANSI-C strings
decoded, words split only by line continuations joined (tree-sitter-bash splits
`r\\<newline>m` in two), brace expansion applied (`words.py`)."""

from __future__ import annotations

import re

import tree_sitter

from approvals._internal.shell.model import Word
from approvals._internal.shell.words import (
    Part,
    ansi_c,
    brace_expand,
    double_quoted,
    has_glob,
    text_of,
    unquoted_parts,
)

_CONTINUATIONS = re.compile(r"(?:\\\r?\n)+")
#: Nodes whose value is only known when the command runs.
DYNAMIC = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
    }
)


class TooDeep(Exception):
    """A word nests deeper than the reader follows."""


class WordReader:
    """Reads word nodes of one parsed source."""

    def __init__(self, source: bytes, max_depth: int) -> None:
        self.source = source
        self.max_depth = max_depth
        #: An unquoted word held a line break: tree-sitter-bash read `ls \<newline>\\rm
        #: -rf /` as `ls` with the argument `<newline>rm`, where bash ends the command at the
        #: line break and runs `rm`. The parse cannot be trusted (`parse_script` says so).
        self.misread = False

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def words(self, nodes: list[tree_sitter.Node]) -> list[Word]:
        """Word nodes → values; nodes split only by line continuations are one word."""
        groups: list[tuple[list[Part], bool]] = []
        end = -1
        for node in nodes:
            parts, static = self.parts(node, 0)
            gap = self.source[end : node.start_byte] if end >= 0 else b" "
            if groups and (not gap or _CONTINUATIONS.fullmatch(gap.decode("utf-8", "replace"))):
                previous, was_static = groups[-1]
                groups[-1] = (previous + parts, was_static and static)
            else:
                groups.append((parts, static))
            end = node.end_byte
        out: list[Word] = []
        for parts, static in groups:
            for expanded in brace_expand(parts) if static else [parts]:
                out.append(Word(text_of(expanded), static=static, glob=has_glob(expanded)))
        return out

    def parts(self, node: tree_sitter.Node, depth: int) -> tuple[list[Part], bool]:
        if depth > self.max_depth:
            raise TooDeep
        kind = node.type
        if kind in ("word", "number"):
            text = self.text(node)
            if "\n" in text and "\n" in _CONTINUATIONS.sub("", text):
                self.misread = True
            return unquoted_parts(text), True
        if kind == "raw_string":
            return [(self.text(node)[1:-1], False)], True
        if kind == "ansi_c_string":
            return [(ansi_c(self.text(node)[2:-1]), False)], True
        if kind in ("string", "translated_string"):
            return self.string(node, depth)
        if kind in DYNAMIC:
            return [(self.text(node), False)], False
        if kind == "variable_assignment":
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            head: list[Part] = [((self.text(name) if name is not None else "") + "=", False)]
            if value is None:
                return head, True
            sub, sub_static = self.parts(value, depth + 1)
            return head + sub, sub_static
        if kind == "concatenation":
            parts: list[Part] = []
            static = True
            for child in node.children:
                sub, sub_static = self.parts(child, depth + 1)
                parts.extend(sub)
                static = static and sub_static
            return parts, static
        if not node.is_named:
            return [(self.text(node), True)], True
        return [(self.text(node), True)], True

    def string(self, node: tree_sitter.Node, depth: int) -> tuple[list[Part], bool]:
        text_start = node.start_byte
        raw = self.text(node)
        start = text_start + (raw.index('"') + 1 if '"' in raw else 0)
        stop = node.end_byte - 1 if raw.endswith('"') else node.end_byte
        parts: list[Part] = []
        static = True
        cursor = start
        for child in node.named_children:
            if child.start_byte > cursor:
                gap = self.source[cursor : child.start_byte].decode("utf-8", "surrogatepass")
                parts.append((double_quoted(gap), False))
            if child.type == "string_content":
                parts.append((double_quoted(self.text(child)), False))
            else:
                sub, sub_static = self.parts(child, depth + 1)
                parts.extend((t, False) for t, _ in sub)
                static = static and sub_static
            cursor = max(cursor, child.end_byte)
        if stop > cursor:
            gap = self.source[cursor:stop].decode("utf-8", "surrogatepass")
            parts.append((double_quoted(gap), False))
        return parts, static
