"""What a call does to files, as unified diffs for reviewers (pure; `difflib`).

Internal to approval-bot (not a stable API).

`changes_for` gives a call's `FileChange`s: Claude Code's file tools against the file as the
command hook read it (`Original`), else against the call alone; Codex's `apply_patch` hunks;
and any unified diff found in the arguments. Bounded: `MAX_DIFF_PAIRS` line pairs matched per
file, `MAX_DIFF_TEXT` characters kept, whole lines only. What each tool gives and why
`difflib`: docs/ARCHITECTURE.md, "Call context".
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from approvals.models import (
    MAX_DIFF_TEXT,
    MAX_EVENT_BYTES,
    MAX_FILE_CHANGES,
    ApprovalEvent,
    CallContext,
    DiffBasis,
    FileAction,
    FileChange,
)

#: Lines of context around each change (as `diff -u`).
CONTEXT_LINES = 3
#: The most line pairs `difflib` compares for one file, over all the gaps between the
#: anchors: about 20 ms in its worst case here; past it a gap is shown removed-then-added.
MAX_DIFF_PAIRS = 1_000_000
#: Files of more lines than this (old and new together) are not compared line by line.
MAX_COMPARED_LINES = 100_000
#: A diff line longer than this is not shown (it could not fit a 3,000-character Slack
#: section whole): the change is summarised instead.
MAX_LINE_CHARS = 2500
#: Strings of the arguments looked at for a unified diff (the rest of the call is ignored).
MAX_SCANNED_STRINGS = 200

Basis = DiffBasis


@dataclass(frozen=True, slots=True)
class Original:
    """A file as the agent's command hook found it: `exists`, and its `text` when it was read
    (None: not read, for the reason in `note`)."""

    exists: bool
    text: str | None = None
    note: str | None = None


# -- building one diff ------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes for `a` → `b`, with the common head and tail cut off first. A middle
    of more than `MAX_DIFF_PAIRS` line pairs is first split at the lines that occur once in
    each and in the same order (patience anchors, O(n log n)), and each gap is matched alone;
    a gap still too big is shown removed-then-added."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    ops: list[tuple[str, int, int, int, int]] = []
    if head:
        ops.append(("equal", 0, head, 0, head))
    a_end, b_end = len(a) - tail, len(b) - tail
    if (a_end - head) * (b_end - head) > MAX_DIFF_PAIRS:
        spans = _anchored(a, b, head, a_end, head, b_end)
    else:
        spans = [(head, a_end, head, b_end, False)]
    pairs = [MAX_DIFF_PAIRS]  # difflib's work left for this file, shared by its gaps
    for a1, a2, b1, b2, anchor in spans:
        ops += [("equal", a1, a2, b1, b2)] if anchor else _matched(a, b, a1, a2, b1, b2, pairs)
    if tail:
        ops.append(("equal", a_end, len(a), b_end, len(b)))
    return _merged(ops)


def _matched(
    a: Sequence[str],
    b: Sequence[str],
    a1: int,
    a2: int,
    b1: int,
    b2: int,
    pairs: list[int],
) -> list[tuple[str, int, int, int, int]]:
    """Opcodes for `a[a1:a2]` → `b[b1:b2]`: difflib while the file's `pairs` budget lasts,
    else removed-then-added."""
    if a1 == a2 and b1 == b2:
        return []
    if a1 == a2:
        return [("insert", a1, a1, b1, b2)]
    if b1 == b2:
        return [("delete", a1, a2, b1, b1)]
    if a2 - a1 == 1 and b2 - b1 == 1:
        return [("equal" if a[a1] == b[b1] else "replace", a1, a2, b1, b2)]
    work = (a2 - a1) * (b2 - b1)
    if work > pairs[0]:
        return [("replace", a1, a2, b1, b2)]
    pairs[0] -= work
    matcher = difflib.SequenceMatcher(None, a[a1:a2], b[b1:b2], autojunk=True)
    return [
        (tag, i1 + a1, i2 + a1, j1 + b1, j2 + b1) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]


def _anchored(
    a: Sequence[str], b: Sequence[str], a1: int, a2: int, b1: int, b2: int
) -> list[tuple[int, int, int, int, bool]]:
    """`a[a1:a2]` and `b[b1:b2]` cut into spans at their patience anchors (lines found once
    in each, kept in the same order by a longest increasing subsequence); each anchor is an
    equal span of one line (flagged True)."""
    count_a: dict[str, int] = {}
    for line in a[a1:a2]:
        count_a[line] = count_a.get(line, 0) + 1
    count_b: dict[str, int] = {}
    where_b: dict[str, int] = {}
    for j in range(b1, b2):
        count_b[b[j]] = count_b.get(b[j], 0) + 1
        where_b[b[j]] = j
    pairs = [
        (i, where_b[a[i]]) for i in range(a1, a2) if count_a[a[i]] == 1 and count_b.get(a[i]) == 1
    ]
    # Longest increasing subsequence of the b positions (patience sorting).
    tops: list[int] = []
    top_index: list[int] = []
    back: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        at = bisect.bisect_left(tops, j)
        if at == len(tops):
            tops.append(j)
            top_index.append(k)
        else:
            tops[at] = j
            top_index[at] = k
        back[k] = top_index[at - 1] if at else -1
    chain: list[tuple[int, int]] = []
    k = top_index[-1] if top_index else -1
    while k != -1:
        chain.append(pairs[k])
        k = back[k]
    chain.reverse()
    spans: list[tuple[int, int, int, int, bool]] = []
    i, j = a1, b1
    for ai, bj in chain:
        spans.append((i, ai, j, bj, False))
        spans.append((ai, ai + 1, bj, bj + 1, True))
        i, j = ai + 1, bj + 1
    spans.append((i, a2, j, b2, False))
    return spans


def _merged(ops: list[tuple[str, int, int, int, int]]) -> list[tuple[str, int, int, int, int]]:
    """Adjacent opcodes of one tag joined (anchors between gaps make many small ones)."""
    out: list[tuple[str, int, int, int, int]] = []
    for op in ops:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if out and out[-1][0] == op[0] and out[-1][2] == op[1] and out[-1][4] == op[3]:
            last = out[-1]
            out[-1] = (last[0], last[1], op[2], last[3], op[4])
        else:
            out.append(op)
    return out


def _grouped(
    ops: list[tuple[str, int, int, int, int]], n: int = CONTEXT_LINES
) -> Iterator[list[tuple[str, int, int, int, int]]]:
    """Hunks of opcodes with `n` lines of context (difflib's `get_grouped_opcodes`)."""
    if not ops or all(op[0] == "equal" for op in ops):
        return
    codes = list(ops)
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, length: int) -> str:
    """A hunk header's range, as `difflib.unified_diff` writes it."""
    beginning = start + 1
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


class _TooLarge(Exception):
    """Two texts of more lines than `MAX_COMPARED_LINES` together: summarised, not compared."""

    def __init__(self, old: int, new: int) -> None:
        super().__init__(f"{old:,} lines → {new:,} lines: too large to compare line by line")
        self.old, self.new = old, new


def unified(old: str, new: str) -> tuple[list[str], int, int]:
    """(diff lines, added, removed) for `old` → `new`: hunks with `CONTEXT_LINES` of context,
    numbered as `diff -u` numbers them (`_TooLarge` past `MAX_COMPARED_LINES`)."""
    a, b = _lines(old), _lines(new)
    out: list[str] = []
    added = removed = 0
    if len(a) + len(b) > MAX_COMPARED_LINES:
        raise _TooLarge(len(a), len(b))
    for group in _grouped(_opcodes(a, b)):
        first, last = group[0], group[-1]
        old_range = _range(first[1], last[2] - first[1])
        new_range = _range(first[3], last[4] - first[3])
        out.append(f"@@ -{old_range} +{new_range} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                out.extend("-" + line for line in a[i1:i2])
                removed += i2 - i1
            if tag in ("replace", "insert"):
                out.extend("+" + line for line in b[j1:j2])
                added += j2 - j1
    return out, added, removed


# -- one file's change --------------------------------------------------------------------------


class _Budget:
    """The diff text left for the rest of a call's files (`MAX_DIFF_TEXT`)."""

    def __init__(self, chars: int = MAX_DIFF_TEXT) -> None:
        self.chars = chars


def _binary(*texts: str | None) -> bool:
    return any(text is not None and "\x00" in text for text in texts)


def _change(
    path: str,
    action: FileAction,
    lines: list[str],
    added: int,
    removed: int,
    basis: Basis,
    budget: _Budget,
    summary: str | None = None,
) -> FileChange:
    """A `FileChange` holding as many whole lines of `lines` as the budget leaves; lines too
    long for a Slack section make it a summary."""
    longest = max((len(line) for line in lines), default=0)
    if longest > MAX_LINE_CHARS:
        note = f"lines too long to show (the longest is {longest:,} characters)"
        return FileChange(
            path=path,
            action=action,
            added=added,
            removed=removed,
            omitted=len(lines),
            summary=f"{summary}; {note}" if summary else note,
            basis=basis,
        )
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget.chars:
            break
        kept.append(line)
        used += len(line) + 1
    budget.chars -= used
    omitted = len(lines) - len(kept)
    if omitted and summary is None:
        summary = f"large change: the first {len(kept):,} of {len(lines):,} diff lines are kept"
    return FileChange(
        path=path,
        action=action,
        diff="\n".join(kept),
        added=added,
        removed=removed,
        omitted=omitted,
        summary=summary,
        basis=basis,
    )


def _summary_only(
    path: str, action: FileAction, summary: str, basis: Basis = "call", **counts: int
) -> FileChange:
    return FileChange(path=path, action=action, summary=summary, basis=basis, **counts)


def _count(text: str) -> int:
    return len(_lines(text))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _not_read(original: Original | None) -> str:
    if original is None:
        return "the current file was not read"
    return (
        f"the current file was not read ({original.note})"
        if original.note
        else ("the current file was not read")
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _edit(
    path: str,
    edits: list[tuple[str, str, bool]],
    original: Original | None,
    budget: _Budget,
) -> FileChange:
    """`Edit` / `MultiEdit`: each (old, new, replace_all) in order."""
    if _binary(*(o for o, _, _ in edits), *(n for _, n, _ in edits)):
        return _summary_only(path, "edit", "binary content")
    if original is not None and original.text is not None and not _binary(original.text):
        text, problem = original.text, None
        for old, new, replace_all in edits:
            found = text.count(old) if old else 0
            if old and found == 0:
                problem = "the text to replace is not in the file as read"
                break
            if old and found > 1 and not replace_all:
                problem = f"the text to replace is in the file {found} times"
                break
            if not old:  # an empty old_string creates the file (Claude Code)
                text = new if not text else text
                continue
            text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        if problem is None:
            lines, added, removed = unified(original.text, text)
            action: FileAction = "create" if not original.exists else "edit"
            return _change(path, action, lines, added, removed, "file", budget)
        note: str | None = f"{problem}: shown against the call alone"
    else:
        note = None if original is None else _not_read(original)
    lines, added, removed = [], 0, 0
    for old, new, _ in edits:
        hunk, plus, minus = unified(old, new)
        lines += hunk
        added += plus
        removed += minus
    return _change(path, "edit", lines, added, removed, "call", budget, note)


def _write(path: str, content: str, original: Original | None, budget: _Budget) -> FileChange:
    if _binary(content):
        return _summary_only(path, "write", f"binary content, {len(content):,} characters")
    n = _count(content)
    if original is not None and original.exists and original.text is not None:
        if _binary(original.text):
            return _summary_only(path, "write", "replaces a binary file", "file", added=n)
        lines, added, removed = unified(original.text, content)
        if not lines:
            return _summary_only(path, "write", "no change to the file's content", "file")
        return _change(path, "write", lines, added, removed, "file", budget)
    lines = ["@@ -0,0 +" + _range(0, n) + " @@", *("+" + line for line in _lines(content))]
    if original is not None and not original.exists:
        return _change(
            path, "create", lines, n, 0, "file", budget, f"new file, {_plural(n, 'line')}"
        )
    # Not read (the http hook never reads a path; the command hook could not): new lines.
    summary = f"new file, {_plural(n, 'line')}"
    if original is not None:
        summary += f" as far as is known ({_not_read(original)})"
    return _change(path, "write", lines, n, 0, "call", budget, summary)


def _cell_source(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def _notebook(
    path: str, arguments: Mapping[str, Any], original: Original | None, budget: _Budget
) -> FileChange:
    """`NotebookEdit`: one cell replaced, inserted or deleted."""
    cell = _str(arguments.get("cell_id")) or ""
    mode = _str(arguments.get("edit_mode")) or "replace"
    new = _str(arguments.get("new_source")) or ""
    where = f"cell {cell}" if cell else "a cell"
    old: str | None = None
    if original is not None and original.text is not None and cell:
        try:
            notebook = json.loads(original.text)
            for found in notebook.get("cells") or []:
                if isinstance(found, dict) and found.get("id") == cell:
                    old = _cell_source(found.get("source"))
                    break
        except (ValueError, AttributeError, RecursionError):
            old = None
    if mode == "delete":
        if old is None:
            return _summary_only(path, "notebook", f"deletes {where}")
        lines, added, removed = unified(old, "")
        return _change(path, "notebook", lines, added, removed, "file", budget, f"deletes {where}")
    if mode == "insert":
        lines, added, removed = unified("", new)
        return _change(path, "notebook", lines, added, removed, "call", budget, "inserts a cell")
    if old is None:
        lines, added, removed = unified("", new)
        note = f"replaces {where}; its old source was not read"
        return _change(path, "notebook", lines, added, removed, "call", budget, note)
    lines, added, removed = unified(old, new)
    return _change(path, "notebook", lines, added, removed, "file", budget, f"replaces {where}")


# -- patches and diffs a call carries -------------------------------------------------------------

_APPLY_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")
_MOVE_TO = re.compile(r"^\*\*\* Move to: (.+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADER = re.compile(r"^diff --git (?:\"?a/)?(.+?)\"? (?:\"?b/)?(.+?)\"?$")


def _apply_patch(patch: str, budget: _Budget) -> list[FileChange]:
    """Codex's `apply_patch` format: `*** Begin Patch`, `*** Add|Update|Delete File: path`
    sections of `@@` hunks and ` `/`-`/`+` lines, `*** End Patch`."""
    changes: list[FileChange] = []
    path: str | None = None
    action: FileAction = "edit"
    lines: list[str] = []
    summary: str | None = None

    def close() -> None:
        if path is None:
            return
        added = sum(1 for line in lines if line.startswith("+"))
        removed = sum(1 for line in lines if line.startswith("-"))
        if action == "delete":
            changes.append(_summary_only(path, "delete", "deletes the file", "patch"))
        elif action == "create":
            new = f"new file, {_plural(added, 'line')}"
            body = ["@@ -0,0 +" + _range(0, added) + " @@", *lines]
            changes.append(_change(path, "create", body, added, 0, "patch", budget, new))
        else:
            changes.append(_change(path, action, lines, added, removed, "patch", budget, summary))

    for line in _lines(patch):
        header = _APPLY_PATCH_FILE.match(line)
        if header:
            close()
            kind, path = header.group(1), header.group(2).strip()
            action = {"Add": "create", "Update": "edit", "Delete": "delete"}[kind]  # type: ignore[assignment]
            lines, summary = [], None
            continue
        if path is None or line in ("*** Begin Patch", "*** End Patch", "*** End of File"):
            continue
        moved = _MOVE_TO.match(line)
        if moved:
            action, summary = "move", f"moves it to {moved.group(1).strip()}"
            continue
        if line.startswith(("@@", "+", "-", " ")) or line == "":
            lines.append(line if line else " ")
    close()
    return changes


def _path_of(header: str) -> str | None:
    """The path of a `---`/`+++` line (`a/`/`b/` dropped); None for /dev/null."""
    name = header[4:].split("\t", 1)[0].strip()
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    if name == "/dev/null" or not name:
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def _unified_files(text: str, budget: _Budget) -> list[FileChange]:
    """Per-file changes of a unified diff (plain `diff -u` or `git diff`), read by its hunk
    counts; lines outside hunks (headers, `index`, mode lines) are not shown."""
    lines = _lines(text)
    changes: list[FileChange] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _path_of(line), _path_of(lines[i + 1])
        i += 2
        body: list[str] = []
        added = removed = 0
        while i < len(lines):
            hunk = _HUNK.match(lines[i])
            if not hunk:
                break
            body.append(lines[i])
            left = int(hunk.group(2)) if hunk.group(2) is not None else 1
            right = int(hunk.group(4)) if hunk.group(4) is not None else 1
            i += 1
            while i < len(lines) and (left > 0 or right > 0):
                row = lines[i]
                if row.startswith("\\"):  # "\ No newline at end of file"
                    body.append(row)
                elif row.startswith("-"):
                    left, removed = left - 1, removed + 1
                    body.append(row)
                elif row.startswith("+"):
                    right, added = right - 1, added + 1
                    body.append(row)
                elif row.startswith(" ") or row == "":
                    left, right = left - 1, right - 1
                    body.append(row or " ")
                else:
                    break
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):
                body.append(lines[i])
                i += 1
        if not body:
            continue
        if new is None and old is not None:
            changes.append(
                _summary_only(old, "delete", "deletes the file", "patch", removed=removed)
            )
            continue
        path = new or old or "?"
        action: FileAction = "create" if old is None else "edit"
        summary = f"new file, {_plural(added, 'line')}" if old is None else None
        changes.append(_change(path, action, body, added, removed, "patch", budget, summary))
    return changes


def _strings(value: Any) -> Iterator[str]:
    """The string values of the arguments, depth first, at most `MAX_SCANNED_STRINGS`."""
    stack = [value]
    seen = 0
    while stack and seen < MAX_SCANNED_STRINGS:
        item = stack.pop()
        if isinstance(item, str):
            seen += 1
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _looks_like_diff(text: str) -> bool:
    """A unified diff (`+++ ` and `@@ ` lines) or a Codex patch (`*** Begin Patch`)."""
    unified_diff = "\n+++ " in text and "\n@@ " in text
    return unified_diff or "*** Begin Patch" in text


# -- a call's changes ---------------------------------------------------------------------------


def changes_for(
    tool_name: str,
    arguments: Mapping[str, Any],
    originals: Mapping[str, Original] | None = None,
) -> tuple[tuple[FileChange, ...], int]:
    """(the file changes of a call, how many more files it changes than are kept).
    `originals`: the files as the agent's command hook read them, by the path the call
    names. Never raises for what a call holds: a shape not understood is no change."""
    originals = originals or {}
    budget = _Budget()
    found: list[FileChange] = []
    path = _str(arguments.get("file_path")) or _str(arguments.get("notebook_path"))
    try:
        _claude_changes(tool_name, arguments, path, originals, budget, found)
    except _TooLarge as e:
        action: FileAction = "write" if tool_name == "Write" else "edit"
        found.append(_summary_only(path or "?", action, str(e)))
    if not found and tool_name not in CLAUDE_TOOLS:
        for text in _strings(dict(arguments)):
            if _looks_like_diff(text):
                found += (
                    _apply_patch(text, budget)
                    if "*** Begin Patch" in text or tool_name == "apply_patch"
                    else _unified_files(text, budget)
                )
                if found:
                    break
    return tuple(found[:MAX_FILE_CHANGES]), max(0, len(found) - MAX_FILE_CHANGES)


#: Claude Code's file tools, whose arguments are read as such (never scanned for a diff).
CLAUDE_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})


def compares(tool_name: str) -> bool:
    """Whether drawing this tool's changes may compare two texts line by line (up to about
    0.1 s for the largest files): callers on an event loop run it in a worker thread."""
    return tool_name in CLAUDE_TOOLS


def _claude_changes(
    tool_name: str,
    arguments: Mapping[str, Any],
    path: str | None,
    originals: Mapping[str, Original],
    budget: _Budget,
    found: list[FileChange],
) -> None:
    if tool_name in ("Edit", "MultiEdit", "Write") and path:
        original = originals.get(path)
        if tool_name == "Write":
            content = _str(arguments.get("content"))
            if content is not None:
                found.append(_write(path, content, original, budget))
        else:
            raw = [arguments] if tool_name == "Edit" else arguments.get("edits")
            edits = []
            for edit in raw if isinstance(raw, list) else []:
                if isinstance(edit, Mapping):
                    old, new = _str(edit.get("old_string")), _str(edit.get("new_string"))
                    if old is not None and new is not None:
                        edits.append((old, new, edit.get("replace_all") is True))
            if edits:
                found.append(_edit(path, edits, original, budget))
    elif tool_name == "NotebookEdit" and path:
        found.append(_notebook(path, arguments, originals.get(path), budget))


def with_changes(
    event: ApprovalEvent, originals: Mapping[str, Original] | None = None
) -> ApprovalEvent:
    """`event` with the file changes of its call in its context (kept as they are when the
    context already has some), and a context that keeps the event within `MAX_EVENT_BYTES`
    (`fit`). A call that changes no file keeps its context as it is."""
    context = event.context or CallContext()
    if not context.files:
        files, more = changes_for(event.tool_name, event.arguments, originals)
        if files:
            context = context.model_copy(update={"files": files, "more_files": more})
    if context.empty:
        return event.model_copy(update={"context": None}) if event.context is not None else event
    return fit(event.model_copy(update={"context": context}))


def fit(event: ApprovalEvent, limit: int = MAX_EVENT_BYTES) -> ApprovalEvent:
    """`event` within `limit` bytes as stored, shedding context first: the diffs' lines (their
    counts and summaries stay), then the whole context. What the call does is never touched:
    a call that fits without its context is never refused for it."""
    context = event.context
    if context is None or len(event.model_dump_json().encode()) <= limit:
        return event
    shed = tuple(
        change.model_copy(
            update={
                "diff": "",
                "omitted": change.omitted + (change.diff.count("\n") + 1 if change.diff else 0),
                "summary": change.summary or "too large to keep with the request",
            }
        )
        for change in context.files
    )
    lighter = event.model_copy(update={"context": context.model_copy(update={"files": shed})})
    if len(lighter.model_dump_json().encode()) <= limit:
        return lighter
    return event.model_copy(update={"context": None})
