"""Unwrapping one wrapper: reading its own options, assignments and leading arguments to
find the command it runs (or the shell string it runs), by its entry in `tables.WRAPPERS`.

An option the table does not know makes the command unanalysable: guessing whether it
takes a value would let `sudo -X rm …` hide the program.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from approvals._internal.shell.model import Word
from approvals._internal.shell.tables import Wrapper


@dataclass
class Unwrapped:
    """What a wrapper runs: the command's words, or a shell string (`flock -c 'cmd'`)."""

    #: The wrapper as a reviewer sees it (`timeout 5`, `sudo -u root`).
    shown: str
    command: list[Word] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)
    string: Word | None = None
    #: Options it was given (as written, without values).
    seen: frozenset[str] = frozenset()


def _is_assignment(text: str) -> bool:
    name, eq, _ = text.partition("=")
    return bool(eq) and name.isidentifier()


def _cluster(spec: Wrapper, option: str, words: list[Word], i: int) -> tuple[int, str | None]:
    """Combined short options (`sudo -En`, `sudo -uroot`, `script -qc CMD`): (next index,
    value taken) or (-1, None) when a letter is unknown."""
    for j, ch in enumerate(option[1:]):
        short = "-" + ch
        if short in spec.flag_options:
            continue
        if short in spec.value_options or short in spec.string_options:
            if j + 2 < len(option):
                return i, option[j + 2 :]
            if i >= len(words):
                return -1, None
            return i + 1, words[i].text
        return -1, None
    return i, None


def _string_anywhere(name: str, spec: Wrapper, words: list[Word]) -> Unwrapped | None:
    """`su user -c 'cmd'`, `runuser -l user -c 'cmd'`: the string option may follow the user."""
    for i, word in enumerate(words[:-1]):
        if word.text in spec.string_options:
            shown = " ".join([name, *(w.text for w in words[: i + 2])])
            return Unwrapped(shown, string=words[i + 1])
    return None


def unwrap(name: str, spec: Wrapper, words: list[Word]) -> Unwrapped | str:
    """What `name words…` runs, or why it cannot be followed."""
    if name in ("su", "runuser", "sg"):
        found = _string_anywhere(name, spec, words)
        if found is not None:
            return found
        if name == "su":
            return "starts an interactive shell as another user"
    i = 1 if spec.subcommand else 0
    shown = [name, *([spec.subcommand] if spec.subcommand else [])]
    string: Word | None = None
    seen: set[str] = set()
    n = len(words)
    while i < n:
        word = words[i]
        w = word.text
        if not word.static and w.startswith("-"):
            return f"an option of {name} is only known when it runs"
        if not word.static or not w.startswith("-") or w == "-":
            break
        i += 1
        shown.append(w)
        if w == "--":
            break
        option, eq, attached = w.partition("=")
        if option in spec.string_options:
            if eq:
                string = Word(attached)
            elif i < n:
                string = words[i]
                shown.append(words[i].text)
                i += 1
            else:
                return f"{name} {option} needs a command"
            seen.add(option)
            continue
        if option in spec.value_options:
            seen.add(option)
            if name == "env" and option in ("-S", "--split-string"):
                return _split_string(shown, words, i, attached if eq else None)
            if not eq:
                if i >= n:
                    return f"{name} {option} needs a value"
                shown.append(words[i].text)
                i += 1
            continue
        if option in spec.flag_options:
            seen.add(option)
            continue
        if name == "nice" and option.lstrip("-").isdigit():
            continue
        if not option.startswith("--") and len(option) > 2:
            taken = i
            i, value = _cluster(spec, option, words, i)
            if i < 0:
                return f"unknown option {w} of {name}"
            if value is not None and i > taken:
                shown.append(value)
            letters = {f"-{c}" for c in option[1:]}
            seen.update(letters)
            if value is not None and letters & spec.string_options:
                string = words[i - 1] if i > taken else Word(value)
            continue
        return f"unknown option {w} of {name}"
    if name == "sudo" and seen & {"-e", "--edit"}:
        return "sudo -e edits files as another user"
    if name == "sudo" and seen & {"-l", "--list", "-v", "--validate", "-k", "-K"}:
        return "sudo lists or changes its own state"
    assignments: list[str] = []
    while spec.assignments and i < n and words[i].static and _is_assignment(words[i].text):
        assignments.append(words[i].text)
        i += 1
    positionals = spec.positionals
    if positionals and string is None:
        if i + positionals > n:
            return f"{name} needs {positionals} argument(s) before the command"
        shown.extend(w.text for w in words[i : i + positionals])
        i += positionals
        if i + 1 < n and words[i].text in spec.string_options:  # flock FILE -c 'cmd'
            shown.extend((words[i].text, words[i + 1].text))
            string = words[i + 1]
            i = n
    command = [] if string is not None else words[i:]
    if name == "sg" and string is None and command:  # sg GROUP 'cmd' runs a string
        if not all(w.static for w in command):
            return "sg runs a string only known when it runs"
        string, command = Word(" ".join(w.text for w in command)), []
    return Unwrapped(" ".join(shown), command, assignments, string, frozenset(seen))


def _split_string(
    shown: list[str], words: list[Word], i: int, attached: str | None
) -> Unwrapped | str:
    """`env -S 'rm -rf x' …`: the string split into words, then the rest."""
    if attached is not None:
        value: Word | None = Word(attached)
    else:
        value = words[i] if i < len(words) else None
        i += 1
    if value is None or not value.static:
        return "env -S splits a string only known when it runs"
    try:
        split = [Word(s) for s in shlex.split(value.text)]
    except ValueError:
        return "env -S string does not split into words"
    shown.append(value.text)
    return Unwrapped(" ".join(shown), split + words[i:])
