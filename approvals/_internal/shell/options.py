"""A simple command's options: combined short flags split, spellings made canonical by the
option tables (`tables.py`), option values told from positionals, the subcommand found.

`-rf` is `-r -f`; `rm --recursive` is `rm -r`; `git -C /repo push -f` has subcommand
`push` and flag `--force`; after `--` nothing is an option. Programs without a table are
split letter by letter (their long options kept as written), except the `-name`-style
programs in `NO_SPLIT`. Pure and linear in the number of words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from approvals._internal.shell.model import Word
from approvals._internal.shell.tables import OPTIONS, SUBCOMMAND_ALIASES, OptionTable

#: Programs whose single-dash words are whole options (`find -name`, `go -C`, `gcc -Wall`).
NO_SPLIT = frozenset(
    {"find", "java", "javac", "gcc", "g++", "cc", "clang", "clang++", "go", "ffmpeg", "ffprobe",
     "openssl", "cmake", "convert", "magick", "xcodebuild", "dd", "tcc", "ld", "swiftc", "qemu-img"}
)  # fmt: skip
_NUMBER = re.compile(r"-\d+(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class Options:
    """What `read` made of a command's arguments."""

    args: tuple[str, ...]
    flags: frozenset[str]
    positionals: tuple[str, ...]
    subcommand: str | None


def table_for(program: str, subcommand: str | None = None) -> OptionTable | None:
    """The option table of `program` (for git, of its subcommand when given)."""
    if program == "git" and subcommand is not None:
        return OPTIONS.get(f"git {subcommand}")
    return OPTIONS.get(program)


def canonical(program: str | None, subcommand: str | None, flag: str) -> str:
    """A rule's flag in the spelling `read` gives it (`rm --recursive` → `-r`)."""
    if program is None:
        return flag
    table = table_for(program, subcommand)
    if program == "git" and table is None and subcommand is None:
        table = OPTIONS["git"]
    if table is None:
        return flag
    name = flag.split("=", 1)[0]
    known = table.resolve(name)
    return table.canonical[known] if known else name


def read_words(
    words: list[Word], table: OptionTable | None, split: bool, stop_at_positional: bool = False
) -> tuple[list[str], set[str], list[str], int]:
    """Read options from `words`: (args, flags, positionals, index where reading stopped)."""
    args: list[str] = []
    flags: set[str] = set()
    positionals: list[str] = []
    ended = False
    i = 0
    n = len(words)
    while i < n:
        word = words[i]
        w = word.text
        i += 1
        if ended or not word.static or not w.startswith("-") or w == "-":
            args.append(w)
            positionals.append(w)
            if stop_at_positional and not ended:
                return args, flags, positionals, i
            continue
        if w == "--":
            ended = True
            args.append(w)
            continue
        long_form = w.startswith("--") or (table is not None and table.single_dash_long)
        if table is not None and not long_form and w in table.canonical and len(w) > 2:
            long_form = True  # a multi-letter short option: wget -nc, npm -ws
        if long_form or (not split and table is None):
            name, eq, value = w.partition("=")
            known = table.resolve(name) if table is not None else None
            canon = table.canonical[known] if known and table is not None else name
            if table is not None and table.go_bools and eq and value.lower() in ("false", "0"):
                args.append(f"{canon}={value}")
                continue
            flags.add(canon)
            if eq and (canon.startswith("--") or table is None or table.single_dash_long):
                args.append(f"{canon}={value}")
            elif eq:  # `--output=o` is `-o o`
                args.extend((canon, value))
            elif table is not None and known in table.takes_value and i < n:
                args.extend((canon, words[i].text))
                i += 1
            else:
                args.append(canon)
            continue
        if _NUMBER.fullmatch(w):
            flags.add(w)
            args.append(w)
            continue
        letters = w[1:]
        if word.glob and not long_form:  # `-[r]f` may become `-rf`: every letter may count
            for ch in letters:
                if ch.isalnum():
                    option = "-" + ch
                    flags.add(table.canonical.get(option, option) if table else option)
            args.append(w)
            continue
        if not letters.isalnum() and not (
            table is not None and "-" + letters[0] in table.takes_value
        ):  # `-auto-approve` for a program without a table: one option, not letters
            flags.add(w)
            args.append(w)
            continue
        for j, ch in enumerate(letters):
            option = "-" + ch
            canon = table.canonical.get(option, option) if table is not None else option
            flags.add(canon)
            args.append(canon)
            if table is not None and option in table.takes_value:
                rest = letters[j + 1 :]
                if rest.startswith("="):
                    rest = rest[1:]
                if rest:
                    args.append(rest)
                elif i < n:
                    args.append(words[i].text)
                    i += 1
                break
    return args, flags, positionals, i


def read(program: str, words: list[Word]) -> Options:
    """The options, positionals and subcommand of `program words…`."""
    if program == "git":
        return _read_git(words)
    table = OPTIONS.get(program)
    split = program not in NO_SPLIT
    args, flags, positionals, _ = read_words(words, table, split)
    subcommand = positionals[0] if positionals else None
    aliases = SUBCOMMAND_ALIASES.get(program)
    if subcommand is not None and aliases:
        subcommand = aliases.get(subcommand, subcommand)
    return Options(tuple(args), frozenset(flags), tuple(positionals), subcommand)


def _read_git(words: list[Word]) -> Options:
    """git: its own options, the subcommand, then the subcommand's options."""
    args, flags, positionals, stop = read_words(
        words, OPTIONS["git"], True, stop_at_positional=True
    )
    if not positionals:
        return Options(tuple(args), frozenset(flags), (), None)
    subcommand = positionals[0]
    rest = words[stop:]
    table = OPTIONS.get(f"git {subcommand}")
    sub_args, sub_flags, sub_positionals, _ = read_words(rest, table, True)
    return Options(
        tuple(args + sub_args),
        frozenset(flags | sub_flags),
        (subcommand, *sub_positionals),
        subcommand,
    )
