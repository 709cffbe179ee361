"""Diffs of what a call does to files (`approvals/_internal/file_changes.py`): Claude Code's Edit,
MultiEdit, Write and NotebookEdit, Codex's apply_patch, unified diffs in any call; limits."""

from __future__ import annotations

import difflib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals._internal import file_changes as fc
from approvals._internal.file_changes import Original, changes_for, fit, unified, with_changes
from approvals.models import (
    MAX_DIFF_TEXT,
    MAX_EVENT_BYTES,
    MAX_FILE_CHANGES,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    FileChange,
)

CLIENT = (
    "import os\nimport time\n\nMAX_RETRIES = 3\nBACKOFF_SECONDS = 0.5\n\n\ndef fetch():\n    pass\n"
)
PATH = "/srv/app/src/client.py"


def one(
    tool: str, arguments: dict[str, object], originals: dict[str, Original] | None = None
) -> FileChange:
    found, more = changes_for(tool, arguments, originals)
    assert more == 0 and len(found) == 1, found
    return found[0]


def test_edit_against_the_file_has_real_line_numbers_and_context() -> None:
    edit = {"file_path": PATH, "old_string": "MAX_RETRIES = 3", "new_string": "MAX_RETRIES = 5"}
    change = one("Edit", edit, {PATH: Original(True, CLIENT)})
    assert change.diff.splitlines() == [
        "@@ -1,7 +1,7 @@",
        " import os",
        " import time",
        " ",
        "-MAX_RETRIES = 3",
        "+MAX_RETRIES = 5",
        " BACKOFF_SECONDS = 0.5",
        " ",
        " ",
    ]
    assert (change.added, change.removed, change.basis, change.action) == (1, 1, "file", "edit")


def test_edit_without_the_file_is_the_call_alone() -> None:
    edit = {"file_path": PATH, "old_string": "a\nb\nc", "new_string": "a\nB\nc\nd"}
    change = one("Edit", edit)
    assert change.basis == "call" and change.summary is None
    assert change.diff.splitlines() == ["@@ -1,3 +1,4 @@", " a", "-b", "+B", " c", "+d"]


@pytest.mark.parametrize(
    ("text", "replace_all", "why"),
    [("x = 1\n", False, "not in the file"), ("a = 1\na = 1\n", False, "in the file 2 times")],
)
def test_an_edit_that_would_fail_is_shown_against_the_call_and_says_why(
    text: str, replace_all: bool, why: str
) -> None:
    edit = {"file_path": PATH, "old_string": "a = 1", "new_string": "a = 2"}
    change = one("Edit", {**edit, "replace_all": replace_all}, {PATH: Original(True, text)})
    assert change.basis == "call" and change.summary is not None and why in change.summary


def test_edit_replace_all_changes_every_occurrence() -> None:
    text = "retry = 3\nother\nretry = 3\n"
    edit = {"file_path": PATH, "old_string": "retry = 3", "new_string": "retry = 5"}
    change = one("Edit", {**edit, "replace_all": True}, {PATH: Original(True, text)})
    assert (change.added, change.removed) == (2, 2)


def test_multi_edit_applies_its_edits_in_order() -> None:
    edits = [
        {"old_string": "MAX_RETRIES = 3", "new_string": "MAX_RETRIES = 5"},
        {"old_string": "MAX_RETRIES = 5", "new_string": "MAX_RETRIES = 7"},  # sees the first
        {"old_string": "    pass", "new_string": "    return None"},
    ]
    change = one("MultiEdit", {"file_path": PATH, "edits": edits}, {PATH: Original(True, CLIENT)})
    assert "+MAX_RETRIES = 7" in change.diff and "+MAX_RETRIES = 5" not in change.diff
    assert (change.added, change.removed, change.basis) == (2, 2, "file")
    # Without the file: each edit's own lines, one after another.
    change = one("MultiEdit", {"file_path": PATH, "edits": edits})
    assert change.diff.count("@@") == 6 and change.basis == "call"


def test_write_over_a_file_new_file_and_unknown_file() -> None:
    new = CLIENT.replace("0.5", "1.5")
    change = one("Write", {"file_path": PATH, "content": new}, {PATH: Original(True, CLIENT)})
    assert (change.added, change.removed, change.action) == (1, 1, "write")
    created = one("Write", {"file_path": PATH, "content": "a\nb\n"}, {PATH: Original(False)})
    assert created.action == "create" and created.summary == "new file, 2 lines"
    assert created.diff.splitlines() == ["@@ -0,0 +1,2 @@", "+a", "+b"]
    unknown = one("Write", {"file_path": PATH, "content": "a\nb\n"})  # the http hook reads nothing
    assert unknown.basis == "call" and unknown.summary == "new file, 2 lines"
    unread = one(
        "Write",
        {"file_path": PATH, "content": "a\n"},
        {PATH: Original(True, None, "permission denied")},
    )
    assert unread.summary is not None and "permission denied" in unread.summary


def test_binary_content_is_summarised() -> None:
    change = one("Write", {"file_path": PATH, "content": "PK\x03\x04\x00\x00data"})
    assert change.diff == "" and change.summary is not None and "binary" in change.summary


def test_notebook_edit_replace_insert_delete() -> None:
    notebook = {
        "cells": [
            {"id": "a1b2", "cell_type": "code", "source": ["import pandas as pd\n", "df = 1\n"]}
        ],
        "nbformat": 4,
    }
    original = {"/nb.ipynb": Original(True, json.dumps(notebook))}
    base = {"notebook_path": "/nb.ipynb", "cell_id": "a1b2"}
    replaced = one(
        "NotebookEdit", {**base, "new_source": "import pandas as pd\ndf = 2\n"}, original
    )
    assert "-df = 1" in replaced.diff and "+df = 2" in replaced.diff and replaced.basis == "file"
    inserted = one("NotebookEdit", {**base, "edit_mode": "insert", "new_source": "x = 1"}, original)
    assert inserted.added == 1 and inserted.removed == 0
    deleted = one("NotebookEdit", {**base, "edit_mode": "delete"}, original)
    assert deleted.removed == 2 and deleted.summary == "deletes cell a1b2"


def test_codex_apply_patch_per_file() -> None:
    patch = (
        "*** Begin Patch\n*** Update File: src/client.py\n@@\n import time\n \n"
        "-MAX_RETRIES = 3\n+MAX_RETRIES = 5\n*** Add File: docs/retries.md\n+# Retries\n+Five.\n"
        "*** Delete File: old.txt\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n"
        "*** End Patch\n"
    )
    found, _ = changes_for("apply_patch", {"command": patch})
    assert [(c.path, c.action, c.added, c.removed) for c in found] == [
        ("src/client.py", "edit", 1, 1),
        ("docs/retries.md", "create", 2, 0),
        ("old.txt", "delete", 0, 0),
        ("a.py", "move", 1, 1),
    ]
    assert found[3].summary == "moves it to b.py"


def test_a_unified_diff_in_any_argument() -> None:
    diff = (
        "diff --git a/src/client.py b/src/client.py\nindex 3f9c2e1..7b5d408 100644\n"
        "--- a/src/client.py\n+++ b/src/client.py\n@@ -2,4 +2,4 @@ import os\n import time\n \n"
        "-MAX_RETRIES = 3\n+MAX_RETRIES = 5\n BACKOFF_SECONDS = 0.5\n"
        "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\n"
    )
    command = f"git apply <<'EOF'\n{diff}EOF"
    found, _ = changes_for("Bash", {"command": command, "description": "apply the fix"})
    assert [(c.path, c.action, c.added, c.removed) for c in found] == [
        ("src/client.py", "edit", 1, 1),
        ("gone.txt", "delete", 0, 1),
        ("new.txt", "create", 1, 0),
    ]
    # Deep in an MCP tool's arguments too.
    found, _ = changes_for("mcp__github__create_pr", {"body": {"patch": diff}})
    assert len(found) == 3
    assert changes_for("Bash", {"command": "ls -la"}) == ((), 0)


def test_hunk_counts_are_followed_so_a_removed_dashes_line_is_a_line() -> None:
    """`--- x` inside a hunk is a removed line `-- x`, not a header."""
    diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,1 @@\n--- x\n keep\n"
    (change,), _ = changes_for("tool", {"diff": diff})
    assert (change.added, change.removed) == (0, 1)


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(st.sampled_from(["a", "b", "c", "d", "", "x = 1"]), max_size=30),
    b=st.lists(st.sampled_from(["a", "b", "c", "e", "", "x = 2"]), max_size=30),
)
def test_property_unified_is_a_correct_diff(a: list[str], b: list[str]) -> None:
    """Applying our hunks to the old lines gives the new ones, and the counts match."""
    lines, added, removed = unified("\n".join(a), "\n".join(b))
    assert added == sum(1 for x in lines if x.startswith("+"))
    assert removed == sum(1 for x in lines if x.startswith("-"))
    old = "\n".join(a).splitlines()
    out: list[str] = []
    at = 0
    for line in lines:
        if line.startswith("@@"):
            start = int(line.split()[1].split(",")[0].lstrip("-"))
            length = line.split()[1].split(",")
            first = start - 1 if (len(length) == 1 or length[1] != "0") else start
            out += old[at:first]
            at = first
        elif line.startswith((" ", "-")):
            assert old[at] == line[1:]
            at += 1
            if line.startswith(" "):
                out.append(line[1:])
        else:
            out.append(line[1:])
    out += old[at:]
    assert out == "\n".join(b).splitlines()


def test_unified_matches_difflib_on_small_files() -> None:
    rng = random.Random(7)
    for _ in range(200):
        a = [rng.choice("abcdefgh") + str(i) for i in range(rng.randint(0, 40))]
        b = [x for x in a if rng.random() > 0.1]
        b[rng.randint(0, len(b)) : 0] = ["new"]
        ours, _, _ = unified("\n".join(a), "\n".join(b))
        assert ours == list(difflib.unified_diff(a, b, lineterm="", n=3))[2:]


def test_big_rewrites_stay_linear_and_correct() -> None:
    """2,000 and 20,000 lines with an edit every 7th: anchored on unique lines, the counts
    are the edits' (not a whole-file replace); lines with few distinct values past the
    pair budget are shown removed-then-added, still a correct diff."""
    for n in (2000, 20_000):
        a = [f"line {i}" for i in range(n)]
        b = [f"changed {x}" if i % 7 == 0 else x for i, x in enumerate(a)]
        _, added, removed = unified("\n".join(a), "\n".join(b))
        assert added == removed == len(range(0, n, 7))
    a = [str(i % 101) for i in range(5000)]
    b = [str((i * 7) % 103) for i in range(5000)]
    lines, added, removed = unified("\n".join(a), "\n".join(b))
    assert added + removed == sum(1 for x in lines if x[:1] in "+-")


def test_huge_and_long_lined_changes_are_summarised_never_cut_mid_line() -> None:
    long_line = "x" * (fc.MAX_LINE_CHARS + 1)
    change = one("Write", {"file_path": PATH, "content": f"a\n{long_line}\n"})
    assert change.diff == "" and change.summary is not None and "too long" in change.summary
    big = "\n".join(f"row {i} " + "y" * 60 for i in range(20_000))
    change = one("Write", {"file_path": PATH, "content": big})
    assert len(change.diff) <= MAX_DIFF_TEXT and change.omitted > 0
    assert change.added == 20_000  # counted whole
    kept = change.diff.split("\n")
    assert all(line == "@@ -0,0 +1,20000 @@" or line.startswith("+row ") for line in kept)
    assert kept[-1].endswith("y" * 60)  # the last line kept is whole
    too_many = "\n".join(str(i) for i in range(fc.MAX_COMPARED_LINES))
    change = one("Write", {"file_path": PATH, "content": "z"}, {PATH: Original(True, too_many)})
    assert change.summary is not None and "too large to compare" in change.summary


def test_many_files_are_counted_past_the_limit() -> None:
    patch = "*** Begin Patch\n" + "".join(
        f"*** Add File: f{i}.txt\n+{i}\n" for i in range(MAX_FILE_CHANGES + 5)
    )
    found, more = changes_for("apply_patch", {"command": patch + "*** End Patch"})
    assert len(found) == MAX_FILE_CHANGES and more == 5


def test_the_context_is_not_part_of_the_fingerprint() -> None:
    """A retried call with a reworded reason (or a diff drawn again) is the same call."""
    event = ApprovalEvent(
        tool_name="Edit", arguments={"file_path": PATH, "old_string": "a", "new_string": "b"}
    )
    first = ApprovalRequest(
        event=with_changes(event.model_copy(update={"context": CallContext(reason="one")}))
    )
    again = ApprovalRequest(event=event.model_copy(update={"context": CallContext(reason="two")}))
    assert first.event.context is not None and first.event.context.files
    assert first.fingerprint == again.fingerprint


def test_a_context_that_would_pass_the_size_limit_is_shed_never_the_call() -> None:
    content = "w" * (MAX_EVENT_BYTES - 100_000)
    event = ApprovalEvent(
        tool_name="Write",
        arguments={"file_path": PATH, "content": content.replace("w" * 100, "w" * 99 + "\n")},
    )
    fitted = with_changes(event)  # the diff repeats the content: too much for both
    assert fitted.arguments == event.arguments
    assert len(fitted.model_dump_json().encode()) <= MAX_EVENT_BYTES
    assert fitted.context is not None
    (change,) = fitted.context.files
    assert change.diff == "" and change.added > 0 and change.omitted > 0
    huge_reason = event.model_copy(
        update={
            "arguments": {"blob": "v" * (MAX_EVENT_BYTES - 1000)},
            "context": CallContext(reason="r" * 2000),
        }
    )
    assert fit(huge_reason).context is None
