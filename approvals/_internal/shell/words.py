"""Shell word values: quote and escape removal, ANSI-C strings, brace expansion, quoting back.

A word is read as *parts*: `(text, active)` pairs, where `active` text is unquoted and
unescaped, so `{`, `,`, `}`, `*`, `?`, `[` and a leading `~` keep their meaning there.
Pure string work, bounded: brace expansion stops at `MAX_BRACE_WORDS` words.
"""

from __future__ import annotations

import itertools
import re
import shlex

Part = tuple[str, bool]

#: Most words one brace expansion may produce before the command counts as unanalysable.
MAX_BRACE_WORDS = 256
#: Longest word brace expansion is tried on (longer words with active braces: unanalysable).
MAX_BRACE_INPUT = 4096
#: Most characters one brace expansion may produce.
MAX_BRACE_CHARS = 64 * 1024

_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})"
    r"|([0-7]{1,3})|c(.))",
    re.DOTALL,
)


class BraceLimit(Exception):
    """Brace expansion would pass `MAX_BRACE_WORDS` words (or the word is too long)."""


def ansi_c(body: str) -> str:
    """The value of `$'…'` (without `$'` and `'`): C escapes decoded as bash does."""

    def one(m: re.Match[str]) -> str:
        simple, hex2, u4, u8, octal, ctrl = m.groups()
        if simple is not None:
            return _ANSI_SIMPLE[simple]
        if hex2 is not None:
            return chr(int(hex2, 16))
        if u4 is not None or u8 is not None:
            code = int(u4 or u8, 16)
            return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"
        if octal is not None:
            return chr(int(octal, 8) & 0xFF)
        return chr(ord(ctrl) & 0x1F)

    return _ANSI.sub(one, body)


#: One escape: a line continuation (nothing) or a backslash and the character it keeps.
_ESCAPE = re.compile(r"\\\n|\\(.)", re.DOTALL)
#: Characters whose meaning depends on being unquoted (brace and glob expansion, tilde).
_SPECIAL = re.compile(r"[{}*?\[~,]")


def unquoted_parts(text: str) -> list[Part]:
    """An unquoted word's text: `\\x` is a literal x, `\\<newline>` is nothing."""
    if "\\" not in text:
        return [(text, True)]
    if not _SPECIAL.search(text):  # nothing an escape could switch off: one part, fast
        return [(_ESCAPE.sub(r"\1", text), True)]
    parts: list[Part] = []
    i, n = 0, len(text)
    run: list[str] = []
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            if run:
                parts.append(("".join(run), True))
                run = []
            if text[i + 1] != "\n":
                parts.append((text[i + 1], False))
            i += 2
            continue
        run.append(ch)
        i += 1
    if run:
        parts.append(("".join(run), True))
    return parts


def double_quoted(text: str) -> str:
    """Text inside `"…"` (between expansions): `\\$ \\` \\" \\\\` escape, `\\<newline>` goes."""
    if "\\" not in text:
        return text
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def has_glob(parts: list[Part]) -> bool:
    return any(active and any(c in text for c in "*?[") for text, active in parts)


def _chars(parts: list[Part]) -> list[tuple[str, bool]]:
    return [(c, active) for text, active in parts for c in text]


def _join(chars: list[tuple[str, bool]]) -> list[Part]:
    return [(c, active) for c, active in chars]


def _sequence(body: str) -> list[str] | None:
    """`1..5`, `a..e`, `01..10..2` → the words; None when it is not a sequence."""
    m = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?", body)
    if m:
        first, last = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        count = abs(last - first) // step + 1
        if count > MAX_BRACE_WORDS:
            raise BraceLimit
        width = max(len(m.group(1)), len(m.group(2)))
        pad = m.group(1).lstrip("-").startswith("0") or m.group(2).lstrip("-").startswith("0")
        direction = 1 if last >= first else -1
        values = [first + direction * step * i for i in range(count)]
        return [str(v).zfill(width) if pad else str(v) for v in values]
    m = re.fullmatch(r"([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?", body)
    if m:
        first, last = ord(m.group(1)), ord(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        direction = 1 if last >= first else -1
        return [chr(c) for c in range(first, last + direction, direction * step)]
    return None


def _first_brace(chars: list[tuple[str, bool]]) -> tuple[int, int, list[int]] | None:
    """The first active `{…}` that expands: (open, close, top-level comma positions)."""
    n = len(chars)
    for start in range(n):
        if chars[start] != ("{", True):
            continue
        depth = 0
        commas: list[int] = []
        for j in range(start + 1, n):
            c, active = chars[j]
            if not active:
                continue
            if c == "{":
                depth += 1
            elif c == "}" and depth:
                depth -= 1
            elif c == "}":
                body = "".join(ch for ch, _ in chars[start + 1 : j])
                if commas or _sequence_safe(body):
                    return start, j, commas
                break
            elif c == "," and depth == 0:
                commas.append(j)
    return None


def _sequence_safe(body: str) -> bool:
    try:
        return _sequence(body) is not None
    except BraceLimit:
        return True


def brace_expand(parts: list[Part]) -> list[list[Part]]:
    """Brace expansion as bash does it (`-{r,f}` → `-r`, `-f`; `a{1..3}`); `BraceLimit` past
    `MAX_BRACE_WORDS` words. Quoted or escaped braces and commas do not count."""
    if not any(active and "{" in text for text, active in parts):
        return [parts]
    if sum(len(t) for t, _ in parts) > MAX_BRACE_INPUT:
        raise BraceLimit
    done: list[list[Part]] = []
    produced = 0
    todo = [_chars(parts)]
    while todo:
        chars = todo.pop()
        found = _first_brace(chars)
        if found is None:
            done.append(_join(chars))
            produced += len(chars)
            if len(done) > MAX_BRACE_WORDS or produced > MAX_BRACE_CHARS:
                raise BraceLimit
            continue
        start, end, commas = found
        prefix, suffix = chars[:start], chars[end + 1 :]
        if commas:
            bounds = [start, *commas, end]
            alternatives = [chars[a + 1 : b] for a, b in itertools.pairwise(bounds)]
        else:
            body = "".join(c for c, _ in chars[start + 1 : end])
            alternatives = [[(c, False) for c in v] for v in _sequence(body) or []]
        if len(done) + len(todo) + len(alternatives) > MAX_BRACE_WORDS:
            raise BraceLimit
        todo.extend(prefix + alt + suffix for alt in reversed(alternatives))
    return done


def text_of(parts: list[Part]) -> str:
    return "".join(t for t, _ in parts)


_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def quote(word: str) -> str:
    """A word as a reviewer can paste it back into a shell."""
    if word == "{}" or _SAFE.fullmatch(word):
        return word
    return shlex.quote(word)


def join(argv: tuple[str, ...] | list[str]) -> str:
    """An argv as a command line that runs it (a program with `=` in it quoted, so it is not
    read as an assignment)."""
    words = [quote(w) for w in argv]
    if words and "=" in argv[0] and words[0] == argv[0]:
        words[0] = "'" + argv[0] + "'"
    return " ".join(words)
